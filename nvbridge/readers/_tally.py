"""The page reader's reads cross-checked: the rows each table's reads passed, against SQLite's own
count.

Why: the page reader's checks are SQLite's, page by page, but a bug of its own (a subtree it
skips, a leaf it stops in) or damage no page check sees would drop rows silently. So every read
reports the rows it passed (kept by its filters or not) inside the rowids it examined whole;
once a table's reads cover its rowids from SQLite's least to its greatest, their sum and ends
must be SQLite's ``count(*)``, ``min(rowid)`` and ``max(rowid)``. SQLite counts on a thread of
its own, started at a table's first read, while the reads go on (count(*) steps no row: it sums
the leaves' cell counts). Reads through SQLite need no such check: they and the count are one
engine's walk of one b-tree.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from nvbridge.readers._page_scan import Tally
from nvbridge.workers import worker_pool

if TYPE_CHECKING:
    import pyarrow as pa

    from nvbridge.readers._column import Column

# SQLite's (count, least rowid, greatest rowid) of a table; None ends when it is empty.
Figures = tuple[int, int | None, int | None]
# A read's interval (inclusive, None an open end), rows passed, least and greatest rowid seen.
_Part = tuple[int | None, int | None, int, int | None, int | None]


class PagesDamaged(Exception):
    """What was read is damaged: a page SQLite's own checks call corrupt, a table's rows that do
    not add up to SQLite's count, a NULL where the schema says NOT NULL (integrity_check's
    "NULL value in"). Never read such a file through SQLite instead: on a damaged page it may
    return another subset of the rows without an error."""


def no_forbidden_nulls(table: str, raw: pa.Table, not_null: frozenset[str], columns: Sequence[Column]) -> None:
    """Refuse a read of ``table`` (``columns``, as ``raw`` holds them) with a NULL in a column the
    schema declares NOT NULL: SQLite reads it, but integrity_check calls the file damaged (a
    serial type changed to NULL's keeps a record's sizes, so no page check sees it).

    Raises:
        PagesDamaged: such a NULL.
    """
    for col in columns:
        n = raw.column(col.field).null_count if col.raw in not_null else 0
        if n:
            raise PagesDamaged(f"table {table}: column {col.raw} holds NULL in {n:,} rows; its schema says NOT NULL")


def _overlap(a: tuple[int | None, int | None], b: tuple[int | None, int | None]) -> bool:
    lo = max(x for x in (a[0], b[0], -(1 << 64)) if x is not None)
    hi = min(x for x in (a[1], b[1], 1 << 64) if x is not None)
    return lo <= hi


class RowTally:
    """Each table's page-reader reads, checked against SQLite's figures (``figures(table)``, run
    on a thread of its own) as soon as they cover the table, and at :meth:`finish`."""

    def __init__(self, figures: Callable[[str], Figures]) -> None:
        self._figures = figures
        self._pool: ThreadPoolExecutor | None = None
        self._counts: dict[str, Future[Figures]] = {}
        self._parts: dict[str, list[_Part]] = {}
        self._checked: set[str] = set()
        self._lock = threading.Lock()

    def add(self, table: str, tally: Tally) -> None:
        """One read's tally. Overlapping reads (a table's chunk scan, then its slabs) count once.

        Raises:
            PagesDamaged: the reads cover the table and disagree with SQLite's figures.
        """
        if tally.covered is None:
            return
        with self._lock:
            if table in self._checked:
                return
            if table not in self._counts:
                if self._pool is None:
                    self._pool = worker_pool(1, "nvbridge-count")
                self._counts[table] = self._pool.submit(self._figures, table)
            parts = self._parts.setdefault(table, [])
            if any(_overlap(tally.covered, (lo, hi)) for lo, hi, *_ in parts):
                return
            parts.append((*tally.covered, tally.passed, tally.lo, tally.hi))
            ready = self._counts[table].done()
        if ready:
            self._check(table)

    def finish(self) -> None:
        """Check every table whose reads cover it, waiting for SQLite's figures.

        Raises:
            PagesDamaged: see :meth:`add`.
        """
        for table in list(self._parts):
            self._check(table)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def _check(self, table: str) -> None:
        count, least, greatest = self._counts[table].result()
        with self._lock:
            if table in self._checked:
                return
            parts = sorted(self._parts[table], key=lambda p: -(1 << 64) if p[0] is None else p[0])
            if least is not None and greatest is not None and not _covers(parts, least, greatest):
                return  # not read whole (yet): no verdict
            self._checked.add(table)
        passed = sum(p[2] for p in parts)
        seen_lo = min((p[3] for p in parts if p[3] is not None), default=None)
        seen_hi = max((p[4] for p in parts if p[4] is not None), default=None)
        if (passed, seen_lo, seen_hi) != (count, least, greatest):
            raise PagesDamaged(
                f"table {table}: the page reader read {passed:,} rows (rowids {seen_lo}..{seen_hi}) where "
                f"SQLite counts {count:,} (rowids {least}..{greatest})"
            )


def _covers(parts: list[_Part], least: int, greatest: int) -> bool:
    """Whether the intervals (sorted by their start) cover rowids ``least..greatest``."""
    need = least
    for lo, hi, *_ in parts:
        if lo is not None and lo > need:
            return False
        if hi is None:
            return True
        need = max(need, hi + 1)
        if need > greatest:
            return True
    return need > greatest
