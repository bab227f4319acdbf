"""CUDA API calls and GPU ops of an Nsight Systems export, read slab by slab in start order.

Neither table is in start order in every export (the FSDP export stores its API calls one
process after the other), and a streamed conversion needs, at each cut, every row that starts
before it: so each is read in slabs of starts (:mod:`nvbridge.readers.slabs`), a few slabs
ahead on the database's reader threads, and only the rows not yet handed on are held.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col
from nvbridge.readers._column import ROWID, Column
from nvbridge.readers._db import Database
from nvbridge.readers._pages import Latest, RowFilter
from nvbridge.readers.slabs import Chunks, chunks, plan

# How long after its API call ends a GPU op may start and still be read in that call's window:
# the real exports' longest is 16 ms. A later one is noticed, and the conversion tries again
# with a horizon 60 times longer (a GPU queued a minute behind the host), then reads whole.
# GPU ops within the horizon are held: 1 s kept 10M NVTX rows under 0.6 GB, 10 s did not.
LATE_NS = 1_000_000_000
# A table's raw rows -> its normalized rows (None: none to keep).
Normalize = Callable[[pa.Table], pa.Table | None]
_ROWID = Column("rowid", ROWID)


@dataclass(frozen=True, slots=True)
class Part:
    """One SQLite table of a :class:`SlabTable`: its columns and how its rows are normalized."""

    table: str
    columns: list[Column]
    normalize: Normalize


class SlabTable:
    """Rows of one or more tables (GPU ops: kernels, copies, sets, graphs) read in slabs of
    starts; :meth:`before` hands on, once, the rows that start before a time.

    Each row carries ``table_index`` (its table's place in ``parts``) and ``rowid``, which
    order rows of equal start as the tables list them.
    """

    AHEAD = 1  # slabs read ahead of the one asked for (each a window's rows)

    def __init__(self, db: Database, parts: Sequence[Part], slab_rows: int, latest: Latest = ("end", None)) -> None:
        self.db = db
        # An absent table reads as zero rows: its empty part still names its kind, as the
        # whole-file reader's does.
        self._parts = list(parts)
        self._slab_rows = slab_rows
        # Each table's rowid bounds and chunk spans, scanned on the reader threads meanwhile.
        # ``latest``: the column whose maximum the stats keep (None: none wanted).
        self._scans = [db.run(functools.partial(_scan, db, p.table, latest)) for p in self._parts]
        self._slabs: list[tuple[int | None, int | None]] | None = None
        self._next = 0  # slabs submitted
        self._pending: list[tuple[int | None, list[Future[tuple[pa.Table | None, np.ndarray]]]]] = []
        self._covered: int | None = None  # every row starting before this has been read
        self._done = not self._parts
        self._held: list[pa.Table] = []
        self.rows_read = 0
        self.handed = 0  # rows handed on so far

    def _plan(self) -> list[tuple[int | None, int | None]]:
        if self._slabs is None:
            self._slabs = plan(self.stats, self._slab_rows)
            for _ in range(self.AHEAD):
                self._submit()
        return self._slabs

    def start(self) -> None:
        """Plan the slabs and start reading the first ones."""
        self._plan()

    @property
    def stats(self) -> list[Chunks | None]:
        return [s.result()[1] for s in self._scans]

    def single(self) -> bool:
        """One slab: every table read whole, in table order."""
        return len(self._plan()) == 1

    def bounds(self) -> list[int]:
        """Where one slab ends and the next begins, in start order."""
        return [hi for _lo, hi in self._plan() if hi is not None]

    def dense(self, index: int) -> int | None:
        """The first rowid of table ``index`` when its rowids have no gaps, else None."""
        first, last, rows = self._scans[index].result()[0]
        return first if rows == last - first + 1 else None

    def _submit(self) -> None:
        slabs = self._plan()
        if self._next >= len(slabs):
            return
        lo, hi = slabs[self._next]
        futures = [
            self.db.submit(
                part.table,
                [*part.columns, _ROWID],
                stats.slab(lo, hi, self._next == 0).rows() if stats is not None else None,
                then=functools.partial(_normalized, part.normalize),
            )
            for part, stats in zip(self._parts, self.stats)
        ]
        self._pending.append((hi, futures))
        self._next += 1

    def before(self, t: int | None, exact: bool = True) -> pa.Table | None:
        """The rows starting before ``t`` (None: all) not handed on before; None when there
        are none. Not ``exact``: every row read so far, which includes those (the engine's GPU
        op buffer takes any start, and a filter is a copy of every column)."""
        if not self._parts:
            return None
        self._plan()
        while self._pending and (t is None or self._covered is None or self._covered < t):
            hi, futures = self._pending.pop(0)
            self._submit()
            for index, future in enumerate(futures):
                table, rowids = future.result()
                if table is not None:
                    self.rows_read += table.num_rows
                    table = table.append_column("table_index", pa.array(np.full(table.num_rows, index, np.int64)))
                    self._held.append(table.append_column("rowid", pa.array(rowids)))
            self._covered = hi if hi is not None else _END
        return self._take(t if exact else None)

    def _take(self, t: int | None) -> pa.Table | None:
        if not self._held:
            return None
        # One chunk per column, so the engine's NumPy views of it are zero-copy.
        held = (
            pa.concat_tables(self._held).unify_dictionaries().combine_chunks() if len(self._held) > 1 else self._held[0]
        )
        self._held = []
        if t is None:
            return held
        now = np_col(held, "start_ns") < t
        if now.all():
            return held
        self._held = [held.filter(pa.array(~now))]
        return held.filter(pa.array(now))


# Past every start: what ``_covered`` holds once the last slab (unbounded) is read.
_END = 1 << 63


def _scan(db: Database, table: str, latest: Latest) -> tuple[tuple[int, int, int], Chunks | None]:
    """A table's first and last rowid and its rows, and its chunk spans."""
    if not db.has(table):
        return (0, -1, 0), chunks([])
    # Two subqueries: SQLite answers each from one end of the b-tree.
    ((first, last),) = db.scalar_rows(f"SELECT (SELECT min(rowid) FROM {table}), (SELECT max(rowid) FROM {table})")
    first, last = int(first or 0), int(last if last is not None else -1)
    stats = db.chunk_spans(table, RowFilter(), latest, first, last)
    if stats is not None:  # every row is in a chunk: no count(*), a second pass over the table
        return (first, last, int(stats.with_start.sum()) + stats.without_start), stats
    ((rows,),) = db.scalar_rows(f"SELECT count(*) FROM {table}")
    return (first, last, int(rows or 0)), stats


def _normalized(normalize: Normalize, raw: pa.Table) -> tuple[pa.Table | None, np.ndarray]:
    rowids = np_col(raw, "rowid")
    return normalize(raw.drop_columns(["rowid"])), rowids


def first_start(tables: Sequence[SlabTable]) -> int | None:
    """The earliest start of any row of ``tables`` (for a trace's origin, before any is read)."""
    starts = [int(s.lo.min()) for t in tables for s in t.stats if s is not None and len(s.lo)]
    return min(starts, default=None)
