"""Both sides of the page reader's tests (tests/test_pages.py): a table read through SQLite and
through the page reader, compared column by column; hand-made files with each storage case, WAL
files, and SQLite's record encoding written here."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from nvbridge.compiled import native
from nvbridge.readers._pages import RowFilter, table_layout
from nvbridge.readers._sqlite import _array
from tests.conftest import REAL_DB, SAMPLE_DB


def _layout(con: sqlite3.Connection, table: str):  # type: ignore[no-untyped-def]
    return table_layout(table, lambda sql: [tuple(r) for r in con.execute(sql)])


def _kind(declared: str) -> str:
    t = declared.upper()
    return "i" if "INT" in t else "s" if any(k in t for k in ("CHAR", "CLOB", "TEXT")) else ""


_TYPES = {"i": pa.int64(), "f": pa.float64(), "s": pa.string(), "b": pa.binary()}


def _sqlite_read(path: Path, table: str, names: list[str], kinds: str, where: str = "1") -> object:
    """The rows as the stdlib's sqlite3 driver reads them, as Arrow arrays; "refused" where a value
    is not of its column's kind (an integer column holding text, a real or a blob; text that is not
    UTF-8), which nvbridge's readers refuse rather than convert."""
    cols = ", ".join(n if n == "rowid" else f'"{n}"' for n in names)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.text_factory = bytes  # text as its bytes: UTF-8 checked below, as Arrow requires
    try:
        rows = con.execute(f'SELECT {cols} FROM "{table}" WHERE {where}').fetchall()
        kinds_of = con.execute(
            f'SELECT {", ".join(f"typeof({c})" for c in cols.split(", "))} FROM "{table}" WHERE {where}'
        ).fetchall()
    finally:
        con.close()
    out = []
    for j, kind in enumerate(kinds):
        typ = _TYPES[kind]
        values = []
        for row, types in zip(rows, kinds_of):
            v, t = row[j], bytes(types[j]).decode()
            allowed = {"i": ("integer",), "f": ("integer", "real"), "s": ("text",), "b": ("blob",)}[kind]
            if t != "null" and t not in allowed:
                return "refused"
            if t == "text":
                try:
                    v = bytes(v).decode("utf-8")
                except UnicodeDecodeError:
                    return "refused"
            values.append(float(v) if kind == "f" and v is not None else v)
        out.append(pa.array(values, typ))
    return out


def _page_read(path: Path, table: str, names: list[str], kinds: str, rows: RowFilter | None = None) -> object:
    assert native is not None
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        layout = _layout(con, table)
    assert layout is not None, f"{table} is not one the page reader takes"
    scan = layout.scan(names, kinds, rows)
    assert scan is not None
    try:
        out, _, _ = scan.run(native.Pages(path))
    except native.Unreadable:
        return "refused"
    return [_array(k, c) for k, c in zip(kinds, out)]


def _same(got: object, want: object) -> None:
    if isinstance(want, str) or isinstance(got, str):
        assert got == want
        return
    assert isinstance(got, list) and isinstance(want, list)
    for a, b in zip(got, want):
        assert a.equals(b), (a[:5], b[:5])


def _inputs() -> Iterator[Path]:
    yield from sorted(REAL_DB.glob("nsys-*.sqlite"))
    yield from sorted(SAMPLE_DB.glob("*.sqlite"))


def _make(path: Path, page_size: int = 4096) -> sqlite3.Connection:
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA page_size = {page_size}")
    return con


def _wal_file(path: Path) -> Path:
    """A database in WAL mode (its pages may live in the -wal file: the page reader refuses it)."""
    con = _make(path)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("CREATE TABLE t (a INTEGER)")
    con.commit()
    con.close()
    return path


def _small(
    path: Path, rows: list[tuple[object, ...]], schema: str = "CREATE TABLE t (id INTEGER PRIMARY KEY, a, f)"
) -> int:
    con = _make(path)
    con.execute(schema)
    con.executemany(f"INSERT INTO t VALUES ({', '.join('?' * len(rows[0]))})", rows)
    con.commit()
    root = int(con.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0])
    con.close()
    return root
