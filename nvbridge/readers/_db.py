"""Read-only access to a profiler database, and the one place database errors are translated.

SQLAlchemy reflects the tables and builds every query, so any SQLAlchemy URL works as input.
Bulk rows of a local SQLite file travel straight into Arrow with the GIL released
(:mod:`nvbridge.readers._sqlite`: nvbridge's compiled reader, or ConnectorX), 3.5x faster than
a Python ``sqlite3`` loop; other URLs fall back to SQLAlchemy's cursor.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import sqlalchemy as sa

from nvbridge.columns import one_chunk
from nvbridge.errors import DamagedDatabase, MissingTable, NotAProfileDatabase
from nvbridge.readers._files import check_file, readable_copy, sqlite_uri
from nvbridge.readers._sqlite import FastPathFailed, FastReads
from nvbridge.readers.slabs import Chunks, chunk_queries, chunk_size, chunks, from_spans
from nvbridge.readers.validate import BadRows, mark_absent, non_integers

ColumnType = Literal["int", "str", "float", "bytes"]
_SA_TYPES: dict[str, Any] = {
    "int": sa.Integer,
    "str": sa.Text,
    "float": sa.Float,
    "bytes": sa.LargeBinary,
}
_ARROW_TYPES: dict[str, pa.DataType] = {
    "int": pa.int64(),
    "str": pa.string(),
    "float": pa.float64(),
    "bytes": pa.binary(),
}
# A read's row filter: an SQLAlchemy condition, or SQL text (built once, formatted per read).
Where = sa.ColumnElement[bool] | sa.TextClause | None
# Every SQLite table's row id, selectable as a column (a slab's rows carry it for their order).
ROWID = "rowid"


@dataclass(frozen=True, slots=True)
class Column:
    """One output field read from one raw column (or SQL expression) of a profiler table.

    ``raw`` absent from the table: ``required`` columns raise MissingTable, the others
    read as ``default`` (NULL when None), so older exporters load without a crash.
    """

    field: str
    raw: str
    type: ColumnType = "int"
    required: bool = False
    default: int | str | None = None


def _lenient_text(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.text_factory = lambda raw: raw.decode("utf-8", "replace")


class _Results(Mapping[str, pa.Table]):
    """Tables that may still be reading: an item waits for its own query only."""

    def __init__(self, items: dict[str, Any]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> pa.Table:
        item = self._items[key]
        table: pa.Table = item.result() if isinstance(item, Future) else item
        return table

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


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
        self.path: Path | None = None
        if "://" in text:
            url = sa.make_url(text)
            self.name = url.database or url.render_as_string(hide_password=True)
            if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
                self.path = Path(str(url.database))
        else:
            self.path = Path(text)
            self.name = self.path.name
        self._tmp: Path | None = None
        self._fast: FastReads | None = None
        self._heads: dict[tuple[str, tuple[Column, ...]], str] = {}
        if self.path is not None:
            check_file(self.path)
            self.name = self.path.name
            opened, immutable, self._tmp = readable_copy(self.path)
            self._uri = uri = sqlite_uri(opened, immutable)
            self._fast = FastReads(uri)
            # The connection comes from a creator, not a URL string: SQLAlchemy would decode the
            # percent-escapes, and a '#' or '?' in the path would then end it early.
            self.engine = sa.create_engine(
                "sqlite+pysqlite://",
                creator=lambda: sqlite3.connect(uri, uri=True, check_same_thread=False),
            )
            # Text that is not UTF-8 (a corrupted NVTX message) reads with U+FFFD, not an error.
            sa.event.listen(self.engine, "connect", _lenient_text)
        else:
            self.engine = sa.create_engine(url)
        self._pool: ThreadPoolExecutor | None = None
        with self.translate_errors():
            self._tables: dict[str, sa.TableClause] = {}
            self._inspector = sa.inspect(self.engine)
            self.table_names: frozenset[str] = frozenset(self._inspector.get_table_names())
            self._columns: dict[str, frozenset[str]] = {}

    def close(self) -> None:
        """Stop reads still queued and close every connection (the fast reader's, one per
        thread, and SQLAlchemy's)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._fast is not None:
            self._fast.close()
        self.engine.dispose()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def translate_errors(self) -> Iterator[None]:
        """Turn driver errors into one-line nvbridge errors naming the file."""
        try:
            yield
        except BadRows as exc:
            raise DamagedDatabase(f"{self.name}: {exc}") from exc
        except (sa.exc.DatabaseError, sqlite3.DatabaseError) as exc:
            detail = str(getattr(exc, "orig", exc)).splitlines()[0]
            if "locked" in detail or "busy" in detail or "readonly" in detail or "read-only" in detail:
                raise DamagedDatabase(
                    f"{self.name} is locked / in use by another program ({detail}); wait until it "
                    "finishes, or convert a copy."
                ) from exc
            if "not a database" in detail or "file is encrypted" in detail:
                raise NotAProfileDatabase(
                    f"{self.name} is not an SQLite database; export the profile with "
                    "`nsys export --type sqlite` or `nvprof -o profile.sqlite`."
                ) from exc
            raise DamagedDatabase(
                f"{self.name} cannot be read ({detail}); the file is damaged, export it again."
            ) from exc
        except UnicodeDecodeError as exc:  # damage in the schema's own text (table or column names)
            raise DamagedDatabase(
                f"{self.name} cannot be read (its schema holds text that is not UTF-8); the file is damaged, "
                "export it again."
            ) from exc

    def has(self, table: str) -> bool:
        return table in self.table_names

    def columns(self, table: str) -> frozenset[str]:
        """Column names of ``table`` (empty when the table is absent)."""
        if table not in self.table_names:
            return frozenset()
        if table not in self._columns:
            with self.translate_errors():
                cols = self._inspector.get_columns(table)
            self._columns[table] = frozenset(c["name"] for c in cols)
        return self._columns[table]

    def table(self, name: str) -> sa.TableClause:
        """A lightweight table of the columns the database has: the queries need names, not
        full reflection (which cost 0.3 s per conversion)."""
        if name not in self._tables:
            self._tables[name] = sa.table(name, *(sa.column(c) for c in sorted(self.columns(name))))
        return self._tables[name]

    def select(
        self,
        table: str,
        columns: Sequence[Column],
        where: Where = None,
        *,
        plain: bool = False,
    ) -> sa.Select[Any]:
        """Build a SELECT of ``columns`` from ``table``.

        By default every column is cast to its type and an absent optional column is selected as
        its default. ``plain`` selects the present columns as they are, for the fast reader, which
        checks each value's type itself.

        Raises:
            MissingTable: a required column is absent.
        """
        t = self.table(table)
        present = self.columns(table)
        exprs: list[Any] = []
        for col in columns:
            if col.raw == ROWID:
                raw: Any = sa.literal_column(ROWID)
            elif col.raw in present:
                raw = t.c[col.raw]
            elif col.required:
                raise MissingTable(
                    f"{self.name}: table {table} has no column {col.raw}; this export is "
                    "incomplete, export it again without --tables filters."
                )
            elif plain:
                continue
            else:
                raw = sa.literal(col.default) if col.default is not None else sa.null()
            exprs.append((raw if plain or col.type == "bytes" else sa.cast(raw, _SA_TYPES[col.type])).label(col.field))
        query = sa.select(*exprs).select_from(t)
        return query.where(where) if where is not None else query

    def read_table(self, table: str, columns: Sequence[Column], where: Where = None) -> pa.Table:
        """Read ``columns`` of ``table`` into an Arrow table; an absent table reads as zero rows."""
        return self._prepare(table, columns, where)()

    def _prepare(self, table: str, columns: Sequence[Column], where: Where) -> Callable[[], pa.Table]:
        """Do the SQLAlchemy work of a read (reflection, building and compiling the query) now,
        in the calling thread; the returned call only fetches rows and may run on a worker."""
        if table not in self.table_names:
            empty = pa.table({c.field: pa.array([], _ARROW_TYPES[c.type]) for c in columns})
            return lambda: empty
        present = self.columns(table) | {ROWID}
        absent = [c.field for c in columns if c.raw not in present]
        if self.path is None:
            generic = self.select(table, columns, where)
            return lambda: mark_absent(self._read_generic(generic, columns), absent)
        sql = self._head(table, columns)
        if where is not None:
            text = where.text if isinstance(where, sa.TextClause) else self._compiled(where)
            sql = f"{sql} WHERE {text}"
        read = [c for c in columns if c.raw in present]
        fast = self._fast
        assert fast is not None

        def fetch() -> pa.Table:
            with self.translate_errors():
                try:
                    raw = fast.read(sql, [c.field for c in read], [c.type for c in read])
                except FastPathFailed:  # rare: the slower cursor path reads it or names the damage
                    self._check_integers(table, columns, where)
                    return mark_absent(self._read_generic(self.select(table, columns, where), columns), absent)
            arrays: list[pa.Array | pa.ChunkedArray] = []
            for col in columns:
                typ = _ARROW_TYPES[col.type]
                if col.raw not in present:
                    arrays.append(pa.repeat(pa.scalar(col.default, typ), raw.num_rows))
                elif raw.num_rows == 0:  # nothing to type the column by
                    arrays.append(pa.array([], typ))
                else:
                    # Numbers in one chunk, so every later NumPy view is zero-copy; text stays in
                    # the reader's chunks (Arrow kernels and Parquet take them as they are).
                    arr = raw.column(col.field)
                    arr = one_chunk(arr) if col.type != "str" else arr
                    arrays.append(arr if arr.type == typ else arr.cast(typ))
            return mark_absent(pa.table(arrays, names=[c.field for c in columns]), absent)

        return fetch

    def _head(self, table: str, columns: Sequence[Column]) -> str:
        """``SELECT <columns> FROM <table>`` for the fast reader, compiled once per table and
        column list (a streamed conversion makes thousands of reads of a few shapes)."""
        key = (table, tuple(columns))
        head = self._heads.get(key)
        if head is None:
            head = self._heads[key] = self._compiled(self.select(table, columns, plain=True))
        return head

    def _compiled(self, clause: sa.ClauseElement) -> str:
        return str(clause.compile(self.engine, compile_kwargs={"literal_binds": True}))

    def run(self, call: Callable[[], Any]) -> Future[Any]:
        """Run ``call`` on the reader threads (after the reads queued before it)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.READERS, thread_name_prefix="nvbridge-read")
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
            self._pool = ThreadPoolExecutor(max_workers=self.READERS, thread_name_prefix="nvbridge-read")

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
            yield _Results(results)
        finally:
            futures = [f for f in results.values() if isinstance(f, Future)]
            for f in futures:
                f.cancel()
            wait(futures)

    def scalar_rows(self, sql: str) -> list[tuple[Any, ...]]:
        """A small query (metadata, enums, chunk spans) through SQLAlchemy's connection, as
        the driver's own SQL (a text clause would scan it for bind parameters)."""
        with self.translate_errors(), self.engine.connect() as conn:
            return [tuple(r) for r in conn.exec_driver_sql(sql)]

    def chunk_spans(self, table: str, where: str, latest: str, first: int, last: int) -> Chunks | None:
        """:class:`~nvbridge.readers.slabs.Chunks` of ``table``'s rows matching ``where`` (SQL)
        with rowids ``first..last``: one pass of the compiled reader, or else one aggregate per
        chunk. None when a start is not an integer (the read that follows names the damage)."""
        size = chunk_size(first, last)
        if self._fast is not None:
            sql = f"SELECT rowid, start, {latest} FROM {table} WHERE rowid BETWEEN {first} AND {last} AND ({where})"
            try:
                spans = self._fast.chunk_spans(sql, first, size, -(-(last - first + 1) // size))
                return None if spans is None else from_spans(first, size, spans)
            except FastPathFailed:
                pass  # the aggregates below read it, or name what is wrong
        return chunks([row for q in chunk_queries(table, where, latest, first, last) for row in self.scalar_rows(q)])

    def _check_integers(self, table: str, columns: Sequence[Column], where: Where) -> None:
        """Refuse text, reals and BLOBs in integer columns (the cursor path's CAST would make them
        0). Runs only when the fast reader, which refuses mixed types, could not read the table."""
        present = self.columns(table)
        ints = [c.raw for c in columns if c.type == "int" and c.raw in present]
        if not ints:
            return
        t = self.table(table)
        counts = sa.select(
            *(sa.func.sum(sa.case((sa.func.typeof(t.c[c]).in_(("integer", "null")), 0), else_=1)) for c in ints)
        ).select_from(t)
        counts = counts.where(where) if where is not None else counts
        with self.translate_errors(), self.engine.connect() as conn:
            row = conn.execute(counts).one()
        non_integers({c: int(n or 0) for c, n in zip(ints, row)}, table)

    def _read_generic(self, query: sa.Select[Any], columns: Sequence[Column]) -> pa.Table:
        """Any SQLAlchemy database: rows through its cursor."""
        with self.translate_errors(), self.engine.connect() as conn:
            result = conn.execute(query)
            names = list(result.keys())
            rows = result.fetchall()
        raw = {name: [row[i] for row in rows] for i, name in enumerate(names)}
        return pa.table(
            [pa.array(raw[c.field], _ARROW_TYPES[c.type]) for c in columns], names=[c.field for c in columns]
        )
