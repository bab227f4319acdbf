"""SQLAlchemy's side of :class:`nvbridge.readers._db.Database`: databases given by URL, and the
slow path of a local file the fast reader refused (text that is not UTF-8, damaged values).

Loaded only when needed: a conversion of a sound local file never imports SQLAlchemy (0.12 s).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import sqlalchemy as sa

from nvbridge.readers._column import ARROW_TYPES, ROWID, Column, lenient_text
from nvbridge.readers.validate import non_integers

_SA_TYPES: dict[str, Any] = {
    "int": sa.Integer,
    "str": sa.Text,
    "float": sa.Float,
    "bytes": sa.LargeBinary,
}
DatabaseError = sa.exc.DatabaseError


def _lenient(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.text_factory = lenient_text


def url_parts(text: str) -> tuple[str, str | None]:
    """(display name, local SQLite file or None) of an SQLAlchemy URL."""
    url = sa.make_url(text)
    name = url.database or url.render_as_string(hide_password=True)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        return name, str(url.database)
    return name, None


def engine_for(url: str | None, sqlite_uri: str | None) -> sa.Engine:
    """An engine for ``url``, or for the local file behind ``sqlite_uri`` (read-only URI)."""
    if sqlite_uri is None:
        assert url is not None
        return sa.create_engine(url)
    uri = sqlite_uri
    # The connection comes from a creator, not a URL string: SQLAlchemy would decode the
    # percent-escapes, and a '#' or '?' in the path would then end it early.
    engine = sa.create_engine(
        "sqlite+pysqlite://", creator=lambda: sqlite3.connect(uri, uri=True, check_same_thread=False)
    )
    sa.event.listen(engine, "connect", _lenient)
    return engine


def table_names(engine: sa.Engine) -> list[str]:
    return list(sa.inspect(engine).get_table_names())


def column_names(engine: sa.Engine, table: str) -> list[str]:
    return [c["name"] for c in sa.inspect(engine).get_columns(table)]


def scalar_rows(engine: sa.Engine, sql: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(sql)]


def select(table: str, present: frozenset[str], columns: Sequence[Column], where: str | None) -> sa.Select[Any]:
    """A SELECT of ``columns`` from ``table``, each cast to its type; an absent optional column
    is selected as its default (the caller has refused absent required ones)."""
    t = sa.table(table, *(sa.column(c) for c in sorted(present)))
    exprs: list[Any] = []
    for col in columns:
        if col.raw == ROWID:
            raw: Any = sa.literal_column(ROWID)
        elif col.raw in present:
            raw = t.c[col.raw]
        else:
            raw = sa.literal(col.default) if col.default is not None else sa.null()
        exprs.append((raw if col.type == "bytes" else sa.cast(raw, _SA_TYPES[col.type])).label(col.field))
    query = sa.select(*exprs).select_from(t)
    return query.where(sa.text(where)) if where is not None else query


def read(engine: sa.Engine, query: sa.Select[Any], columns: Sequence[Column]) -> pa.Table:
    """Any SQLAlchemy database: rows through its cursor."""
    with engine.connect() as conn:
        result = conn.execute(query)
        names = list(result.keys())
        rows = result.fetchall()
    raw = {name: [row[i] for row in rows] for i, name in enumerate(names)}
    return pa.table([pa.array(raw[c.field], ARROW_TYPES[c.type]) for c in columns], names=[c.field for c in columns])


def check_integers(
    engine: sa.Engine, table: str, present: frozenset[str], columns: Sequence[Column], where: str | None
) -> None:
    """Refuse text, reals and BLOBs in integer columns (the cursor path's CAST would make them
    0). Runs only when the fast reader, which refuses mixed types, could not read the table."""
    ints = [c.raw for c in columns if c.type == "int" and c.raw in present]
    if not ints:
        return
    t = sa.table(table, *(sa.column(c) for c in sorted(present)))
    counts = sa.select(
        *(sa.func.sum(sa.case((sa.func.typeof(t.c[c]).in_(("integer", "null")), 0), else_=1)) for c in ints)
    ).select_from(t)
    counts = counts.where(sa.text(where)) if where is not None else counts
    with engine.connect() as conn:
        row = conn.execute(counts).one()
    non_integers({c: int(n or 0) for c, n in zip(ints, row)}, table)
