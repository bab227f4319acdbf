"""Bulk reads of a local SQLite file into Arrow: nvbridge's own compiled readers where they were
built (``nvbridge._native``), ConnectorX otherwise.

The compiled readers write each value once into Arrow's layout. The page reader walks a table's
b-tree itself (:mod:`nvbridge.readers._pages` says which reads it takes: half the CPU of SQLite's
virtual machine); damage it finds is refused, never read through SQLite (which may read a damaged page
without an error); every other read, and any it refuses, goes through SQLite, one connection per
reader thread (20% less CPU than ConnectorX, which also leaves three threads behind per query:
7,500 of them at 50M NVTX rows). All refuse a value of another type than its column's, and text
that is not UTF-8: the caller then reads the query the slow way (:class:`FastPathFailed`).
"""

from __future__ import annotations

import sqlite3
import threading
import urllib.parse
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from nvbridge.columns import one_chunk
from nvbridge.compiled import native
from nvbridge.readers._column import ARROW_TYPES, ROWID
from nvbridge.readers._page_scan import PageScan
from nvbridge.readers._pages import enabled, without_rowid
from nvbridge.readers._tally import Figures, PagesDamaged, RowTally

if TYPE_CHECKING:
    from pathlib import Path

    from nvbridge._native import Buffer, Pages, Reader
    from nvbridge.readers._column import Column
    from nvbridge.readers._page_scan import ChunkScan
# Tables of at most this many leaf pages (256 KB at 4 KB pages) are walked whole when the file is
# surveyed: the small queries that read them go through SQLite, not the page reader.
SMALL_LEAVES = 64
# Column types (readers._column.ColumnType) -> the compiled reader's kinds and Arrow types.
_KINDS = {"int": "i", "float": "f", "str": "s", "bytes": "b"}


def kinds_of(types: Sequence[str]) -> str:
    """The compiled readers' kinds of columns typed ``types`` (ColumnType)."""
    return "".join(_KINDS[t] for t in types)


_ARROW = {"i": pa.int64(), "f": pa.float64(), "s": pa.string(), "b": pa.binary()}


class FastPathFailed(Exception):
    """The fast reader could not read a query: text that is not UTF-8, a value of another type,
    or a damaged file. The stdlib driver then reads it, or reports what is wrong."""


class FastReads:
    """Bulk reads of one SQLite file (``uri``: an SQLite ``file:`` URI, read-only; ``path``: the
    file it opens), from any thread: each thread reads through its own connection and pages.

    The page reader's first use surveys the file (``Pages.survey``: every b-tree and the free
    list, as PRAGMA integrity_check marks them), and each of its reads is tallied against
    SQLite's own count (:mod:`nvbridge.readers._tally`). Damage it finds raises
    :class:`PagesDamaged`, never a read through SQLite instead.
    """

    def __init__(self, uri: str, path: Path) -> None:
        self._uri = uri
        self._path = path
        self._local = threading.local()
        self._readers: list[Reader | Pages] = []
        self._lock = threading.Lock()
        self._survey: bytes | None = None
        self._survey_lock = threading.Lock()
        self._damage: str | None = None  # what the survey found, refused at every page read
        self._checked: set[str] = set()  # tables walked before SQLite read them (check)
        self.tally = RowTally(self._figures)
        # Whether the page reader takes this file (turned on, UTF-8, not in WAL mode).
        self.pages = native is not None and enabled() and self._thread_pages() is not None

    def read(
        self,
        sql: str,
        names: Sequence[str],
        types: Sequence[str],
        scan: PageScan | None = None,
        check: PageScan | None = None,
    ) -> pa.Table:
        """Every row of ``sql``, its columns named ``names`` and typed ``types`` (ColumnType);
        ``scan``: the same read for the page reader (:mod:`nvbridge.readers._pages`), tried first;
        ``check``: the table's walk without columns, made once (:meth:`check`) before SQLite
        reads the table instead.

        Raises:
            FastPathFailed: see the class.
            PagesDamaged: the page reader found the file damaged.
        """
        if native is None:
            return self._connectorx(sql)
        kinds = "".join(_KINDS[t] for t in types)
        columns = None
        pages = self._pages() if scan is not None else None
        if pages is not None and scan is not None:
            found = self._scan(pages, scan)
            columns = None if found is None else found[0]
        if columns is None:
            self.check(check)
            try:
                columns = self._reader().read(sql, kinds)
            except native.Unreadable as exc:
                raise FastPathFailed(str(exc)) from exc
        return pa.table([_array(kind, col) for kind, col in zip(kinds, columns)], names=list(names))

    def read_window(
        self, scan: PageScan, first: int, count: int, names: Sequence[str]
    ) -> tuple[pa.Table, int | None] | None:
        """``scan`` (without spans) as a window of ``count`` rows from rowid ``first``, as a table,
        and the rowid after it; None when the page reader cannot read it (the caller reads it
        through SQLite).

        Raises:
            PagesDamaged: see :meth:`read`.
        """
        pages = self._pages() if native is not None else None
        found = None if pages is None else self._scan(pages, scan.window(first, count))
        if found is None:
            return None
        columns, stop = found
        return pa.table([_array(kind, col) for kind, col in zip(scan.kinds, columns)], names=list(names)), stop

    def check(self, walk: PageScan | None) -> None:
        """Before SQLite reads a table the page reader does not (an index, REAL affinity, a value
        it leaves to SQLite): the table's b-tree walked once by the page reader's checks, no
        column decoded (``walk``: its PageScan without positions), and tallied. SQLite reads a
        damaged page without an error where its own checks do not look.

        Raises:
            PagesDamaged: the walk found damage.
        """
        if walk is None or native is None:
            return
        with self._lock:
            if walk.table in self._checked:
                return
            self._checked.add(walk.table)
        pages = self._pages()
        if pages is not None:
            self._scan(pages, walk)
        self._indexes_match(walk.table)

    def _indexes_match(self, table: str) -> None:
        """SQLite's integrity_check of ``table`` where it has an index: a value changed in an
        indexed column leaves a sound page and a row its index does not hold (nvprof's tables
        are all indexed). SQLite before 3.33 takes no table there: not checked.

        Raises:
            PagesDamaged: a row and its index disagree.
        """
        assert native is not None
        name = "'" + table.replace("'", "''") + "'"
        sql = f"SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = {name}"
        if sqlite3.sqlite_version_info < (3, 33) or not _array("i", self._reader().read(sql, "i")[0]).to_pylist()[0]:
            return
        quoted = '"' + table.replace('"', '""') + '"'
        found = _array("s", self._reader().read(f"PRAGMA integrity_check({quoted})", "s")[0]).to_pylist()
        if found != ["ok"]:
            raise PagesDamaged(f"table {table}: SQLite's integrity_check finds {str(found[0]).splitlines()[-1]}")

    def _scan(self, pages: Pages, scan: PageScan) -> tuple[list[tuple[object, ...]], int | None] | None:
        """The page reader's columns and window end; None where it leaves the read to SQLite."""
        assert native is not None
        try:
            columns, stop, tally = scan.run(pages)
        except native.Unreadable:
            return None  # SQLite reads it, or names the damage
        except native.Damaged as exc:
            raise PagesDamaged(f"table {scan.table}, {exc}") from exc
        self.tally.add(scan.table, tally)
        return columns, stop

    def _pages(self) -> Pages | None:
        """This thread's page reader; None where the file is not one it reads.

        Raises:
            PagesDamaged: the survey found the file damaged.
        """
        pages = self._thread_pages()
        if self._damage is not None:
            raise PagesDamaged(self._damage)
        return pages

    def _thread_pages(self) -> Pages | None:
        assert native is not None
        if not hasattr(self._local, "pages"):
            pages: Pages | None = None
            if enabled():
                try:
                    pages = native.Pages(self._path)
                    self._surveyed(pages)
                except (native.Unreadable, OSError, FastPathFailed):
                    pages = None
            self._local.pages = pages
            if pages is not None:
                with self._lock:
                    self._readers.append(pages)
        found: Pages | None = self._local.pages
        return found

    def _surveyed(self, pages: Pages) -> None:
        """Survey the file with ``pages`` once (later threads' pages take that survey), then walk
        its small tables whole (SMALL_LEAVES leaf pages at most: metadata, enums, devices, which
        small queries read through SQLite without the page reader)."""
        assert native is not None
        with self._survey_lock:
            if self._survey is not None:
                pages.survey((), known=self._survey)
                return
            if self._damage is not None:
                return
            rows = self._reader().read("SELECT rootpage, name, type, sql FROM sqlite_master WHERE rootpage > 1", "isss")
            roots, names, kinds, sqls = (_array(k, c).to_pylist() for k, c in zip("isss", rows))
            if any(r is not None and r >= 1 << 32 for r in roots):  # SQLite's page numbers are 32-bit
                self._damage = "sqlite_master holds a root page number past 32 bits"
                return
            try:
                self._survey, leaves = pages.survey(tuple(int(r) for r in roots if r is not None))
            except native.Damaged as exc:
                what, root = exc.args
                where = {1: "sqlite_master", **dict(zip(roots, names))}.get(root)
                self._damage = f"table {where}, {what}" if where else str(what)
                return
            small = [
                (str(n), int(r))
                for r, n, k, sql, count in zip([r for r in roots if r is not None], names, kinds, sqls, leaves)
                if k == "table" and count <= SMALL_LEAVES and not without_rowid(str(sql or ""))
            ]
        for name, root in small:
            try:
                PageScan(name, root, (), "").run(pages)
                self._indexes_match(name)
            except native.Unreadable:
                pass  # SQLite reads it, or names what is wrong
            except (native.Damaged, PagesDamaged) as exc:
                self._damage = f"table {name}, {exc}" if isinstance(exc, native.Damaged) else str(exc)
                return
            self._checked.add(name)

    def _figures(self, table: str) -> Figures:
        """SQLite's count, least and greatest rowid of ``table`` (on the tally's thread).

        Raises:
            PagesDamaged: SQLite cannot count the table.
        """
        assert native is not None
        name = '"' + table.replace('"', '""') + '"'
        sql = f"SELECT (SELECT count(*) FROM {name}), (SELECT min(rowid) FROM {name}), (SELECT max(rowid) FROM {name})"
        try:
            row = [_array("i", col).to_pylist()[0] for col in self._reader().read(sql, "iii")]
        except (native.Unreadable, FastPathFailed) as exc:
            raise PagesDamaged(f"table {table}: SQLite cannot count its rows ({exc})") from exc
        return int(row[0]), row[1], row[2]

    def chunk_spans(
        self, sql: str, first: int, size: int, n: int, scan: ChunkScan | None = None, check: PageScan | None = None
    ) -> np.ndarray | None:
        """nvbridge._native's per-chunk spans of ``sql``'s (rowid, start, latest) rows: an int64
        array [5][n]; None where a start or latest is not an integer. ``scan``: the same pass for
        the page reader; ``check``: as :meth:`read`'s.

        Raises:
            FastPathFailed: the reader is not built, or SQLite failed.
            PagesDamaged: see :meth:`read`.
        """
        if native is None:
            raise FastPathFailed("nvbridge._native is not built")
        pages = self._pages() if scan is not None else None
        spans: Buffer | None = None
        read = False
        if pages is not None and scan is not None:
            try:
                spans, tally = scan.run(pages)
                read = True
                self.tally.add(scan.table, tally)
            except native.Unreadable:
                pass  # SQLite reads it, or names the damage
            except native.Damaged as exc:
                raise PagesDamaged(f"table {scan.table}, {exc}") from exc
        if not read:
            self.check(check)
            try:
                spans = self._reader().chunk_spans(sql, first, size, n)
            except native.Unreadable as exc:
                raise FastPathFailed(str(exc)) from exc
        return None if spans is None else np.frombuffer(spans, np.int64)

    def _reader(self) -> Reader:
        reader: Reader | None = getattr(self._local, "reader", None)
        if reader is None:
            assert native is not None
            try:
                reader = native.Reader(self._uri)
            except native.Unreadable as exc:
                raise FastPathFailed(str(exc)) from exc
            self._local.reader = reader
            with self._lock:
                self._readers.append(reader)
        return reader

    def close(self) -> None:
        """Close every thread's connection (once no read is running)."""
        self.tally.close()
        with self._lock:
            for reader in self._readers:
                reader.close()
            self._readers.clear()

    def _connectorx(self, sql: str) -> pa.Table:
        import connectorx as cx

        # ConnectorX percent-decodes the path once and opens it with SQLite's URI flag, so a
        # quoted read-only URI keeps odd file names working and the file untouched.
        url = "sqlite://" + urllib.parse.quote(self._uri)
        try:
            table: pa.Table = cx.read_sql(url, sql, return_type="arrow")
        except RuntimeError as exc:  # ConnectorX reports every failure as RuntimeError
            raise FastPathFailed(str(exc)) from exc
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # a Rust panic (pyo3's PanicException): e.g. a schema that is not UTF-8
            raise FastPathFailed(str(exc)) from exc
        return table


def _array(kind: str, column: tuple[object, ...]) -> pa.Array:
    """One column of the compiled reader's output as an Arrow array, its buffers not copied."""
    rows, nulls, validity, *buffers = column
    valid = pa.py_buffer(validity) if validity is not None else None
    return pa.Array.from_buffers(_ARROW[kind], rows, [valid, *(pa.py_buffer(b) for b in buffers)], nulls)


def typed(raw: pa.Table, columns: Sequence[Column], present: frozenset[str]) -> pa.Table:
    """A fast read's columns as ``columns`` declare them: absent ones as their default, each of
    its type; numbers in one chunk, so every later NumPy view is zero-copy (text stays in the
    reader's chunks: Arrow kernels and Parquet take them as they are)."""
    arrays: list[pa.Array | pa.ChunkedArray] = []
    for col in columns:
        typ = ARROW_TYPES[col.type]
        if col.raw not in present and col.raw != ROWID:
            arrays.append(pa.repeat(pa.scalar(col.default, typ), raw.num_rows))
        elif raw.num_rows == 0:  # nothing to type the column by
            arrays.append(pa.array([], typ))
        else:
            arr = raw.column(col.field)
            arr = one_chunk(arr) if col.type != "str" else arr
            arrays.append(arr if arr.type == typ else arr.cast(typ))
    return pa.table(arrays, names=[c.field for c in columns])
