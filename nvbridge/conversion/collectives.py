"""The collectives table written beside the reports it matches: at a many-report dataset's root
(with the root meta of the clocks) once every report is converted, or inside the dataset of one
report of several processes before it is published."""

from __future__ import annotations

import os
from pathlib import Path

from nvbridge.dataset import collectives_read
from nvbridge.output import publish as outputs


def write_root(out: Path) -> None:
    """Match every report of the partitioned dataset ``out`` and write ``collectives.parquet``
    and ``ranks_meta.parquet`` at its root, each renamed into place once complete; reports with
    no collectives across ranks leave (or make) a root without them."""
    matched = collectives_read.collectives_of(out)
    if not collectives_read.several_ranks(matched):
        for name in (collectives_read.FILE, collectives_read.ROOT_META):
            (out / name).unlink(missing_ok=True)
        return
    staged = outputs.staging_file(out / "ranks_meta.parquet")
    try:
        staged.mkdir()
        collectives_read.write(matched, staged, root_meta=True)
        for name in (collectives_read.FILE, collectives_read.ROOT_META):
            os.replace(staged / name, out / name)
    finally:
        for leftover in staged.glob("*") if staged.is_dir() else ():
            leftover.unlink()
        if staged.is_dir():
            staged.rmdir()
        outputs.release(staged)


def write_inside(dataset: Path) -> None:
    """``collectives.parquet`` in a (staged) dataset of one report, where it holds several ranks."""
    if not collectives_read.several_processes(dataset):
        return  # one rank: nothing to match (the common case, one report per rank)
    matched = collectives_read.collectives_of(dataset)
    if collectives_read.several_ranks(matched):
        collectives_read.write(matched, dataset, root_meta=False)
