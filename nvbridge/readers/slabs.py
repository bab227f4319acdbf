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

# Chunks per table the grouped scan aims at: enough to size slabs, few enough to plan in NumPy.
CHUNKS = 1024


@dataclass(frozen=True, slots=True)
class Chunks:
    """Per rowid chunk: first and last rowid, rows, rows with a start, and the starts' span."""

    first: np.ndarray
    last: np.ndarray
    with_start: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    without_start: int  # rows whose start is NULL (the first slab takes them, to be refused)
    latest_range: int | None  # the latest start of a range row (never-closed ranges clamp there)


@dataclass(frozen=True, slots=True)
class Slab:
    """Rows with ``lo <= start < hi`` (None: unbounded) in the rowid ranges ``spans``
    (None: the whole table); ``nulls``: rows without a start come too."""

    lo: int | None
    hi: int | None
    spans: list[tuple[int, int]] | None
    nulls: bool

    def where(self) -> str:
        """The slab as an SQL condition on ``start`` and ``rowid``."""
        terms = []
        if self.lo is not None:
            terms.append(f"start >= {self.lo}")
        if self.hi is not None:
            terms.append(f"start < {self.hi}")
        if self.spans is not None:
            terms.append("(" + " OR ".join(f"rowid BETWEEN {a} AND {b}" for a, b in self.spans) + ")")
        cond = " AND ".join(terms) or "1"
        return f"(({cond}) OR start IS NULL)" if self.nulls else f"({cond})"


def chunk_query(table: str, where: str, range_types: tuple[int, ...], first: int, last: int) -> str:
    """The grouped scan behind :class:`Chunks` (rowids ``first..last`` in about CHUNKS chunks)."""
    bits = max(10, ((last - first + 1) // CHUNKS).bit_length())
    return (
        f"SELECT min(rowid), max(rowid), count(start), min(start), max(start), count(*) - count(start), "
        f"max(CASE WHEN eventType IN {range_types} THEN start END) "
        f"FROM {table} WHERE {where} GROUP BY rowid >> {bits} ORDER BY 1"
    )


def chunks(rows: Sequence[Sequence[Any]]) -> Chunks:
    """:class:`Chunks` from :func:`chunk_query`'s rows (chunks with no start are dropped)."""
    col = [np.array([r[i] if r[i] is not None else -1 for r in rows], np.int64) for i in range(5)]
    latest = [int(r[6]) for r in rows if r[6] is not None]
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


def plan(c: Chunks, slab_rows: int) -> list[Slab]:
    """Slabs of about ``slab_rows`` rows each, in start order, covering every row once.

    Rows are assumed spread evenly over their chunk's start span to place the cuts; the
    estimate sizes slabs only, every row is read by the one slab whose starts hold it.
    """
    total = int(c.with_start.sum())
    if total <= slab_rows:
        return [Slab(None, None, None, False)]  # one slab: the whole table, as a rowid window reads it
    candidates = np.unique(np.concatenate([c.lo, c.hi + 1]))
    span = (c.hi + 1 - c.lo).astype(np.float64)
    below = np.zeros(len(candidates))
    for i in range(0, len(c.lo), 256):  # (candidates x 256) at a time: bounded memory
        s = slice(i, i + 256)
        frac = np.clip((candidates[:, None] - c.lo[s]) / span[s], 0.0, 1.0)
        below += frac @ c.with_start[s].astype(np.float64)
    # The estimate is linear between candidates: a cut lands where it reaches each target.
    targets = np.arange(1, -(-total // slab_rows)) * slab_rows
    cuts = np.unique(np.interp(targets, below, candidates).astype(np.int64))
    bounds: list[int | None] = [None, *(int(x) for x in cuts), None]
    slabs = []
    for k, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        meets = np.ones(len(c.lo), bool)
        if lo is not None:
            meets &= c.hi >= lo
        if hi is not None:
            meets &= c.lo < hi
        nulls = k == 0 and c.without_start > 0
        slabs.append(Slab(lo, hi, None if nulls else _spans(c, meets), nulls))
    return slabs


def _spans(c: Chunks, meets: np.ndarray) -> list[tuple[int, int]]:
    """Rowid ranges of the runs of consecutive chunks in ``meets``."""
    idx = np.flatnonzero(meets)
    if not len(idx):
        return [(0, -1)]  # no chunk: an empty range
    breaks = np.flatnonzero(np.diff(idx) > 1)
    starts = np.concatenate([[idx[0]], idx[breaks + 1]])
    stops = np.concatenate([idx[breaks], [idx[-1]]])
    return [(int(c.first[a]), int(c.last[b])) for a, b in zip(starts, stops)]
