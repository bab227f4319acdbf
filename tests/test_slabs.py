"""Time slabs (readers.slabs): every row is read by exactly one slab, in start order."""

from __future__ import annotations

import sqlite3

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nvbridge.readers._pages import RowFilter
from nvbridge.readers.slabs import Chunks, chunk_queries, chunks, plan

TYPES = (59, 60)


def _table(starts: list[int | None], gap: int) -> sqlite3.Connection:
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, eventType INTEGER)")
    con.executemany(
        "INSERT INTO NVTX_EVENTS (rowid, start, eventType) VALUES (?, ?, ?)",
        [(1 + i * gap, s, 59 if i % 3 else 34) for i, s in enumerate(starts)],
    )
    return con


def _chunks(con: sqlite3.Connection, last: int) -> Chunks:
    latest = f"CASE WHEN eventType IN {TYPES} THEN start END"
    c = chunks([row for q in chunk_queries("NVTX_EVENTS", "1", latest, 1, last) for row in con.execute(q)])
    assert c is not None
    return c


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.one_of(st.integers(0, 10**6), st.none()), max_size=400),
    st.integers(1, 3000),
    st.sampled_from(["as drawn", "sorted", "reversed"]),
    st.integers(5, 120),
)
def test_every_row_lands_in_one_slab(starts: list[int | None], gap: int, order: str, slab_rows: int) -> None:
    if order != "as drawn":
        known = sorted(s for s in starts if s is not None)
        starts = (known if order == "sorted" else known[::-1]) + [s for s in starts if s is None]
    con = _table(starts, gap)
    last = 1 + (len(starts) - 1) * gap
    c = _chunks(con, last)
    slabs = [c.slab(lo, hi, k == 0) for k, (lo, hi) in enumerate(plan([c], slab_rows))]
    seen: list[int] = []
    previous_hi = None
    for slab in slabs:
        rows = [r for (r,) in con.execute(f"SELECT rowid FROM NVTX_EVENTS WHERE {slab.where()}")]
        seen += rows
        assert slab.lo == previous_hi  # slabs tile the time line, in order
        previous_hi = slab.hi
    assert previous_hi is None
    assert sorted(seen) == [1 + i * gap for i in range(len(starts))]  # each row exactly once
    ranges = [s for i, s in enumerate(starts) if i % 3 and s is not None]
    assert c.latest == (max(ranges) if ranges else None)
    if order == "sorted" and len(set(starts)) == len(starts) and None not in starts:
        # Rows in start order: slab sizes follow the request (the estimate is exact per chunk
        # only at chunk ends, so allow a chunk's worth of slack).
        sizes = [len(con.execute(f"SELECT 1 FROM NVTX_EVENTS WHERE {s.where()}").fetchall()) for s in slabs]
        assert len(slabs) >= len(starts) // slab_rows
        assert max(sizes, default=0) <= 2 * slab_rows + 1024 // gap + 1


def test_one_slab_reads_the_whole_table_unfiltered() -> None:
    con = _table(list(range(50)), 1)
    c = _chunks(con, 50)
    assert plan([c], 50) == [(None, None)]
    assert c.slab(None, None, True).rows() == RowFilter()  # no filter: every row, as SQL's "1"
    assert c.slab(None, None, True).where() == "1"
    assert np.array_equal(c.with_start, [50])
