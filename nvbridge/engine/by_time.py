"""Attribution by time: GPU work launched from a thread with no open range, given to the range
another thread of the same process had open around the launch.

PyTorch launches much of a step's GPU work from threads that open no range: the autograd device
thread ``pt_autograd_0`` runs every backward kernel launch while the thread that called
``backward()`` waits inside the user's ``Backward`` range; pin-memory, DataLoader and NCCL
threads work for the training loop the same way. The thread-exact rule (an API call belongs to
the innermost range on its own thread) leaves that work in ``[no op]``. This module adds a
second, flagged attribution beside it, in columns of its own (``gpu_ops.time_op_id``,
``ops.time_self_gpu_ns`` / ``time_total_gpu_ns`` / ``time_gpu_op_count``), so the thread-exact
columns keep equalling ``nsys stats -r nvtxkernsum``.

The rule, for an API call that launched GPU work and lies in no range of its own thread:

1. The candidates are the same process's other threads with a tree range containing the whole
   call (``start <= call.start and call.end <= end``, as the thread-exact rule); on each, the
   innermost such range.
2. Among threads, the process's main thread (thread id = process id, as Linux numbers it) comes
   first: that is where the training loop runs and waits for the work the helper threads do
   (``backward()`` blocks it until the device threads finish; it consumes the DataLoader's
   batches and the collectives' results). Otherwise the range that opened last, the innermost
   in time (then the shorter, then the lower thread id): where thread ids are not process
   ids (Windows, nvprof's CUPTI thread ids) this is what remains.
3. None: the GPU op stays in ``[no op]``, and summary says which thread launched it.

Ranges open at a window's cut are carried into the next window (nvbridge.engine.correlator), so
every range that can contain a window's calls is in that window: a call starts at or after the
previous cut, and a range that closed before the cut cannot contain it.
"""

from __future__ import annotations

import numpy as np

from nvbridge.columns import np_col
from nvbridge.engine.activity import GpuBuffer
from nvbridge.engine.intervals import segment_keys
from nvbridge.engine.window import Rows, Tree

# Per-op sums of the time attribution, carried with open ranges like window.SUMS.
TIME_SUMS = ("time_gpu", "time_count", "time_total_gpu")


def attribute(
    rows: Rows,
    tree: Tree,
    thread_mask: int,
    gpu: GpuBuffer,
    g_rows: np.ndarray,
    g_call: np.ndarray,
    calls: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> dict[str, np.ndarray]:
    """Attribute by time the GPU ops this window's calls launched outside every range on their
    thread (their op ids set in ``gpu``), and return TIME_SUMS per window row.

    Args:
        rows, tree: the window's ranges and their tree.
        thread_mask: the thread bits of a thread key (the rest name the process).
        gpu, g_rows, g_call: the GPU buffer, the rows of the GPU ops this window's calls
            claimed, and their call (an index into ``calls``).
        calls: the window's calls' thread keys, starts and ends, in the window's call order.
    """
    g_local = tree.api_local[g_call]
    start, end = gpu.times(g_rows)
    outside = np.flatnonzero(g_local < 0)
    t_local = np.full(len(g_local), -1, np.int64)
    if len(outside) and rows.n:
        a_thread, a_start, a_end = calls
        uniq, at = np.unique(g_call[outside], return_inverse=True)
        main = np_col(rows.raw, "thread_id", fill=-1) == np_col(rows.raw, "process_id", fill=-2)
        found = time_ranges(rows, tree, thread_mask, main, a_thread[uniq], a_start[uniq], a_end[uniq])
        t_local[outside] = found[at.ravel()]
        hit = t_local >= 0
        if hit.any():
            gpu.assign_time(g_rows[hit], rows.op_id[t_local[hit]])
    return time_sums(tree, rows.n, t_local, end - start)


def time_ranges(
    rows: Rows,
    tree: Tree,
    thread_mask: int,
    main_thread: np.ndarray,
    q_thread: np.ndarray,
    q_start: np.ndarray,
    q_end: np.ndarray,
) -> np.ndarray:
    """Window row of the range each query call is attributed to by time, or -1.

    Args:
        rows, tree: the window's ranges and their tree.
        thread_mask: the thread bits of a thread key (the rest name the process).
        main_thread: per window row, whether its thread is its process's main thread.
        q_thread, q_start, q_end: the calls' thread keys and times.
    """
    out = np.full(len(q_start), -1, np.int64)
    cand = np.flatnonzero(tree.in_tree)
    if not len(cand) or not len(q_start):
        return out
    keys = rows.thread_key[cand]
    threads, t_idx = np.unique(keys, return_inverse=True)
    t_idx = t_idx.ravel().astype(np.int64)
    start, end = rows.start, rows.end
    by_key = np.lexsort((cand, -end[cand], start[cand], t_idx))  # (thread, start, -end): nesting order
    order, o_thread = cand[by_key], t_idx[by_key]
    lo = int(min(int(start[cand].min()), int(q_start.min())))
    hi = int(max(int(end[cand].max()), int(q_end.max()), int(q_start.max())))
    sorted_keys = segment_keys(o_thread, start[order], lo, hi)
    parent = np.where(tree.in_tree, tree.parent, -1)
    q_proc = q_thread & ~thread_mask
    best_main = np.zeros(len(q_start), bool)
    best_start = np.full(len(q_start), np.iinfo(np.int64).min, np.int64)
    best_end = np.zeros(len(q_start), np.int64)
    for u, key in enumerate(threads.tolist()):  # threads with ranges in the window: a few
        ask = np.flatnonzero((q_proc == (key & ~thread_mask)) & (q_thread != key))
        if not len(ask):
            continue
        pos = np.searchsorted(sorted_keys, segment_keys(np.full(len(ask), u), q_start[ask], lo, hi), "right") - 1
        c = np.where((pos >= 0) & (o_thread[np.maximum(pos, 0)] == u), order[np.maximum(pos, 0)], -1)
        # The last range started by the call's start contains it or has an ancestor that does.
        live = np.flatnonzero(c >= 0)
        while len(live):
            miss = live[end[c[live]] < q_end[ask[live]]]
            c[miss] = parent[c[miss]]
            live = miss[c[miss] >= 0]
        found = c >= 0
        ask, c = ask[found], c[found]
        main = main_thread[c]
        s, e = start[c], end[c]
        better = (out[ask] < 0) | (main & ~best_main[ask])
        tie = ~better & (main == best_main[ask])
        better |= tie & ((s > best_start[ask]) | ((s == best_start[ask]) & (e < best_end[ask])))
        # equal ranges on two threads: the lower thread key, which came first in this loop
        take = ask[better]
        out[take], best_main[take], best_start[take], best_end[take] = c[better], main[better], s[better], e[better]
    return out


def time_sums(tree: Tree, n: int, t_local: np.ndarray, dur: np.ndarray) -> dict[str, np.ndarray]:
    """TIME_SUMS over the window's rows: GPU ns and count attributed by time to each row
    directly, and the ns rolled up its tree ranges (the rows with such work walk up their
    ancestors, a level a turn)."""
    has = t_local >= 0
    own = np.zeros(n, np.int64)
    np.add.at(own, t_local[has], dur[has])
    count = np.bincount(t_local[has], minlength=n).astype(np.int64)
    total = own.copy()
    ids = np.flatnonzero(own)
    values = own[ids]
    parent = np.where(tree.in_tree, tree.parent, -1)
    for _ in range(int(tree.depth.max(initial=0)) + 1):
        up = parent[ids]
        live = up >= 0
        if not live.any():
            break
        ids, values = up[live], values[live]
        np.add.at(total, ids, values)
    return {"time_gpu": own, "time_count": count, "time_total_gpu": total}
