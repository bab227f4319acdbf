"""Sets of time intervals as sorted, disjoint NumPy arrays: union, difference, overlap.

advise counts time at stake as sets of wall-clock intervals on lanes (one lane per rank and
GPU), so overlapping evidence is never counted twice. A lane is folded into the time itself
(``lane * LANE_NS + t``), which lets every operation below stay one sort or one search.
"""

from __future__ import annotations

import numpy as np

# Lanes are 2^44 ns (4.9 hours) apart; times are relative to the report's first event.
LANE_NS = 1 << 44

Spans = tuple[np.ndarray, np.ndarray]


def empty() -> Spans:
    """No intervals."""
    return np.zeros(0, np.int64), np.zeros(0, np.int64)


def union(start: np.ndarray, end: np.ndarray) -> Spans:
    """The union of [start, end) intervals as sorted disjoint intervals (empty ones dropped)."""
    keep = end > start
    start, end = start[keep], end[keep]
    if not len(start):
        return empty()
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum.accumulate(end[order])
    # a new piece begins where an interval starts after everything before it has ended
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > e[:-1]
    firsts = np.flatnonzero(new)
    lasts = np.append(firsts[1:] - 1, len(s) - 1)
    return s[firsts].astype(np.int64), e[lasts].astype(np.int64)


def length(spans: Spans) -> int:
    """Total length of disjoint intervals."""
    return int((spans[1] - spans[0]).sum())


def covered_before(spans: Spans, t: np.ndarray) -> np.ndarray:
    """For each time t, the length of ``spans`` (disjoint, sorted) lying before t."""
    s, e = spans
    if not len(s):
        return np.zeros(len(t), np.int64)
    before = np.concatenate([[0], np.cumsum(e - s)])
    i = np.searchsorted(s, t, "right")  # intervals starting at or before t
    partial = np.where(i > 0, np.minimum(t, e[np.maximum(i - 1, 0)]) - s[np.maximum(i - 1, 0)], 0)
    return before[np.maximum(i - 1, 0)] * (i > 0) + np.maximum(partial, 0)


def overlap(a: Spans, b: Spans) -> int:
    """Length of the intersection of two disjoint sorted interval sets."""
    if not len(a[0]) or not len(b[0]):
        return 0
    return int((covered_before(b, a[1]) - covered_before(b, a[0])).sum())


def minus(a: Spans, b: Spans) -> Spans:
    """Intervals of ``a`` not covered by ``b`` (both disjoint and sorted).

    Only the intervals of b that overlap a take part, so removing a large claimed set from a
    small finding costs about the finding's size.
    """
    if not len(a[0]) or not len(b[0]):
        return a
    lo = np.searchsorted(b[1], a[0], "right")  # first b interval ending after each a start
    hi = np.searchsorted(b[0], a[1], "left")  # past the last b interval starting before its end
    counts = np.maximum(hi - lo, 0)
    total = int(counts.sum())
    if not total:
        return a
    first = np.cumsum(counts) - counts
    idx = np.repeat(lo, counts) + (np.arange(total) - np.repeat(first, counts))
    idx = distinct(np.sort(idx))
    # cut a at every boundary of those b intervals, then keep the pieces b does not cover
    cuts = distinct(np.sort(np.concatenate([a[0], a[1], b[0][idx], b[1][idx]])))
    lo_t, hi_t = cuts[:-1], cuts[1:]
    keep = inside(a, lo_t) & ~inside(b, lo_t)
    return union(lo_t[keep], hi_t[keep])


def add_disjoint(a: Spans, b: Spans) -> Spans:
    """The union of two sorted interval sets that do not overlap: a merge, not a sort
    (intervals may touch; every function here accepts that)."""
    at = np.searchsorted(a[0], b[0])
    return np.insert(a[0], at, b[0]), np.insert(a[1], at, b[1])


def distinct(sorted_values: np.ndarray) -> np.ndarray:
    """Sorted values without repeats."""
    keep = np.ones(len(sorted_values), bool)
    keep[1:] = sorted_values[1:] != sorted_values[:-1]
    out: np.ndarray = sorted_values[keep]
    return out


def inside(spans: Spans, t: np.ndarray) -> np.ndarray:
    """Whether each time t lies in one of the disjoint sorted ``spans``."""
    i = np.searchsorted(spans[0], t, "right") - 1
    inside: np.ndarray = (i >= 0) & (spans[1][np.maximum(i, 0)] > t)
    return inside


def clip_per_window(spans: Spans, win_start: np.ndarray, win_end: np.ndarray) -> np.ndarray:
    """Length of ``spans`` inside each window (windows disjoint, sorted by start)."""
    inside: np.ndarray = covered_before(spans, win_end) - covered_before(spans, win_start)
    return inside
