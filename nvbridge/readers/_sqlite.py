"""Bulk reads of a local SQLite file into Arrow: nvbridge's own compiled readers where they were
built (``nvbridge._native``), ConnectorX otherwise.

The compiled readers write each value once into Arrow's layout. The page reader walks a table's
b-tree itself (:mod:`nvbridge.readers._pages` says which reads it takes: half the CPU of SQLite's
virtual machine); every other read, and any it refuses, goes through SQLite, one connection per
reader thread (20% less CPU than ConnectorX, which also leaves three threads behind per query:
7,500 of them at 50M NVTX rows). All refuse a value of another type than its column's, and text
that is not UTF-8: the caller then reads the query the slow way (:class:`FastPathFailed`).
"""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from nvbridge.compiled import native

if TYPE_CHECKING:
    from pathlib import Path

    from nvbridge._native import Buffer, Pages, Reader
    from nvbridge.readers._pages import ScanArgs, TableLayout
# Column types (readers._column.ColumnType) -> the compiled reader's kinds and Arrow types.
_KINDS = {"int": "i", "float": "f", "str": "s", "bytes": "b"}
_ARROW = {"i": pa.int64(), "f": pa.float64(), "s": pa.string(), "b": pa.binary()}


class FastPathFailed(Exception):
    """The fast reader could not read a query: text that is not UTF-8, a value of another type,
    or a damaged file. The stdlib driver then reads it, or reports what is wrong."""


class FastReads:
    """Bulk reads of one SQLite file (``uri``: an SQLite ``file:`` URI, read-only; ``path``: the
    file it opens), from any thread: each thread reads through its own connection and pages."""

    def __init__(self, uri: str, path: Path) -> None:
        self._uri = uri
        self._path = path
        self._local = threading.local()
        self._readers: list[Reader | Pages] = []
        self._lock = threading.Lock()
        # Whether the page reader takes this file (UTF-8, not in WAL mode): known at the first read.
        self.pages = native is not None and self._pages() is not None

    def read(
        self, sql: str, names: Sequence[str], types: Sequence[str], scan: tuple[TableLayout, ScanArgs] | None = None
    ) -> pa.Table:
        """Every row of ``sql``, its columns named ``names`` and typed ``types`` (ColumnType);
        ``scan``: the same read for the page reader (:mod:`nvbridge.readers._pages`), tried first.

        Raises:
            FastPathFailed: see the class.
        """
        if native is None:
            return self._connectorx(sql)
        kinds = "".join(_KINDS[t] for t in types)
        columns = None
        pages = self._pages() if scan is not None else None
        if pages is not None and scan is not None:
            layout, (spans, positions, alias, member, bound) = scan
            try:
                columns = pages.scan(layout.root, positions, kinds, spans, alias, member, bound)
            except native.Unreadable:
                columns = None  # SQLite reads it, or names the damage
        if columns is None:
            try:
                columns = self._reader().read(sql, kinds)
            except native.Unreadable as exc:
                raise FastPathFailed(str(exc)) from exc
        return pa.table([_array(kind, col) for kind, col in zip(kinds, columns)], names=list(names))

    def read_window(
        self, layout: TableLayout, scan: ScanArgs, first: int, count: int, names: Sequence[str], types: Sequence[str]
    ) -> tuple[pa.Table, int | None] | None:
        """Pages.scan's window (``scan``: without spans) as a table, and the rowid after it; None
        when the page reader cannot read it (the caller reads it through SQLite)."""
        pages = self._pages() if native is not None else None
        if pages is None or native is None:
            return None
        kinds = "".join(_KINDS[t] for t in types)
        _, positions, alias, member, bound = scan
        try:
            columns, stop = pages.scan(layout.root, positions, kinds, None, alias, member, bound, first, count)
        except native.Unreadable:
            return None
        return pa.table([_array(kind, col) for kind, col in zip(kinds, columns)], names=list(names)), stop

    def _pages(self) -> Pages | None:
        """This thread's page reader; None where the file is not one it reads."""
        assert native is not None
        if not hasattr(self._local, "pages"):
            pages: Pages | None = None
            try:
                pages = native.Pages(self._path)
            except (native.Unreadable, OSError):
                pass
            self._local.pages = pages
            if pages is not None:
                with self._lock:
                    self._readers.append(pages)
        found: Pages | None = self._local.pages
        return found

    def chunk_spans(
        self, sql: str, first: int, size: int, n: int, scan: tuple[TableLayout, int, int, ScanArgs] | None = None
    ) -> np.ndarray | None:
        """nvbridge._native's per-chunk spans of ``sql``'s (rowid, start, latest) rows: an int64
        array [5][n]; None where a start or latest is not an integer. ``scan``: the same pass for
        the page reader (layout, first and last rowid, Pages.chunk_spans' last arguments).

        Raises:
            FastPathFailed: the reader is not built, or SQLite failed.
        """
        if native is None:
            raise FastPathFailed("nvbridge._native is not built")
        pages = self._pages() if scan is not None else None
        spans: Buffer | None = None
        read = False
        if pages is not None and scan is not None:
            layout, lo, hi, args = scan
            try:
                spans, read = pages.chunk_spans(layout.root, lo, hi, size, n, *args), True
            except native.Unreadable:
                pass  # SQLite reads it, or names the damage
        if not read:
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
