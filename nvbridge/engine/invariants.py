"""The engine's invariants, checked before anything is written; a failure is a bug of ours
(or an input we misread), so each message names the op and asks for the file."""

from __future__ import annotations

import numpy as np

from nvbridge.columns import np_col
from nvbridge.engine.model import CROSS_THREAD, CROSSING, Model
from nvbridge.errors import CorrelationError


class EmittedIds:
    """Which op ids have been emitted so far: each exactly once, and all of 0..n-1 at the end.

    Ids come nearly in order (a range still open at a cut comes later), so they are kept as
    "every id below ``low``" plus the few above it: memory follows the ranges held open, not
    the report.
    """

    def __init__(self) -> None:
        self._low = 0
        self._above = np.zeros(0, np.int64)

    def add(self, ids: np.ndarray) -> None:
        """Record ``ids``; raises if one was emitted before."""
        if not len(ids):
            return
        merged = np.sort(np.concatenate([self._above, ids]))
        if int(merged[0]) < self._low or (np.diff(merged) == 0).any():
            raise CorrelationError("an op was emitted twice")
        # The ids that continue low..: merged - (low, low + 1, ...) is 0 along that run.
        run = int(np.searchsorted(merged - np.arange(self._low, self._low + len(merged)), 0, "right"))
        self._low += run
        self._above = merged[run:]

    def check_complete(self, n: int) -> None:
        """Every id below ``n`` was emitted, and none above."""
        if self._low != n or len(self._above):
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
    below = emit[sums["total_gpu"][emit] < sums["self_gpu"][emit]]
    if len(below):
        i = int(below[0])
        raise CorrelationError(
            f"total GPU time below self GPU time (op {int(op_id[i])}: self {int(sums['self_gpu'][i])} ns, "
            f"total {int(sums['total_gpu'][i])} ns, after the window starting at {after_cut}); "
            "please report this file"
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
    - self times are never negative and totals are at least self.
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
