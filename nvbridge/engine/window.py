"""The steps of correlating one window of ranges, as pure functions over NumPy columns.

:class:`nvbridge.engine.correlator.Correlator` holds the state between windows (the ranges
still open, the API calls taken so far) and calls these in order: put the window's ranges in
output order, nest them into a forest and find each API call's innermost range, sum GPU and
CPU time up the tree, and build the ops rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import levels_deepest_first, one_chunk, sum_by
from nvbridge.compiled import native
from nvbridge.engine.costs import flops
from nvbridge.engine.intervals import Forest, stable_order
from nvbridge.engine.keys import BIG, through
from nvbridge.engine.model import CROSSING
from nvbridge.errors import CorrelationError

# Per-op sums a range still open at a window's end carries into the next window (the last three:
# GPU work attributed by time, nvbridge.engine.by_time, added to the roll-up's by the correlator).
SUMS = (
    *("self_gpu", "self_count", "api_count", "child_cpu", "total_gpu", "total_count"),
    *("time_gpu", "time_count", "time_total_gpu"),
)


def ends(
    ranges: pa.Table, start: np.ndarray, capture_end: int, open_marker: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Each range's end, a never-closed one clamped to the capture end, and which were.

    ``open_marker``: an end value that also means never closed (some exporters store the
    capture end itself), or None.
    """
    raw_end = one_chunk(ranges.column("end_ns"))
    end = np.maximum(np.asarray(raw_end.fill_null(capture_end).to_numpy(zero_copy_only=False)), start)
    open_end = np.asarray(raw_end.is_null().to_numpy(zero_copy_only=False))
    if open_marker is not None:
        open_end |= np.asarray(raw_end.fill_null(0).to_numpy(zero_copy_only=False)) == open_marker
    return end, open_end


def in_output_order(start: np.ndarray, end: np.ndarray, thread: np.ndarray) -> bool:
    """Already sorted by (start, thread, -end)? One pass, no sort."""
    if len(start) < 2:
        return True
    ds = np.diff(start)
    if (ds < 0).any():
        return False
    tie = np.flatnonzero(ds == 0)
    if not len(tie):
        return True
    t0, t1 = thread[tie], thread[tie + 1]
    return bool(((t0 < t1) | ((t0 == t1) & (end[tie] >= end[tie + 1]))).all())


@dataclass(slots=True)
class Rows:
    """A window's ranges, the ones carried from earlier windows first (``carried`` of them)."""

    raw: pa.Table
    op_id: np.ndarray
    start: np.ndarray
    end: np.ndarray
    flags: np.ndarray
    cross: np.ndarray  # ended on another thread: never a parent
    thread_key: np.ndarray
    carried: int

    @property
    def n(self) -> int:
        return len(self.op_id)


@dataclass(slots=True)
class Tree:
    """The window's ranges nested per thread, and the API calls placed in it."""

    parent: np.ndarray  # window row of the parent, -1 for roots
    depth: np.ndarray
    in_tree: np.ndarray  # may be a parent (not crossing, not cross-thread)
    api_local: np.ndarray  # window row of each API call's innermost range, -1 none


def build_tree(rows: Rows, a_start: np.ndarray, a_end: np.ndarray, a_key: np.ndarray, capture_end: int) -> Tree:
    """Nest the ranges per thread (flagging CROSSING ones in ``rows.flags``) and find the
    innermost tree range around each API call.

    Raises:
        CorrelationError: a range carried from an earlier window no longer nests.
    """
    if native is not None:
        return _build_tree_native(rows, a_start, a_end, a_key)
    n, k = rows.n, rows.carried
    # Dense thread indices by hashing (no sort): any order serves the per-thread keys.
    keys = np.concatenate([rows.thread_key, a_key])
    tinv = np.asarray(pa.array(keys).dictionary_encode().indices.to_numpy(zero_copy_only=False)).astype(np.int64)
    r_thread, api_thread = tinv[:n], tinv[n:]
    del keys, tinv
    times = [t for t in (rows.start, a_start, a_end) if len(t)]
    lo = int(min((int(t.min()) for t in times), default=0))
    hi = max(capture_end, int(rows.end.max(initial=0)), int(a_end.max(initial=0)))
    # The forest wants (thread, start, -end) order; tree_idx maps its rows to window rows.
    candidates = np.flatnonzero(~rows.cross)
    tree_idx = candidates[stable_order(r_thread[candidates])]
    forest = Forest(r_thread[tree_idx], rows.start[tree_idx], rows.end[tree_idx], lo, hi)
    rows.flags[tree_idx[forest.crossing]] |= CROSSING
    in_tree = np.zeros(n, bool)
    in_tree[tree_idx[~forest.crossing]] = True
    if k and not in_tree[:k].all():
        raise CorrelationError("a range carried between windows left the tree")
    parent = np.full(n, -1, np.int64)
    depth = np.zeros(n, np.int64)
    parent[tree_idx] = through(tree_idx, forest.parent)
    depth[tree_idx] = forest.depth
    # Ranges outside the tree hang under the innermost tree range containing them.
    outside = np.flatnonzero(~in_tree)
    if len(outside):
        host = forest.innermost(r_thread[outside], rows.start[outside], rows.end[outside])
        parent[outside] = through(tree_idx, host)
        depth[outside] = np.where(host >= 0, through(forest.depth, host) + 1, 0)
    api_local = through(tree_idx, forest.innermost(api_thread, a_start, a_end))
    return Tree(parent, depth, in_tree, api_local)


def _build_tree_native(rows: Rows, a_start: np.ndarray, a_end: np.ndarray, a_key: np.ndarray) -> Tree:
    """build_tree by nvbridge._native.build_tree: a stack walk per thread, no sort."""
    assert native is not None
    n = rows.n
    c = np.ascontiguousarray
    parent, depth, flags, api_local = native.build_tree(
        c(rows.thread_key, np.int64),
        c(rows.start, np.int64),
        c(rows.end, np.int64),
        c(rows.cross, np.bool_),
        c(a_key, np.int64),
        c(a_start, np.int64),
        c(a_end, np.int64),
    )
    marks = np.frombuffer(flags, np.bool_)
    in_tree, crossing = marks[:n], marks[n:]
    rows.flags[crossing] |= CROSSING
    if rows.carried and not in_tree[: rows.carried].all():
        raise CorrelationError("a range carried between windows left the tree")
    return Tree(
        np.frombuffer(parent, np.int64), np.frombuffer(depth, np.int64), in_tree, np.frombuffer(api_local, np.int64)
    )


@dataclass(slots=True)
class Sums:
    """Per-op sums over the window (``SUMS`` names) and the GPU span of each subtree."""

    values: dict[str, np.ndarray]
    gpu_first: np.ndarray
    gpu_last: np.ndarray


def roll_up(rows: Rows, tree: Tree, g_local: np.ndarray, g_start: np.ndarray, g_end: np.ndarray) -> Sums:
    """This window's sums, rolled up its tree (carried ranges' earlier sums not yet added)."""
    if native is not None:
        fast = _roll_up_native(rows, tree, g_local, g_start, g_end)
        if fast is not None:  # None: a parent after its child, which the levels below take
            return fast
    n, k = rows.n, rows.carried
    api_local = tree.api_local
    dur = rows.end - rows.start
    tree_parent = np.where(tree.in_tree, tree.parent, -1)
    sums = {
        "self_gpu": sum_by(g_local, g_end - g_start, n),
        "self_count": np.bincount(g_local[g_local >= 0], minlength=n).astype(np.int64),
        "api_count": np.bincount(api_local[api_local >= 0], minlength=n).astype(np.int64),
        # A carried range's duration already counted in its parent's when it was new.
        "child_cpu": sum_by(np.where(np.arange(n) >= k, tree_parent, -1), dur, n),
    }
    g_first = np.full(n, BIG, np.int64)
    g_last = np.full(n, -BIG, np.int64)
    has = g_local >= 0
    np.minimum.at(g_first, g_local[has], g_start[has])
    np.maximum.at(g_last, g_local[has], g_end[has])
    total_gpu, total_count = sums["self_gpu"].copy(), sums["self_count"].copy()
    # Roll subtree totals up one level at a time, deepest first; only ops with GPU work below
    # them move.
    for level in levels_deepest_first(tree_parent, tree.depth):
        kids = level[total_count[level] > 0]
        up = tree_parent[kids]
        np.add.at(total_gpu, up, total_gpu[kids])
        np.add.at(total_count, up, total_count[kids])
        np.minimum.at(g_first, up, g_first[kids])
        np.maximum.at(g_last, up, g_last[kids])
    sums["total_gpu"], sums["total_count"] = total_gpu, total_count
    return Sums(sums, g_first, g_last)


def _roll_up_native(rows: Rows, tree: Tree, g_local: np.ndarray, g_start: np.ndarray, g_end: np.ndarray) -> Sums | None:
    """roll_up by nvbridge._native.roll_up: one backward pass over rows in output order (None
    where they are not)."""
    assert native is not None
    c = np.ascontiguousarray
    out = native.roll_up(
        c(np.where(tree.in_tree, tree.parent, -1), np.int64),
        rows.carried,
        c(g_local, np.int64),
        c(g_start, np.int64),
        c(g_end, np.int64),
        c(tree.api_local, np.int64),
        c(rows.end - rows.start, np.int64),
        BIG,
    )
    if out is None:
        return None
    cols = np.frombuffer(out, np.int64).reshape(8, rows.n)
    names = ("self_gpu", "self_count", "api_count", "child_cpu", "total_gpu", "total_count")
    return Sums(dict(zip(names, cols[:6])), cols[6], cols[7])


def ops_table(
    rows: Rows,
    tree: Tree,
    sums: Sums,
    self_cpu: np.ndarray,
    parent_id: np.ndarray,
    pid: np.ndarray,
    end_thread_mask: int,
    torch_cols: dict[str, pa.Array],
) -> pa.Table:
    """Every ops column over the whole window, zero-copy from NumPy where it can be."""
    raw, s = rows.raw, sums.values
    has_gpu = s["total_count"] > 0
    return flops.with_rates(
        pa.table(
            {
                "op_id": pa.array(rows.op_id),
                "parent_id": pa.array(parent_id, mask=parent_id < 0),
                "depth": pa.array(tree.depth),
                "name": raw.column("name"),
                "domain": raw.column("domain"),
                "domain_id": raw.column("domain_id"),
                "process_id": pa.array(pid),
                "thread_id": raw.column("thread_id"),
                "start_ns": pa.array(rows.start),
                "end_ns": pa.array(rows.end),
                "self_cpu_ns": pa.array(self_cpu),
                "total_cpu_ns": pa.array(rows.end - rows.start),
                "self_gpu_ns": pa.array(s["self_gpu"]),
                "total_gpu_ns": pa.array(s["total_gpu"]),
                "gpu_op_count": pa.array(s["self_count"]),
                "total_gpu_op_count": pa.array(s["total_count"]),
                "api_call_count": pa.array(s["api_count"]),
                "time_self_gpu_ns": pa.array(s["time_gpu"]),
                "time_total_gpu_ns": pa.array(s["time_total_gpu"]),
                "time_gpu_op_count": pa.array(s["time_count"]),
                "gpu_start_ns": pa.array(sums.gpu_first, mask=~has_gpu),
                "gpu_end_ns": pa.array(sums.gpu_last, mask=~has_gpu),
                "style": raw.column("style"),
                "end_thread_id": pc.bit_wise_and(raw.column("end_thread_key"), pa.scalar(end_thread_mask)),
                "flags": pa.array(rows.flags),
                **torch_cols,
            }
        )
    )
