"""Time slabs: NVTX rows read in start order without an index, a slab of starts at a time.

A report whose ranges are out of start order cannot stream by rowid windows (the engine
needs every range that starts before a cut). SQLite has no index on ``start``, so "ORDER BY
start" would sort the whole table and "WHERE start BETWEEN" would scan it once per window.
Instead, one grouped scan records each rowid chunk's row count and start span; a slab
``[lo, hi)`` then reads only the chunks whose span meets it, by rowid range, with the start
filter. Rows already in order cost one read; out-of-order chunks are read once per slab they
span, never more rows held than a slab's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nvbridge.readers._pages import Member, RowFilter

# Chunks per table the scan aims at: enough to size slabs, few enough to plan in NumPy.
CHUNKS = 1024
# The first slab holds 1/FIRST_SLAB_SHARE of a slab's rows (see plan).
FIRST_SLAB_SHARE = 8
# SQLite's limit on the SELECTs of one compound statement is 500.
_PER_STATEMENT = 400


@dataclass(frozen=True, slots=True)
class Chunks:
    """One table's rowid chunks ``[first, last]`` that hold a start: rows with one, and their
    span of starts."""

    first: np.ndarray
    last: np.ndarray
    with_start: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    without_start: int  # rows whose start is NULL (the first slab takes them, to be refused)
    latest: int | None  # the largest ``latest`` expression (e.g. a range row's start, an end)

    def slab(self, lo: int | None, hi: int | None, first: bool) -> Slab:
        """This table's part of the slab ``[lo, hi)`` (``first``: the first slab)."""
        if lo is None and hi is None:
            return Slab(None, None, None, False)
        meets = np.ones(len(self.lo), bool)
        if lo is not None:
            meets &= self.hi >= lo
        if hi is not None:
            meets &= self.lo < hi
        nulls = first and self.without_start > 0
        return Slab(lo, hi, None if nulls else _spans(self, meets), nulls)


@dataclass(frozen=True, slots=True)
class Slab:
    """Rows with ``lo <= start < hi`` (None: unbounded) in the rowid ranges ``spans``
    (None: the whole table); ``nulls``: rows without a start come too."""

    lo: int | None
    hi: int | None
    spans: list[tuple[int, int]] | None
    nulls: bool

    def rows(self, member: Member | None = None) -> RowFilter:
        """The slab as a row filter on ``start`` and ``rowid`` (and ``member``, if given). Rows
        without a start come from any rowid: a slab that takes them has no spans."""
        spans = None if self.spans is None else tuple(self.spans)
        bounded = self.lo is not None or self.hi is not None or self.nulls
        return RowFilter(spans, member, ("start", self.lo, self.hi, self.nulls) if bounded else None)

    def where(self) -> str:
        """The slab as an SQL condition on ``start`` and ``rowid``."""
        return self.rows().sql()


def chunk_size(first: int, last: int) -> int:
    """Rowids per chunk for rowids ``first..last``: about CHUNKS chunks, a power of two."""
    return 1 << max(10, ((last - first + 1) // CHUNKS).bit_length())


def chunk_queries(table: str, where: str, latest: str, first: int, last: int) -> list[str]:
    """The scans behind :class:`Chunks`: rowids ``first..last`` in about CHUNKS chunks, each an
    aggregate over one rowid range (a b-tree seek and a run, no sort), a few hundred per
    statement. ``latest``: the SQL expression whose maximum :attr:`Chunks.latest` holds."""
    size = chunk_size(first, last)
    selects = [
        f"SELECT {a}, {a + size - 1}, count(start), min(start), max(start), count(*) - count(start), "
        f"max({latest}) FROM {table} WHERE rowid BETWEEN {a} AND {a + size - 1} AND ({where})"
        for a in range(first, last + 1, size)
    ]
    return [" UNION ALL ".join(selects[i : i + _PER_STATEMENT]) for i in range(0, len(selects), _PER_STATEMENT)]


def chunks(rows: Sequence[Sequence[Any]]) -> Chunks | None:
    """:class:`Chunks` from the rows of :func:`chunk_queries` (chunks with no start dropped);
    None when a start or end is not an integer (the read that follows names the damage)."""
    try:
        col = [np.array([r[i] if r[i] is not None else -1 for r in rows], np.int64) for i in range(5)]
        latest = [int(r[6]) for r in rows if r[6] is not None]
    except (TypeError, ValueError, OverflowError):
        return None
    has = col[2] > 0
    return Chunks(
        col[0][has],
        col[1][has],
        col[2][has],
        col[3][has],
        col[4][has],
        sum(int(r[5] or 0) for r in rows),
        max(latest, default=None),
    )


def from_spans(first: int, size: int, spans: np.ndarray) -> Chunks:
    """:class:`Chunks` from nvbridge._native's chunk_spans: per chunk of ``size`` rowids from
    ``first``, rows with a start, least and greatest start, rows without one, greatest latest."""
    count, lo, hi, nulls, latest = spans.reshape(5, -1)
    has = np.flatnonzero(count > 0)
    a = first + has * size
    known = latest[latest != np.iinfo(np.int64).min]
    return Chunks(
        a, a + size - 1, count[has], lo[has], hi[has], int(nulls.sum()), int(known.max()) if len(known) else None
    )


def plan(tables: Sequence[Chunks | None], slab_rows: int) -> list[tuple[int | None, int | None]]:
    """Bounds ``[lo, hi)`` of slabs holding about ``slab_rows`` rows of ``tables`` each, in
    start order, from None (before every start) to None (after them); one slab if a table's
    chunks could not be read (None).

    Rows are assumed spread evenly over their chunk's span of starts to place the cuts; the
    estimate sizes slabs only: every row is read by the one slab whose bounds hold its start.
    """
    read = [c for c in tables if c is not None]
    if len(read) < len(tables):
        return [(None, None)]
    lo = np.concatenate([c.lo for c in read]) if read else np.zeros(0, np.int64)
    hi = np.concatenate([c.hi for c in read]) if read else np.zeros(0, np.int64)
    rows = np.concatenate([c.with_start for c in read]).astype(np.float64) if read else np.zeros(0)
    total = int(rows.sum())
    if total <= slab_rows:
        return [(None, None)]  # one slab: every table whole, as a rowid window reads it
    candidates = np.unique(np.concatenate([lo, hi + 1]))
    span = (hi + 1 - lo).astype(np.float64)
    below = np.zeros(len(candidates))
    for i in range(0, len(lo), 256):  # (candidates x 256) at a time: bounded memory
        s = slice(i, i + 256)
        below += np.clip((candidates[:, None] - lo[s]) / span[s], 0.0, 1.0) @ rows[s]
    # The estimate is linear between candidates: a cut lands where it reaches each target.
    # The first slab is small: the first window waits for it, with every reader thread busy.
    first = max(1, slab_rows // FIRST_SLAB_SHARE)
    targets = np.arange(first, total, slab_rows)
    cuts = [int(x) for x in np.unique(np.interp(targets, below, candidates).astype(np.int64))]
    bounds: list[int | None] = [None, *cuts, None]
    return list(zip(bounds[:-1], bounds[1:]))


def _spans(c: Chunks, meets: np.ndarray) -> list[tuple[int, int]]:
    """Rowid ranges of the runs of consecutive chunks in ``meets``."""
    idx = np.flatnonzero(meets)
    if not len(idx):
        return [(0, -1)]  # no chunk: an empty range
    breaks = np.flatnonzero(np.diff(idx) > 1)
    starts = np.concatenate([[idx[0]], idx[breaks + 1]])
    stops = np.concatenate([idx[breaks], [idx[-1]]])
    return [(int(c.first[a]), int(c.last[b])) for a, b in zip(starts, stops)]
