"""Vectorized interval nesting per thread: the range tree and innermost-range lookups.

Everything here is NumPy over whole columns; Python loops run only over nesting depth
levels (tens) or, for the rare thread whose ranges cross each other, over that thread.

Nesting is containment with inclusive bounds, as NVIDIA's reports use it: ``b`` lies in
``a`` when ``a.start <= b.start and b.end <= a.end``. Ties sort the longer range first,
then the earlier-recorded one, so identical ranges nest in push order.
"""

from __future__ import annotations

import numpy as np


def stable_order(small: np.ndarray) -> np.ndarray:
    """``np.argsort(small, kind="stable")`` for non-negative integers (thread indices, depths):
    values below 2**15 are sorted as int16, where NumPy's stable sort is a radix sort."""
    if len(small) and int(small.max()) < 2**15:
        small = small.astype(np.int16)
    order: np.ndarray = np.argsort(small, kind="stable")
    return order


def segment_keys(group: np.ndarray, values: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Order-preserving int64 keys for (group, value) pairs, values within [lo, hi].

    Lets one ``np.searchsorted`` answer per-thread questions for all threads at once.
    """
    span = hi - lo + 1
    if (int(group.max(initial=0)) + 1) * span >= 2**62:
        raise OverflowError("time span too wide for composite keys")
    keys: np.ndarray = group.astype(np.int64) * span + (values - lo)
    return keys


class Forest:
    """Properly nested ranges of many threads, sorted by (thread, start, -end).

    Args:
        thread: dense thread index of each range (int64), already sorted as described.
        start, end: int64 bounds, ``start <= end``.
        lo, hi: bounds of every time that will be queried (for composite keys).

    After construction, ``parent`` (index or -1), ``depth`` and ``crossing`` (ranges that
    overlap a range they cannot nest in; excluded from the tree, parent -1) are set.
    """

    def __init__(self, thread: np.ndarray, start: np.ndarray, end: np.ndarray, lo: int, hi: int) -> None:
        self.thread, self.start, self.end = thread, start, end
        self.lo, self.hi = lo, hi
        n = len(start)
        self.crossing = np.zeros(n, bool)
        self._start_keys = segment_keys(thread, start, lo, hi)
        self.parent = np.full(n, -1, np.int64)
        self.depth = np.zeros(n, np.int64)
        if n:
            self._build()

    def _build(self) -> None:
        """Depth by counting, parent by one search; temporaries kept few (2M ranges = 16 MB each)."""
        th, s, e = self.thread, self.start, self.end
        n = len(s)
        span = self.hi - self.lo + 1
        threads = np.arange(int(th.max()) + 1, dtype=np.int64)
        q = self._start_keys
        end_keys = segment_keys(th, e, self.lo, self.hi)
        # Ends of ranges sorted by start are nearly sorted already: timsort merges their runs
        # (4x faster than the default quicksort on a 131,072-range window).
        end_keys.sort(kind="stable")
        base = np.searchsorted(end_keys, threads * span)[th]  # first end key of each thread
        # A preceding range either contains this one (an ancestor) or ended by its start:
        # depth = position on the thread - ranges of the thread that ended by its start.
        depth = np.arange(n, dtype=np.int64)
        depth -= np.searchsorted(th, threads)[th]
        depth -= np.searchsorted(end_keys, q, side="right") - base
        zero = e == s
        if zero.any():
            # A zero-length range contains nothing but is contained by ranges ending at its
            # start; and zero-length ranges at a longer range's start sort after it.
            z = np.flatnonzero(zero)
            depth[z] += np.searchsorted(end_keys, q[z], "right") - np.searchsorted(end_keys, q[z], "left")
            zero_keys = np.sort(q[z])
            pos = np.flatnonzero(~zero)
            depth[pos] += np.searchsorted(zero_keys, q[pos], "right") - np.searchsorted(zero_keys, q[pos], "left")
        del end_keys, base
        parent = self.parent
        # The parent of a nested range is the last range before it on its thread one level up.
        # Rows grouped by depth, in row order within a level (a stable sort on small integers is
        # a radix sort), make (depth, row) keys sorted; the nested rows are queried in that same
        # order, so each search starts where the previous one ended.
        level = np.maximum(depth, 0)
        by_level = stable_order(level)
        nested = by_level[level[by_level] > 0]
        if len(nested):
            scale = n + 1
            key = level[by_level] * scale + by_level
            want = (level[nested] - 1) * scale + nested
            pos = np.searchsorted(key, want, side="left") - 1
            cand = key[np.maximum(pos, 0)]
            ok = (pos >= 0) & (cand // scale == level[nested] - 1)
            parent[nested] = np.where(ok, cand % scale, -1)
            del key, want, pos, cand
        del level, by_level
        bad = depth < 0
        bad[nested] |= parent[nested] < 0
        has_parent = np.flatnonzero(parent >= 0)
        p = parent[has_parent]
        bad[has_parent] |= (e[has_parent] > e[p]) | (th[p] != th[has_parent])
        if bad.any():
            # Crossing ranges on some threads: redo those threads exactly, one at a time.
            for t in np.unique(th[bad]):
                lo_i, hi_i = np.searchsorted(th, t, "left"), np.searchsorted(th, t, "right")
                self._build_thread_exact(int(lo_i), int(hi_i), parent, depth)
        self.depth = depth

    def _build_thread_exact(self, lo: int, hi: int, parent: np.ndarray, depth: np.ndarray) -> None:
        """Stack walk for a thread whose ranges cross: a range that overlaps the innermost
        open range without fitting inside it is flagged as crossing and kept out of the tree."""
        stack: list[int] = []
        s, e = self.start, self.end
        for i in range(lo, hi):
            while stack and e[stack[-1]] < e[i] and e[stack[-1]] <= s[i]:
                stack.pop()
            if stack and e[stack[-1]] < e[i]:
                self.crossing[i] = True
                parent[i], depth[i] = -1, 0
                continue
            parent[i] = stack[-1] if stack else -1
            depth[i] = len(stack)
            stack.append(i)

    def innermost(self, thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Index of the innermost tree range containing each query interval, or -1.

        The last range started at or before the query start either contains it or has an
        ancestor that does; walking up parents (vectorized, at most depth steps) finds it.
        """
        n = len(self.start)
        out = np.full(len(start), -1, np.int64)
        if n == 0 or len(start) == 0:
            return out
        pos = np.searchsorted(self._start_keys, segment_keys(thread, start, self.lo, self.hi), "right") - 1
        cand = np.where((pos >= 0) & (self.thread[np.maximum(pos, 0)] == thread), pos, -1)
        # Crossing ranges are not in the tree: step over them to their nearest tree range.
        todo = np.flatnonzero(cand >= 0)
        while len(todo):
            c = cand[todo]
            miss = self.crossing[c] | (self.end[c] < end[todo])
            todo = todo[miss]
            if not len(todo):
                break
            c = cand[todo]
            cross = self.crossing[c]
            # A crossing range has no parent: fall back to the previous range on the thread.
            prev = np.where(cross, c - 1, self.parent[c])
            prev = np.where(cross & ((prev < 0) | (self.thread[np.maximum(prev, 0)] != thread[todo])), -1, prev)
            cand[todo] = prev
            todo = todo[prev >= 0]
        return cand
