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

    # (rank, step) -> (op name, module path) -> ns
    cpu: dict[tuple[int, int], dict[tuple[str, str | None], int]] = field(default_factory=dict)
    gpu: dict[tuple[int, int], dict[tuple[str, str | None], int]] = field(default_factory=dict)

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
            for table, ns in ((self.cpu, cpu), (self.gpu, g)):
                mine = table.setdefault((rank, step), {})
                mine[(name, module)] = mine.get((name, module), 0) + ns


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
    step, rank = np_col(t, "step"), np_col(t, "rank")
    wait, arrival = np_col(t, "wait_ns", fill=0), np_col(t, "arrival_ns")
    _, comm = np.unique(np.array(t.column("comm").to_pylist()), return_inverse=True)
    _, key = np.unique(np.stack([step, comm.astype(np.int64), np_col(t, "seq")]), axis=1, return_inverse=True)
    key = key.reshape(-1)
    # the last to arrive at each collective is charged every rank's wait at it
    order = np.lexsort((rank, arrival, key))
    ks = key[order]
    last = np.flatnonzero(np.append(ks[1:] != ks[:-1], True))  # each key's latest arrival
    last_of = np.empty(int(key.max()) + 1, np.int64)
    last_of[ks[last]] = rank[order][last]
    waited = np.zeros(len(last_of), np.int64)
    np.add.at(waited, key, wait)
    steps, step_i = np.unique(step, return_inverse=True)
    ranks, rank_i = np.unique(rank, return_inverse=True)
    waits = np.zeros((len(steps), len(ranks)), np.int64)  # every rank's wait per step
    np.add.at(waits, (step_i, rank_i), wait)
    present = np.zeros((len(steps), len(ranks)), bool)
    present[step_i, rank_i] = True
    key_step = np.empty(len(last_of), np.int64)
    key_step[key] = step_i
    charged = np.zeros((len(steps), len(ranks)), np.int64)  # the waits each rank caused per step
    np.add.at(charged, (key_step, np.searchsorted(ranks, last_of)), waited)
    count = np.bincount(key_step, minlength=len(steps))
    out = []
    for i, s in enumerate(steps.tolist()):
        here = np.flatnonzero(present[i])
        if len(here) < 2:
            continue
        # the rank charged most (the lower rank on a tie)
        slow_i = here[np.lexsort((here, -charged[i, here]))[0]]
        late = int(charged[i, slow_i]) // (len(here) - 1)
        by_rank = {int(ranks[j]): int(waits[i, j]) for j in here}
        cause = cause_of(times, int(s), int(ranks[slow_i]), [int(ranks[j]) for j in here])
        out.append(StepStraggler(int(s), int(ranks[slow_i]), late, by_rank, int(count[i]), cause))
    return out


def cause_of(times: OpTimes, step: int, slow: int, ranks: Sequence[int]) -> Cause | None:
    """The range whose time on ``slow`` exceeds the others' median most in ``step``."""
    others = [r for r in ranks if r != slow]
    best: Cause | None = None
    for kind, table in (("cpu", times.cpu), ("gpu", times.gpu)):
        theirs_all = [table.get((o, step), {}) for o in others]
        for (name, module), ns in table.get((slow, step), {}).items():
            theirs = [t.get((name, module), 0) for t in theirs_all]
            median = int(np.median(theirs)) if theirs else 0
            if ns - median > 0 and (best is None or ns - median > best.excess_ns):
                best = Cause(name, module, ns - median, ns, median, kind)
    return best
