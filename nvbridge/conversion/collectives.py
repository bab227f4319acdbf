"""The collectives table written beside the reports it matches: inside the dataset of one report
of several processes, from the rows the conversion streams (a sink: the dataset is never read
back), and at a many-report dataset's root (with the root meta of the clocks) once every report
is converted."""

from __future__ import annotations

import os
from concurrent.futures import Future
from pathlib import Path

import pyarrow as pa

from nvbridge.dataset import collectives_read, nccl_bytes
from nvbridge.dataset import collectives_scan as scan
from nvbridge.dataset.collectives import ReportCollectives, build
from nvbridge.dataset.ranks import RankTally, recorded_ranks
from nvbridge.engine import WindowRows
from nvbridge.output import publish as outputs
from nvbridge.readers import nccl_payloads
from nvbridge.readers.raw import SourceInfo, WindowSource


class CollectivesSink:
    """Keeps a conversion's communication ranges and NCCL kernels (a few rows per collective)
    and the processes' tallies; at the end, where the report holds several ranks with
    collectives, writes their matched table into the dataset's ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._info: SourceInfo | None = None
        self._start()

    def _start(self) -> None:
        self._tally = RankTally()
        self._ranges: list[pa.Table] = []
        self._kernels: list[pa.Table] = []
        self._payloads: Future[pa.Table] | None = None

    def start(self, source: WindowSource, info: SourceInfo) -> None:
        self._info = info
        self._start()
        # NCCL's NVTX payloads, where the export holds them: a filtered read of their few rows,
        # one SQL pass over NVTX_EVENTS beside the conversion's reads
        self._payloads = nccl_payloads.of_source(source)

    def rows(self, rows: WindowRows) -> None:
        ops = rows.ops.select([c for c in (*scan.OPS_COLUMNS, *scan.OPS_DETAIL) if c in rows.ops.column_names])
        self._tally.add_ops(ops)
        self._ranges.append(scan.comm_rows(ops))
        gpu = rows.gpu_ops.select(scan.GPU_COLUMNS)
        self._tally.add_gpu(gpu)
        self._kernels.append(scan.nccl_kernels(gpu))

    def finish(self, tables: dict[str, pa.Table]) -> None:
        assert self._info is not None, "finish before start"
        meta = _meta(self._info)
        ranges = pa.concat_tables(self._ranges) if self._ranges else None
        payloads = self._payloads.result() if self._payloads is not None else None
        linked = None
        if ranges is not None and payloads is not None and payloads.num_rows:
            # kept beside the report's tables: a many-report root matches them again from there
            linked = nccl_bytes.link(ranges, payloads)
            nccl_bytes.write(linked, self.directory)
        ranks = self._tally.result(recorded_ranks(meta)).ranks
        if len(ranks) < 2 or ranges is None or not self._kernels:
            return
        found = scan.instances(ranges, pa.concat_tables(self._kernels), linked)
        name = Path(self._info.source).stem if self._info.source else "report"
        matched = build([ReportCollectives(name, meta, {r.process_id: r.rank for r in ranks}, found)])
        if collectives_read.several_ranks(matched):
            collectives_read.write(matched, self.directory, root_meta=False)

    def abort(self) -> None:
        self._start()


def _meta(info: SourceInfo) -> dict[str, str | None]:
    """The meta keys the ranks and clocks read, as the dataset's meta will hold them."""
    return {
        "rank": None if info.rank is None else str(info.rank),
        "process_ranks": info.process_ranks,
        "time_base": info.time_base,
        "session_start_utc_ns": None if info.session_start_utc_ns is None else str(info.session_start_utc_ns),
    }


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
