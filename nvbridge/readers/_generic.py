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

from nvbridge.errors import NotAProfileDatabase
from nvbridge.readers._column import ARROW_TYPES, ROWID, Column, lenient_text
from nvbridge.readers.validate import FIX, BadRows, blobs_in_text, non_integers

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
    """(display name, local SQLite file or None) of an SQLAlchemy URL.

    Raises:
        NotAProfileDatabase: SQLAlchemy cannot parse ``text`` as a URL.
    """
    try:
        url = sa.make_url(text)
    except sa.exc.ArgumentError:
        raise NotAProfileDatabase(
            f"{text.split('://')[0]}://... is not a database URL SQLAlchemy can read; pass a file path, or a URL "
            "such as sqlite:///report.sqlite."
        ) from None
    name = url.database or url.render_as_string(hide_password=True)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        return name, str(url.database)
    return name, None


def engine_for(url: str | None, sqlite_uri: str | None) -> sa.Engine:
    """An engine for ``url``, or for the local file behind ``sqlite_uri`` (read-only URI)."""
    if sqlite_uri is None:
        assert url is not None
        return _url_engine(url)
    uri = sqlite_uri
    # The connection comes from a creator, not a URL string: SQLAlchemy would decode the
    # percent-escapes, and a '#' or '?' in the path would then end it early.
    engine = sa.create_engine(
        "sqlite+pysqlite://", creator=lambda: sqlite3.connect(uri, uri=True, check_same_thread=False)
    )
    sa.event.listen(engine, "connect", _lenient)
    return engine


def _url_engine(url: str) -> sa.Engine:
    """An engine for a URL; a scheme SQLAlchemy does not know, or whose driver is not installed,
    is one line naming the fix."""
    parsed = sa.make_url(url)
    shown = parsed.render_as_string(hide_password=True)
    try:
        return sa.create_engine(parsed)
    except sa.exc.NoSuchModuleError:
        raise NotAProfileDatabase(
            f"{shown}: SQLAlchemy has no dialect for {parsed.drivername}://; pass a file path, an sqlite:/// URL, or "
            "install the SQLAlchemy dialect package for that database."
        ) from None
    except ImportError as exc:  # the dialect is known, its DBAPI driver is not installed
        raise NotAProfileDatabase(
            f"{shown}: the Python driver for {parsed.get_backend_name()} is not installed (module {exc.name or exc} "
            "is missing); install it, or convert the report's SQLite export."
        ) from None


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
    return pa.table([_array(query, c, raw[c.field]) for c in columns], names=[c.field for c in columns])


def _array(query: sa.Select[Any], column: Column, values: list[Any]) -> pa.Array:
    """One column's values; a value of another kind (an integer where a BLOB belongs, which no
    CAST turns into bytes) is damage, named."""
    try:
        return pa.array(values, ARROW_TYPES[column.type])
    except (pa.ArrowTypeError, pa.ArrowInvalid, OverflowError):
        froms = query.get_final_froms()
        table = getattr(froms[0], "name", "?") if froms else "?"
        kind = {"bytes": "a BLOB", "str": "text", "float": "a number", "int": "an integer"}[column.type]
        raise BadRows(f"{table}.{column.raw} holds values that are not {kind}; {FIX}.") from None


def check_integers(
    engine: sa.Engine, table: str, present: frozenset[str], columns: Sequence[Column], where: str | None
) -> None:
    """Refuse text, reals and BLOBs in integer columns (the cursor path's CAST would make them
    0), and BLOBs in text columns (names: its CAST would make text of any bytes). Runs only when
    the fast reader, which refuses mixed types, could not read the table."""
    ints = [c.raw for c in columns if c.type == "int" and c.raw in present]
    texts = [c.raw for c in columns if c.type == "str" and c.raw in present]
    if not ints and not texts:
        return
    t = sa.table(table, *(sa.column(c) for c in sorted(present)))
    counts = sa.select(
        *(sa.func.sum(sa.case((sa.func.typeof(t.c[c]).in_(("integer", "null")), 0), else_=1)) for c in ints),
        *(sa.func.sum(sa.case((sa.func.typeof(t.c[c]) == "blob", 1), else_=0)) for c in texts),
    ).select_from(t)
    counts = counts.where(sa.text(where)) if where is not None else counts
    with engine.connect() as conn:
        row = conn.execute(counts).one()
    non_integers({c: int(n or 0) for c, n in zip(ints, row)}, table)
    blobs_in_text({c: int(n or 0) for c, n in zip(texts, row[len(ints) :])}, table)
