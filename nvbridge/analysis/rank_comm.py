"""Exposed communication and overlap per rank, and the cross-rank answer summary and advise share.

Exposed communication of a rank = the time its collectives run that none of its compute
overlaps: the union of its NCCL kernels' intervals minus the union of its other kernels'
(memcpys and memsets are no compute); a rank whose collectives ran on the CPU (gloo) has the
union of its collective ranges as communication and no GPU compute beside it.
``overlap_pct`` = 100 x (communication - exposed) / communication.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.analysis.stragglers import OpTimes, StepStraggler, add_report_ops, stragglers
from nvbridge.columns import merged_intervals, np_col
from nvbridge.dataset import collectives_read
from nvbridge.dataset.collectives import build, unmatched_line
from nvbridge.dataset.report import DatasetTables, is_partitioned, load, report_dirs

GPU_COLUMNS = ["kind", "name", "process_id", "start_ns", "end_ns"]


def covered(start: np.ndarray, end: np.ndarray, cs: np.ndarray, ce: np.ndarray) -> int:
    """Total length of the disjoint sorted intervals (start, end) that the disjoint sorted
    intervals (cs, ce) cover: a prefix sum of coverage, evaluated at every bound."""
    if not len(start) or not len(cs):
        return 0
    prefix = np.concatenate([[0], np.cumsum(ce - cs)])

    def upto(t: np.ndarray) -> np.ndarray:
        j = np.searchsorted(cs, t, side="right") - 1
        inside = np.where(j >= 0, np.minimum(t, ce[np.maximum(j, 0)]) - cs[np.maximum(j, 0)], 0)
        return np.where(j >= 0, prefix[np.maximum(j, 0)] + inside, 0)

    return int((upto(end) - upto(start)).sum())


@dataclass
class CommTally:
    """Per process of one report: NCCL kernel and compute kernel intervals."""

    comm: dict[int, list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)
    compute: dict[int, list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)

    def add(self, gpu_ops: pa.Table) -> None:
        kernels = gpu_ops.filter(pc.equal(gpu_ops.column("kind").cast(pa.string()), "kernel"))
        if not kernels.num_rows:
            return
        nccl = np.asarray(pc.fill_null(pc.starts_with(kernels.column("name").cast(pa.string()), "nccl"), False))
        proc = np_col(kernels, "process_id", fill=-1)
        start, end = np_col(kernels, "start_ns"), np_col(kernels, "end_ns")
        for p in np.unique(proc).tolist():
            mine = proc == p
            for target, sel in ((self.comm, mine & nccl), (self.compute, mine & ~nccl)):
                if sel.any():
                    target.setdefault(p, []).append((start[sel], end[sel]))

    def exposed(self, process: int, cpu: tuple[np.ndarray, np.ndarray] | None) -> tuple[int, int]:
        """(communication ns, exposed ns) of a process."""
        parts = self.comm.get(process) or ([cpu] if cpu is not None else [])
        if not parts:
            return 0, 0
        s, e = merged_intervals(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        total = int((e - s).sum())
        comp = self.compute.get(process, [])
        if not comp:
            return total, total
        cs, ce = merged_intervals(np.concatenate([p[0] for p in comp]), np.concatenate([p[1] for p in comp]))
        return total, total - covered(s, e, cs, ce)


@dataclass(frozen=True, slots=True)
class AcrossRanks:
    """The cross-rank answer: stragglers per step, exposed communication, clocks, matching."""

    steps: tuple[StepStraggler, ...]
    comm_ns: Mapping[int, int]
    exposed_comm_ns: Mapping[int, int]
    overlap_pct: Mapping[int, float]
    clock_reliable: bool | None  # None: one report (one clock)
    meta: Mapping[str, str | None]
    collectives: int
    matched: int
    rank_reports: Mapping[int, str] = field(default_factory=dict)  # rank -> its report (partition name)

    def notes(self) -> list[str]:
        out = []
        if self.clock_reliable is False:
            out.append(
                "clock alignment is unreliable (too few collectives matched, or their ends spread more than "
                "100 us after alignment): cross-rank waits may be off by the residual in ranks_meta.parquet"
            )
        line = unmatched_line(self.meta)
        if line:
            out.append(line)
        return out


def across_ranks(source: str | os.PathLike[str] | DatasetTables) -> AcrossRanks | None:
    """The cross-rank answer of a dataset of several ranks (a partitioned dataset's path, or one
    report's tables: a dataset or a report converted in memory), None where it has one rank."""
    path = None if isinstance(source, DatasetTables) else source
    partitioned = path is not None and is_partitioned(path)
    if isinstance(source, DatasetTables):
        parts: list[tuple[DatasetTables, str | None]] = [(source, None)]
    elif partitioned:
        parts = [(load(d, streamed=True), collectives_read.report_name(d)) for d in report_dirs(source)]
    else:
        parts = [(load(source, streamed=True), None)]
    table = collectives_read.read_collectives(path) if path is not None and partitioned else None
    meta = collectives_read.root_meta(path) if path is not None and partitioned else {}
    if table is None:  # one report (its own table is cheap to match again), or written before the table existed
        matched_now = (
            collectives_read.collectives_of(path)
            if path is not None and partitioned
            else build([collectives_read.read_report(parts[0][0], "report")])
        )
        if not collectives_read.several_ranks(matched_now):
            return None
        table, meta = matched_now.table, dict(matched_now.meta()) if partitioned else {}
    times = OpTimes()
    comm: dict[int, int] = {}
    exposed: dict[int, int] = {}
    for report, name in parts:
        rows = table if name is None else table.filter(pc.equal(table.column("report"), name))
        rank_of = dict(zip(np_col(rows, "process_id").tolist(), np_col(rows, "rank").tolist()))
        add_report_ops(times, report, rank_of)
        offset = int(meta.get(f"clock.{name}.offset_ns") or 0) if name is not None else 0
        _exposed(report, rows, rank_of, offset, comm, exposed)
    overlap = {r: 100.0 * (comm[r] - exposed[r]) / comm[r] for r in comm if comm[r] > 0}
    reliable = meta.get("clock.reliable") == "true" if partitioned else None
    matched = int(np.asarray(table.column("matched")).sum()) if table.num_rows else 0
    rank_reports = dict(zip(np_col(table, "rank").tolist(), table.column("report").to_pylist()))
    return AcrossRanks(
        tuple(stragglers(table, times)), comm, exposed, overlap, reliable, meta, table.num_rows, matched, rank_reports
    )


def _exposed(
    report: DatasetTables,
    rows: pa.Table,
    rank_of: Mapping[int, int],
    offset: int,
    comm: dict[int, int],
    exposed: dict[int, int],
) -> None:
    """One report's ranks' communication and exposed time (collective rows back on its own clock)."""
    tally = CommTally()
    for chunk in report.chunks("gpu_ops", GPU_COLUMNS):
        tally.add(chunk)
    cpu_rows = rows.filter(pc.not_equal(rows.column("source").cast(pa.string()), "nccl_kernel"))
    for proc, rank in rank_of.items():
        mine = cpu_rows.filter(pc.equal(cpu_rows.column("process_id"), proc))
        cpu = (np_col(mine, "start_ns") - offset, np_col(mine, "end_ns") - offset) if mine.num_rows else None
        total, exp = tally.exposed(proc, cpu)
        comm[rank], exposed[rank] = total, exp
