"""Read-only access to a profiler database (its errors translated by :mod:`nvbridge.readers._db_errors`).

A local SQLite file is read through SQLite itself: its tables and columns from the schema,
bulk rows straight into Arrow with the GIL released (:mod:`nvbridge.readers._sqlite`:
nvbridge's compiled reader, or ConnectorX), 3.5x faster than a Python ``sqlite3`` loop. Any
other SQLAlchemy URL, and a local query the fast reader refused, go through SQLAlchemy
(:mod:`nvbridge.readers._generic`, imported only then).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from nvbridge.errors import DamagedDatabase, MissingTable
from nvbridge.readers._column import ARROW_TYPES, ROWID, Column, lenient_text
from nvbridge.readers._db_errors import translated
from nvbridge.readers._files import check_file, readable_copy, sqlite_uri
from nvbridge.readers._page_scan import PageScan
from nvbridge.readers._pages import Latest, Member, RowFilter, TableLayout, latest_sql, quote, table_layout, table_root
from nvbridge.readers._results import Results
from nvbridge.readers._sqlite import FastPathFailed, FastReads, kinds_of, typed
from nvbridge.readers._tally import no_forbidden_nulls
from nvbridge.readers.slabs import Chunks, chunk_queries, chunk_size, chunks, from_spans
from nvbridge.readers.validate import mark_absent
from nvbridge.workers import worker_pool

if TYPE_CHECKING:
    import sqlalchemy as sa

# A read's row filter: SQL text (for a URL, SQLAlchemy wraps it in text()), or a RowFilter the
# page reader applies itself (its SQL for every other path).
Where = str | RowFilter | None
_LAST_ROWID = (1 << 63) - 1


class Database:
    """A read-only profiler database: reflected tables plus fast Arrow reads.

    Args:
        source: a file path or any SQLAlchemy URL (``sqlite:///x.sqlite``, ``postgresql://...``).

    Raises:
        NotAProfileDatabase: the file is missing, a directory, not SQLite, or an .nsys-rep.
        DamagedDatabase: the file is truncated or malformed.
    """

    READERS = 2  # reader threads (reads release the GIL); two keep a 2-core machine busy

    def __init__(self, source: str | os.PathLike[str]) -> None:
        text = os.fspath(source)
        # The driver errors translated: SQLite's, and SQLAlchemy's once this database used it.
        self._errors: tuple[type[Exception], ...] = (sqlite3.DatabaseError,)
        self.path: Path | None = None
        self._url: str | None = None
        if "://" in text:
            _generic = self._sqlalchemy()
            self.name, local = _generic.url_parts(text)
            if local is not None:
                self.path = Path(local)
            else:
                self._url = text
        else:
            self.path = Path(text)
            self.name = self.path.name
        self._tmp: Path | None = None
        self._fast: FastReads | None = None
        self._engine: sa.Engine | None = None
        self._uri: str | None = None
        self._heads: dict[tuple[str, tuple[Column, ...]], str] = {}
        self._layouts: dict[str, TableLayout | None] = {}
        self._roots: dict[str, int | None] = {}
        self._local = threading.local()  # each thread's own sqlite3 connection
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        if self.path is not None:
            check_file(self.path)
            self.name = self.path.name
            opened, immutable, self._tmp = readable_copy(self.path)
            self._uri = sqlite_uri(opened, immutable)
            self._fast = FastReads(self._uri, opened)
        self._pool: ThreadPoolExecutor | None = None
        self._columns: dict[str, frozenset[str]] = {}
        self._not_null: dict[str, frozenset[str]] = {}  # columns declared NOT NULL (local files)
        with self.translate_errors():
            if self._url is not None:
                _generic = self._sqlalchemy()
                names = _generic.table_names(self.engine)
            else:
                # As SQLAlchemy's inspector lists them: the tables, without SQLite's own.
                names = [
                    str(name)
                    for (name,) in self.scalar_rows(
                        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite~_%' ESCAPE '~'"
                    )
                ]
            self.table_names: frozenset[str] = frozenset(names)

    def _sqlalchemy(self) -> ModuleType:
        """SQLAlchemy's side, imported on first use. Its errors join the translated ones only
        once the import has completed in this thread: another reader thread may still be
        initializing the module, and a half-imported module has no error class yet."""
        from nvbridge.readers import _generic

        self._errors = (sqlite3.DatabaseError, _generic.DatabaseError)
        return _generic

    @property
    def engine(self) -> sa.Engine:
        """SQLAlchemy's engine, made on first use (a URL's reads; a local file's slow path)."""
        if self._engine is None:
            _generic = self._sqlalchemy()
            self._engine = _generic.engine_for(self._url, self._uri)
        return self._engine

    def _connection(self) -> sqlite3.Connection:
        """This thread's read-only connection to the local file."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            assert self._uri is not None
            conn = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
            conn.text_factory = lenient_text
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def close(self) -> None:
        """Stop reads still queued and close every connection (the fast reader's, one per
        thread, and SQLAlchemy's)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._fast is not None:
            self._fast.close()
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        if self._engine is not None:
            self._engine.dispose()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> Database:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        try:  # reads not yet checked against SQLite's count, checked before anything is published
            if kind is None and self._fast is not None:
                with self.translate_errors():
                    self._fast.tally.finish()
        finally:
            self.close()

    def translate_errors(self) -> contextlib.AbstractContextManager[None]:
        """Turn driver errors into one-line nvbridge errors naming the file
        (:func:`nvbridge.readers._db_errors.translated`)."""
        return translated(self.name, lambda: self._errors)

    def has(self, table: str) -> bool:
        return table in self.table_names

    def columns(self, table: str) -> frozenset[str]:
        """Column names of ``table`` (empty when the table is absent)."""
        if table not in self.table_names:
            return frozenset()
        if table not in self._columns:
            with self.translate_errors():
                if self._url is not None:
                    _generic = self._sqlalchemy()
                    names = _generic.column_names(self.engine, table)
                else:
                    info = self.scalar_rows(f"PRAGMA table_info({quote(table)})")
                    names = [str(row[1]) for row in info]
                    self._not_null[table] = frozenset(str(row[1]) for row in info if row[3])
            self._columns[table] = frozenset(names)
        return self._columns[table]

    def require(self, table: str, columns: Sequence[Column]) -> None:
        """Refuse a table without one of its required columns (an absent table has none).

        Raises:
            MissingTable: a required column is absent.
        """
        if table not in self.table_names:
            return
        present = self.columns(table)
        for col in columns:
            if col.required and col.raw != ROWID and col.raw not in present:
                raise MissingTable(
                    f"{self.name}: table {table} has no column {col.raw}; this export is "
                    "incomplete, export it again without --tables filters."
                )

    def read_table(self, table: str, columns: Sequence[Column], where: Where = None) -> pa.Table:
        """Read ``columns`` of ``table`` into an Arrow table; an absent table reads as zero rows."""
        return self._prepare(table, columns, where)()

    def _prepare(self, table: str, columns: Sequence[Column], where: Where) -> Callable[[], pa.Table]:
        """Build the query now, in the calling thread; the returned call only fetches rows and
        may run on a worker."""
        if table not in self.table_names:
            empty = pa.table({c.field: pa.array([], ARROW_TYPES[c.type]) for c in columns})
            return lambda: empty
        self.require(table, columns)
        present = self.columns(table)
        absent = [c.field for c in columns if c.raw not in present and c.raw != ROWID]
        sql_where = where.sql() if isinstance(where, RowFilter) else where
        if self._fast is None:
            return lambda: mark_absent(self._read_generic(table, columns, sql_where), absent)
        sql = self._head(table, columns)
        if sql_where is not None:
            sql = f"{sql} WHERE {sql_where}"
        read = [c for c in columns if c.raw in present or c.raw == ROWID]
        layout, kinds = self._layout(table), kinds_of([c.type for c in read])
        scan = None if layout is None or isinstance(where, str) else layout.scan([c.raw for c in read], kinds, where)
        # SQLite's read checked first where the page reader never reads the table (an SQL filter
        # on one it reads, as NO_ROWS, needs no walk: its reads check the pages)
        fast, walk = self._fast, None if isinstance(where, str) and layout is not None else self._walk(table)

        def fetch() -> pa.Table:
            with self.translate_errors():
                try:
                    raw = fast.read(sql, [c.field for c in read], [c.type for c in read], scan, walk)
                    no_forbidden_nulls(table, raw, self._not_null.get(table, frozenset()), read)
                except FastPathFailed:  # rare: the slower cursor path reads it or names the damage
                    _generic = self._sqlalchemy()
                    _generic.check_integers(self.engine, table, present, columns, sql_where)
                    return mark_absent(self._read_generic(table, columns, sql_where), absent)
            return mark_absent(typed(raw, columns, present), absent)

        return fetch

    def read_window(
        self, table: str, columns: Sequence[Column], first: int, count: int, member: Member | None
    ) -> tuple[pa.Table, int | None]:
        """The rows ``member`` keeps of the ``count`` rows from rowid ``first`` on, and the rowid
        of the row after those (None: there is none). One pass over the table's pages where the
        page reader takes them; else the window's end is found first, then its rows read."""
        layout = self._layout(table)
        if layout is not None and self._fast is not None:
            present = self.columns(table)
            read = [c for c in columns if c.raw in present or c.raw == ROWID]
            scan = layout.scan([c.raw for c in read], kinds_of([c.type for c in read]), RowFilter(member=member))
            with self.translate_errors():
                found = None if scan is None else self._fast.read_window(scan, first, count, [c.field for c in read])
                if found is not None:
                    no_forbidden_nulls(table, found[0], self._not_null.get(table, frozenset()), read)
                    absent = [c.field for c in columns if c.raw not in present and c.raw != ROWID]
                    return mark_absent(typed(found[0], columns, present), absent), found[1]
        end = self.scalar_rows(
            f"SELECT rowid FROM {quote(table)} WHERE rowid >= {first} ORDER BY rowid LIMIT 1 OFFSET {count}"
        )
        stop = int(end[0][0]) if end else None
        rows = RowFilter(((first, stop - 1 if stop is not None else _LAST_ROWID),), member)
        return self.read_table(table, columns, rows), stop

    def _walk(self, table: str) -> PageScan | None:
        """The page reader's walk of ``table`` without columns (FastReads.check), if it can walk it."""
        if table not in self._roots:
            self._roots[table] = table_root(table, self.scalar_rows) if self._fast and self._fast.pages else None
        root = self._roots[table]
        return None if root is None else PageScan(table, root, (), "")

    def _layout(self, table: str) -> TableLayout | None:
        """``table``'s record layout for the page reader (None: it reads through SQLite)."""
        if table not in self._layouts:
            self._layouts[table] = table_layout(table, self.scalar_rows) if self._fast and self._fast.pages else None
        return self._layouts[table]

    def _read_generic(self, table: str, columns: Sequence[Column], where: str | None) -> pa.Table:
        _generic = self._sqlalchemy()
        with self.translate_errors():
            try:
                return _generic.read(self.engine, _generic.select(table, self.columns(table), columns, where), columns)
            except (pa.ArrowTypeError, pa.ArrowInvalid) as exc:  # e.g. a number where a blob is due
                raise DamagedDatabase(
                    f"{self.name}: table {table} holds a value of another type than its column's "
                    f"({exc}); the file is damaged or was edited, export it again."
                ) from exc

    def _head(self, table: str, columns: Sequence[Column]) -> str:
        """``SELECT <columns> FROM <table>`` for the fast reader (the columns the table has, as
        they are: the reader checks each value's type), built once per table and columns."""
        key = (table, tuple(columns))
        head = self._heads.get(key)
        if head is None:
            present = self.columns(table)
            picked = [
                f"{ROWID} AS {quote(c.field)}" if c.raw == ROWID else f"{quote(c.raw)} AS {quote(c.field)}"
                for c in columns
                if c.raw in present or c.raw == ROWID
            ]
            head = self._heads[key] = f"SELECT {', '.join(picked)} FROM {quote(table)}"
        return head

    def run(self, call: Callable[[], Any]) -> Future[Any]:
        """Run ``call`` on the reader threads (after the reads queued before it)."""
        if self._pool is None:
            self._pool = worker_pool(self.READERS, "nvbridge-read")
        return self._pool.submit(call)

    def submit(
        self,
        table: str,
        columns: Sequence[Column],
        where: Where = None,
        then: Callable[[pa.Table], Any] | None = None,
    ) -> Future[Any]:
        """Start one :meth:`read_table` on the database's two reader threads and return at once.
        The query is built here; reads run in submission order, GIL released. ``then``, if
        given, runs on the table in the same thread, and the future holds what it returns."""
        fetch = self._prepare(table, columns, where)
        if self._pool is None:
            self._pool = worker_pool(self.READERS, "nvbridge-read")

        def fetch_then() -> Any:
            table = fetch()
            with self.translate_errors():  # ``then`` validates: name the file in its errors
                return then(table) if then is not None else table

        return self._pool.submit(fetch_then)

    @contextlib.contextmanager
    def reading(
        self,
        requests: dict[str, tuple[str, Sequence[Column], Where]],
    ) -> Iterator[Mapping[str, pa.Table]]:
        """Start every :meth:`read_table` at once, two at a time, and hand back a mapping whose
        items wait for their own query only.

        SQLite scans release the GIL: list the largest table first, and the caller
        can process the small ones while it is still being read. Queries are built here, in the
        calling thread; absent tables read as zero rows.
        """
        results: dict[str, Any] = {}
        try:
            for key, (table, columns, where) in requests.items():
                # Other URLs read in this thread: their drivers need not be thread-safe.
                results[key] = (
                    self.submit(table, columns, where)
                    if self.path is not None
                    else self.read_table(table, columns, where)
                )
            # pyarrow imports pandas (when installed) on its first array conversion, 0.3 s:
            # pay that now, while the scans run with the GIL released, not after them.
            pa.array([0])
            yield Results(results)
        finally:
            futures = [f for f in results.values() if isinstance(f, Future)]
            for f in futures:
                f.cancel()
            wait(futures)

    def scalar_rows(self, sql: str) -> list[tuple[Any, ...]]:
        """A small query (metadata, enums, chunk spans), as SQL text."""
        with self.translate_errors():
            if self._url is not None:
                rows: list[tuple[Any, ...]] = self._sqlalchemy().scalar_rows(self.engine, sql)
                return rows
            return [tuple(r) for r in self._connection().execute(sql)]

    def chunk_spans(self, table: str, rows: RowFilter, latest: Latest, first: int, last: int) -> Chunks | None:
        """:class:`~nvbridge.readers.slabs.Chunks` of ``table``'s rows that ``rows``' member filter
        keeps, with rowids ``first..last``: one pass of a compiled reader (the page reader's, or
        SQLite's), or else one aggregate per chunk. None when a start is not an integer (the read
        that follows names the damage)."""
        if last < first - 1:  # min(rowid) past max(rowid): keys out of order, which only damage makes
            raise DamagedDatabase(
                f"{self.name}: table {table}'s rowids are out of order; the file is damaged, export it again."
            )
        size, where, figure = chunk_size(first, last), rows.sql(), latest_sql(latest)
        if self._fast is not None:
            sql = f"SELECT rowid, start, {figure} FROM {table} WHERE rowid BETWEEN {first} AND {last} AND ({where})"
            layout, n = self._layout(table), -(-(last - first + 1) // size)
            scan = None if layout is None else layout.chunk_scan(rows, latest, first, last, size, n)
            try:
                with self.translate_errors():
                    spans = self._fast.chunk_spans(sql, first, size, n, scan, self._walk(table))
                return None if spans is None else from_spans(first, size, spans)
            except FastPathFailed:
                pass  # the aggregates below read it, or name what is wrong
        return chunks([row for q in chunk_queries(table, where, figure, first, last) for row in self.scalar_rows(q)])
