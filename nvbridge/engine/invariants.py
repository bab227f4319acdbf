"""The engine's invariants, checked before anything is written; a failure is a bug of ours
(or an input we misread), so each message names the op and asks for the file."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col
from nvbridge.engine.activity import ActivityTally
from nvbridge.engine.model import CROSS_THREAD, CROSSING, Model
from nvbridge.errors import CorrelationError


class EmittedIds:
    """Which op ids have been emitted so far: each exactly once, and all of 0..n-1 at the end.

    Kept as the runs of consecutive ids emitted (``[start, end)``): ids come nearly in order,
    and a range open at a cut leaves a gap until it closes, so the runs follow the ranges held
    open (one that never closes leaves one gap), not the report's size.
    """

    def __init__(self) -> None:
        self._starts = np.zeros(0, np.int64)
        self._ends = np.zeros(0, np.int64)

    def add(self, ids: np.ndarray) -> None:
        """Record ``ids``; raises if one was emitted before."""
        if not len(ids):
            return
        ids = np.sort(ids)
        gaps = np.flatnonzero(np.diff(ids) != 1)
        starts = np.concatenate([self._starts, ids[:1], ids[gaps + 1]])
        ends = np.concatenate([self._ends, ids[gaps] + 1, ids[-1:] + 1])
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        if (ends <= starts).any() or (starts[1:] < ends[:-1]).any():
            raise CorrelationError("an op was emitted twice")
        first = np.concatenate([[True], starts[1:] != ends[:-1]])  # a run not touching the last
        last = np.concatenate([np.flatnonzero(first)[1:] - 1, [len(starts) - 1]])
        self._starts, self._ends = starts[first], ends[last]

    def check_complete(self, n: int) -> None:
        """Every id below ``n`` was emitted, and none above."""
        whole = len(self._starts) == 1 and self._starts[0] == 0 and self._ends[0] == n
        if not (whole or (n == 0 and not len(self._starts))):
            raise CorrelationError("op ids are not 0..n-1")


def check_window(
    op_id: np.ndarray,
    parent_id: np.ndarray,
    emitted_tree: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    parent: np.ndarray,
    self_cpu: np.ndarray,
    sums: dict[str, np.ndarray],
    emit: np.ndarray,
    after_cut: int | None,
) -> None:
    """The invariants on the rows a window emits (``emit``; ``emitted_tree`` marks the tree
    ranges among them; GPU time and op ids are checked once the report is done): parents
    precede children, a tree child lies inside its parent, self times are never negative,
    totals are at least self."""
    tree = emitted_tree & (parent >= 0)
    if (parent_id[tree] >= op_id[tree]).any():
        raise CorrelationError("a parent does not precede its child")
    p = parent[tree]
    if ((start[p] > start[tree]) | (end[tree] > end[p])).any():
        raise CorrelationError("a child range is not inside its parent")
    if (self_cpu[tree] < 0).any():
        raise CorrelationError("negative self CPU time")
    if (sums["time_total_gpu"][emit] < sums["time_gpu"][emit]).any():
        raise CorrelationError("GPU time attributed by time totals below its own; please report this file")
    below = emit[sums["total_gpu"][emit] < sums["self_gpu"][emit]]
    if len(below):
        i = int(below[0])
        raise CorrelationError(
            f"total GPU time below self GPU time (op {int(op_id[i])}: self {int(sums['self_gpu'][i])} ns, "
            f"total {int(sums['total_gpu'][i])} ns, after the window starting at {after_cut}); "
            "please report this file"
        )


def check_sums(self_gpu_ns: int, time_gpu_ns: int, tally: ActivityTally) -> None:
    """The GPU time summed over the ops emitted, thread-exact and by time, equals that of the
    GPU ops each names."""
    if self_gpu_ns != tally.gpu_attributed_ns:
        raise CorrelationError(
            f"self GPU time sums to {self_gpu_ns} ns but attributed GPU ops last {tally.gpu_attributed_ns} ns"
        )
    if time_gpu_ns != tally.gpu_by_time_ns:
        raise CorrelationError(
            f"GPU time attributed by time sums to {time_gpu_ns} ns over ops but {tally.gpu_by_time_ns} ns "
            "over GPU ops; please report this file"
        )


def check_gpu_time(self_gpu_sum: int, g_start: np.ndarray, g_end: np.ndarray, g_op: np.ndarray) -> None:
    """Every GPU op is counted in exactly one op's self time, or is unattributed."""
    g_dur = g_end - g_start
    if self_gpu_sum + int(g_dur[g_op < 0].sum()) != int(g_dur.sum()):
        raise CorrelationError("GPU time is double counted or lost")


def check(model: Model) -> None:
    """Verify the model's invariants; raises CorrelationError naming the first broken one.

    - op ids are 0..n-1, parents precede children, a tree child lies inside its parent;
    - every GPU op is counted in exactly one op's self time or is unattributed;
    - self times are never negative and totals are at least self;
    - GPU ops attributed by time are counted once, beside the thread-exact attribution.
    """
    ops = model.ops
    n = ops.num_rows
    if not np.array_equal(np_col(ops, "op_id"), np.arange(n)):
        raise CorrelationError("op ids are not 0..n-1 in order")
    parent = np_col(ops, "parent_id", fill=-1)
    flags = np_col(ops, "flags")
    s, e = np_col(ops, "start_ns"), np_col(ops, "end_ns")
    tree = (parent >= 0) & ((flags & (CROSS_THREAD | CROSSING)) == 0)
    p = parent[tree]
    if (p >= np.flatnonzero(tree)).any():
        raise CorrelationError("a parent does not precede its child")
    if ((s[p] > s[tree]) | (e[tree] > e[p])).any():
        raise CorrelationError("a child range is not inside its parent")
    g = model.gpu_ops
    check_gpu_time(
        int(np_col(ops, "self_gpu_ns").sum()), np_col(g, "start_ns"), np_col(g, "end_ns"), np_col(g, "op_id", fill=-1)
    )
    if (np_col(ops, "self_cpu_ns")[tree] < 0).any():
        raise CorrelationError("negative self CPU time")
    if (np_col(ops, "total_gpu_ns") < np_col(ops, "self_gpu_ns")).any():
        raise CorrelationError("total GPU time below self GPU time")
    check_time_attribution(ops, g)


def check_time_attribution(ops: pa.Table, gpu_ops: pa.Table) -> None:
    """GPU ops attributed by time (nvbridge.engine.by_time) are ones the thread-exact rule left
    out, each counted once in an op's ``time_self_gpu_ns``, and totals are at least self."""
    time_op = np_col(gpu_ops, "time_op_id", fill=-1)
    if ((time_op >= 0) & (np_col(gpu_ops, "op_id", fill=-1) >= 0)).any():
        raise CorrelationError("a GPU op is attributed both to its thread's range and by time")
    dur = np_col(gpu_ops, "end_ns") - np_col(gpu_ops, "start_ns")
    if int(np_col(ops, "time_self_gpu_ns").sum()) != int(dur[time_op >= 0].sum()):
        raise CorrelationError("GPU time attributed by time is double counted or lost")
    if (np_col(ops, "time_total_gpu_ns") < np_col(ops, "time_self_gpu_ns")).any():
        raise CorrelationError("GPU time attributed by time totals below its own")
