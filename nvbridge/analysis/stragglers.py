"""Who held everyone back, per step, and what it was doing: from the collectives table
(nvbridge.dataset.collectives: arrivals and waits on one clock) and each rank's ops.

- **The slowest rank of a step** is the one the others waited for: in each of the step's matched
  collectives the last rank to arrive is charged the waits of all the others; the rank charged
  most is the step's slowest, ``late_ns`` the time each other rank waited for it on average, and
  ``waits`` every rank's own wait summed over the step's collectives. Not the longest step:
  ranks in lockstep have equal steps, the waiting rank's step holds the wait.
- **The cause** is the range (op name and module path) whose time on the slowest rank exceeds
  the same range's time on the other ranks (their median) most in that step: self CPU time, or
  GPU time (self and attributed by time) where that exceeds more. Communication ranges and
  ``ProfilerStep#N`` are not candidates (the first hold the others' waits, the second the whole step).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col
from nvbridge.dataset.collectives import is_comm
from nvbridge.dataset.report import DatasetTables

OPS_COLUMNS = ["process_id", "step", "op_name", "module_path", "self_cpu_ns", "self_gpu_ns"]
_GROUP = ["process_id", "step", "op_name", "module_path"]


@dataclass(frozen=True, slots=True)
class Cause:
    """The range that made a rank late in a step."""

    op: str
    module_path: str | None
    excess_ns: int  # its time on the slow rank minus the other ranks' median
    rank_ns: int
    others_ns: int
    time: str  # "cpu" or "gpu": which of its times exceeds


@dataclass(frozen=True, slots=True)
class StepStraggler:
    """One step: the rank the others waited for, by how much, every rank's wait, the cause."""

    step: int
    slowest_rank: int
    late_ns: int
    waits: Mapping[int, int]  # rank -> ns waited at the step's collectives
    collectives: int
    cause: Cause | None = None


@dataclass
class OpTimes:
    """Per (rank, step, op name, module path): self CPU and GPU ns, gathered a part at a time."""

    cpu: dict[tuple[int, int, str, str | None], int] = field(default_factory=dict)
    gpu: dict[tuple[int, int, str, str | None], int] = field(default_factory=dict)

    def add(self, ops: pa.Table, rank_of: Mapping[int, int]) -> None:
        """A part of one report's ops (OPS_COLUMNS, ``time_self_gpu_ns`` where present)."""
        keep = pc.and_(pc.is_valid(ops.column("step")), pc.invert(pa.array(is_comm(ops.column("op_name")))))
        keep = pc.and_(
            keep,
            pc.invert(pc.fill_null(pc.starts_with(ops.column("op_name").cast(pa.string()), "ProfilerStep#"), False)),
        )
        part = ops.filter(keep)
        if not part.num_rows:
            return
        gpu = np_col(part, "self_gpu_ns")
        if "time_self_gpu_ns" in part.column_names:
            gpu = gpu + np_col(part, "time_self_gpu_ns", fill=0)
        part = pa.table(
            {
                "process_id": part.column("process_id"),
                "step": part.column("step"),
                "op_name": part.column("op_name").cast(pa.string()),
                "module_path": part.column("module_path").cast(pa.string()),
                "cpu": part.column("self_cpu_ns"),
                "gpu": pa.array(gpu),
            }
        )
        sums = part.group_by(_GROUP, use_threads=False).aggregate([("cpu", "sum"), ("gpu", "sum")])
        cols = [sums.column(c).to_pylist() for c in (*_GROUP, "cpu_sum", "gpu_sum")]
        for proc, step, name, module, cpu, g in zip(*cols):
            rank = rank_of.get(proc)
            if rank is None:
                continue
            k = (rank, step, name, module)
            self.cpu[k] = self.cpu.get(k, 0) + cpu
            self.gpu[k] = self.gpu.get(k, 0) + g


def add_report_ops(times: OpTimes, report: DatasetTables, rank_of: Mapping[int, int]) -> None:
    """One report's ops, a row group at a time."""
    has = set(report.column_names("ops"))
    columns = [*OPS_COLUMNS, *(["time_self_gpu_ns"] if "time_self_gpu_ns" in has else [])]
    for chunk in report.chunks("ops", columns):
        times.add(chunk, rank_of)


def stragglers(collectives: pa.Table, times: OpTimes) -> list[StepStraggler]:
    """Per step with matched collectives on two or more ranks, its straggler and the cause."""
    t = collectives.filter(pc.and_(collectives.column("matched"), pc.is_valid(collectives.column("step"))))
    if not t.num_rows:
        return []
    step = np_col(t, "step")
    rank = np_col(t, "rank")
    wait = np_col(t, "wait_ns", fill=0)
    arrival = np_col(t, "arrival_ns")
    comm = np.array(t.column("comm").to_pylist())
    seq = np_col(t, "seq")
    out = []
    for s in np.unique(step).tolist():
        mine = step == s
        ranks = sorted(set(rank[mine].tolist()))
        if len(ranks) < 2:
            continue
        waits = {r: int(wait[mine & (rank == r)].sum()) for r in ranks}
        charged = dict.fromkeys(ranks, 0)
        keys = sorted(set(zip(comm[mine].tolist(), seq[mine].tolist())))
        for c, q in keys:
            rows = np.flatnonzero(mine & (comm == c) & (seq == q))
            last = rows[np.argmax(arrival[rows])]
            charged[int(rank[last])] += int(wait[rows].sum())
        slow = max(ranks, key=lambda r: (charged[r], -r))
        late = charged[slow] // (len(ranks) - 1)
        out.append(StepStraggler(int(s), slow, late, waits, len(keys), cause_of(times, int(s), slow, ranks)))
    return out


def cause_of(times: OpTimes, step: int, slow: int, ranks: Sequence[int]) -> Cause | None:
    """The range whose time on ``slow`` exceeds the others' median most in ``step``."""
    others = [r for r in ranks if r != slow]
    best: Cause | None = None
    for kind, table in (("cpu", times.cpu), ("gpu", times.gpu)):
        for (r, s, name, module), ns in table.items():
            if r != slow or s != step:
                continue
            theirs = [table.get((o, step, name, module), 0) for o in others]
            median = int(np.median(theirs)) if theirs else 0
            excess = ns - median
            if excess > 0 and (best is None or excess > best.excess_ns):
                best = Cause(name, module, excess, ns, median, kind)
    return best
