"""Vectorized interval nesting per thread: the range tree and innermost-range lookups.

Everything here is NumPy over whole columns; Python loops run only over nesting depth
levels (tens) or, for the rare thread whose ranges cross each other, over that thread.

Nesting is containment with inclusive bounds, as NVIDIA's reports use it: ``b`` lies in
``a`` when ``a.start <= b.start and b.end <= a.end``. Ties sort the longer range first,
then the earlier-recorded one, so identical ranges nest in push order.
"""

from __future__ import annotations

import numpy as np


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
        self.parent = np.full(n, -1, np.int64)
        self.depth = np.zeros(n, np.int64)
        self.crossing = np.zeros(n, bool)
        if n:
            self._build()
        self._start_keys = segment_keys(thread, start, lo, hi)

    def _build(self) -> None:
        th, s, e = self.thread, self.start, self.end
        n = len(s)
        idx = np.arange(n, dtype=np.int64)
        first = np.searchsorted(th, th, side="left")  # first position of each range's thread
        local = idx - first
        end_keys = np.sort(segment_keys(th, e, self.lo, self.hi))
        thread_base = np.searchsorted(end_keys, segment_keys(th, np.full(n, self.lo), self.lo, self.hi))
        q = segment_keys(th, s, self.lo, self.hi)
        ends_le = np.searchsorted(end_keys, q, side="right") - thread_base
        ends_lt = np.searchsorted(end_keys, q, side="left") - thread_base
        zero = e == s
        zero_keys = np.sort(q[zero])
        zeros_at = np.searchsorted(zero_keys, q, "right") - np.searchsorted(zero_keys, q, "left")
        # A preceding range either contains this one (an ancestor) or ended by its start.
        # Zero-length ranges at the same start sort after a longer one but end "before" it.
        depth = np.where(zero, local - ends_lt, local - ends_le + zeros_at)
        parent = np.full(n, -1, np.int64)
        nested = depth > 0
        if nested.any():
            scale = n + 1
            key = np.sort(np.where(depth >= 0, depth, 0) * scale + idx)
            want = (depth[nested] - 1) * scale + idx[nested]
            pos = np.searchsorted(key, want, side="left") - 1
            cand = key[np.maximum(pos, 0)]
            ok = (pos >= 0) & (cand // scale == depth[nested] - 1)
            parent[nested] = np.where(ok, cand % scale, -1)
        bad = (depth < 0) | (nested & (parent < 0))
        has_parent = parent >= 0
        p = parent[has_parent]
        bad[has_parent] |= (e[has_parent] > e[p]) | (th[p] != th[has_parent])
        if bad.any():
            # Crossing ranges on some threads: redo those threads exactly, one at a time.
            for t in np.unique(th[bad]):
                lo_i, hi_i = np.searchsorted(th, t, "left"), np.searchsorted(th, t, "right")
                self._build_thread_exact(int(lo_i), int(hi_i), parent, depth)
        self.parent, self.depth = parent, depth

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
