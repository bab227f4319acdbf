"""The rank of every process of a dataset, across its reports: what ``trace`` and ``plot`` of a
multi-rank dataset label, cut and draw by, and what the ``collectives`` table numbers its rows by.

A multi-rank run reaches a dataset in three shapes: one report per rank (``report=rank<K>``), one
report holding every rank (one nsys session over the launcher), or several reports each holding
several ranks (one nsys session per node). Per report, nvbridge.dataset.ranks names its ranks (a
process's rank mark first). Across reports:

- where no report's processes marked several ranks, a report's rank is the one it recorded
  (``meta.rank``: its mark, ``RANK``, the file name), else its position (all of them, when any is
  missing or repeated): the rule the trace and plot of one report per rank always had;
- where some report's processes marked several ranks (``meta.process_ranks``), each of its
  processes is the rank it marked (a rank process that marked none: a number no mark took);
  every other report is one rank, its recorded one, else the lowest number left
  (:func:`global_ranks`, the collectives table's numbering).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nvbridge.dataset.check import is_partitioned, read_meta
from nvbridge.dataset.ranks import RankTally, Recorded, recorded_ranks
from nvbridge.dataset.report import DatasetTables, load, parse_rank, report_dirs


@dataclass(frozen=True)
class ReportRanks:
    """One report: its folder and name, and the global rank of each of its rank processes."""

    directory: Path
    name: str  # the partition's name without ``report=`` (one report's: its file's stem)
    of: Mapping[int, int]  # process -> rank, in a report of several ranks (else empty: it is ``rank``)
    rank: int  # the report's lowest rank (its rank, when it holds one)
    device_users: Mapping[int, tuple[int, ...]] = field(default_factory=dict)  # device -> processes
    several: bool = False  # its processes marked several ranks: labelled, cut and drawn per process

    def processes(self, ranks: set[int]) -> set[int]:
        return {p for p, r in self.of.items() if r in ranks}


def _local(tables: DatasetTables) -> tuple[dict[int, int], Mapping[int, tuple[int, ...]]]:
    """The report's own numbering (nvbridge.dataset.ranks), reading only the process columns."""
    tally = RankTally()
    for chunk in tables.chunks("ops", RankTally.OPS_COLUMNS):
        tally.add_ops(chunk)
    for chunk in tables.chunks("gpu_ops", RankTally.GPU_COLUMNS):
        tally.add_gpu(chunk)
    found = tally.result(tables.recorded_ranks)
    return {r.process_id: r.rank for r in found.ranks}, found.device_users


def global_ranks(reports: Sequence[tuple[Mapping[str, str | None], Mapping[int, int]]]) -> list[dict[int, int]]:
    """Per report (its meta, its processes' own ranks), each process's rank across the reports: a
    marked process keeps its mark, a one-process report its recorded rank; every other process
    the next number none of those took, in report order (then in its report's rank order)."""
    kept: list[dict[int, int]] = []
    for meta, own in reports:
        marks = _marks(meta)
        rank = parse_rank(meta.get("rank"))
        if len(own) == 1 and rank is not None:
            kept.append(dict.fromkeys(own, rank))
        else:
            kept.append({p: r for p, r in own.items() if p in marks})
    taken = {r for k in kept for r in k.values()}
    free = (n for n in range(1 << 30) if n not in taken)
    out = []
    for (_, own), mine in zip(reports, kept):
        rest = sorted((p for p in own if p not in mine), key=lambda p: own[p])
        out.append({**mine, **{p: next(free) for p in rest}})
    return out


def _marks(meta: Mapping[str, str | None]) -> set[int]:
    """The processes whose rank came from their own rank mark."""
    found: Recorded = recorded_ranks(meta)
    return set(found) if isinstance(found, Mapping) else set()


def marked_several(meta: Mapping[str, str | None]) -> bool:
    """Whether a report's processes marked different ranks (one nsys session over several ranks)."""
    found: Recorded = recorded_ranks(meta)
    return isinstance(found, Mapping) and len(set(found.values())) > 1


def holds_ranks(path: Path) -> bool:
    """A dataset folder of one report whose processes marked several ranks (one nsys session over
    a launcher): traced and plotted per rank as a dataset of many."""
    if not path.is_dir() or is_partitioned(path) or not (path / "meta.parquet").is_file():
        return False
    return marked_several(read_meta(path))


def dataset_ranks(root: str | os.PathLike[str]) -> list[ReportRanks]:
    """Every report of a dataset (a partitioned one's, or the one a folder holds), in rank order.
    Only where some report's processes marked several ranks are the reports' process columns read."""
    path = Path(os.fspath(root))
    dirs = report_dirs(path) or [path]
    metas = [read_meta(d) for d in dirs]
    # a partition's name; one report's is its file's stem, as its collectives table names it
    names = [
        d.name.split("=", 1)[1] if d.name.startswith("report=") else Path(str(m.get("source") or d.name)).stem
        for d, m in zip(dirs, metas)
    ]
    several = [marked_several(m) for m in metas]
    if any(several):
        tables = [load(d, streamed=True) for d in dirs]
        local = [_local(t) for t in tables]
        numbers = global_ranks([(t.meta, own) for t, (own, _) in zip(tables, local)])
        out = []
        for d, n, of, (_, users), many in zip(dirs, names, numbers, local, several):
            low = min(of.values(), default=0)  # a report without marks stays one rank: its lowest
            out.append(ReportRanks(d, n, of if many else dict.fromkeys(of, low), low, users, many))
        return sorted(out, key=lambda r: r.rank)
    found = [parse_rank(m.get("rank")) for m in metas]
    ranks = [int(r or 0) for r in found]
    if any(r is None for r in found) or len(set(found)) != len(found):
        ranks = list(range(len(dirs)))  # not all recorded, or repeated: their order stands for them
    return [ReportRanks(d, n, {}, r) for d, n, r in zip(dirs, names, ranks)]
