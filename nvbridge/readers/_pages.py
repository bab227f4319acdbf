"""Which reads the page reader (``nvbridge._native.Pages``, native/pages.c) may take, the row
filters it applies itself, and its arguments, typed.

The page reader walks a table's b-tree without SQLite's virtual machine: half the CPU of a read
through SQLite. It reads rows as they are stored, so it takes only tables where that is what
SQLite would return: rowid tables without an index (SQLite might read through it, in its
order), generated or hidden columns, REAL affinity (SQLite turns stored integers into reals) or
non-NULL defaults (rows older than the column take them). Its filters are the readers' own:
rowid spans, one integer column in a set, one integer column within bounds; every other read,
and any the page reader refuses, goes through SQLite. ``NVBRIDGE_PAGE_READER=0`` turns it off:
every read then goes through SQLite.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nvbridge.readers._page_scan import ChunkScan, PageScan

# A column, the integers it may hold, and whether NULL passes.
Member = tuple[str, tuple[int, ...], bool]


def enabled() -> bool:
    """Whether the page reader may read (``NVBRIDGE_PAGE_READER``: ``0``, ``off``, ``no`` or
    ``false`` turn it off; anything else, or unset, leaves it on)."""
    return os.environ.get("NVBRIDGE_PAGE_READER", "1").strip().lower() not in ("0", "off", "no", "false")


def quote(name: str) -> str:
    """An SQL identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True, slots=True)
class RowFilter:
    """A read's rows: rowid in ``spans`` (inclusive pairs; None: any), ``member``'s column in its
    values and ``bound``'s column in [lo, hi) (None: unbounded), NULL passing each where its
    flag says."""

    spans: tuple[tuple[int, int], ...] | None = None
    member: Member | None = None
    bound: tuple[str, int | None, int | None, bool] | None = None

    def sql(self) -> str:
        """The same condition for SQLite."""
        terms = []
        if self.member is not None:
            col, values, nulls = self.member
            term = f"{quote(col)} IN ({', '.join(str(v) for v in values)})"
            terms.append(f"({term} OR {quote(col)} IS NULL)" if nulls else term)
        if self.bound is not None:
            col, lo, hi, nulls = self.bound
            parts = ([f"{quote(col)} >= {lo}"] if lo is not None else []) + (
                [f"{quote(col)} < {hi}"] if hi is not None else []
            )
            cond = " AND ".join(parts) or "1"
            terms.append(f"(({cond}) OR {quote(col)} IS NULL)" if nulls else f"({cond})")
        if self.spans is not None:
            ranges = [f"rowid BETWEEN {a} AND {b}" for a, b in self.spans if a <= b]
            terms.append("(" + (" OR ".join(ranges) or "0") + ")")
        return " AND ".join(terms) or "1"


# A chunk scan's "latest" figure: a column, counted only where a gate column holds one of the
# values when a gate is given ((column, (gate column, values) or None)); None: no figure.
Latest = tuple[str, tuple[str, tuple[int, ...]] | None] | None


def latest_sql(latest: Latest) -> str:
    """The same figure for SQLite, as an expression."""
    if latest is None:
        return "NULL"
    column, gate = latest
    if gate is None:
        return quote(column)
    return f"CASE WHEN {quote(gate[0])} IN ({', '.join(str(v) for v in gate[1])}) THEN {quote(column)} END"


_WITHOUT_ROWID = re.compile(r"\bWITHOUT\s+ROWID\b", re.IGNORECASE)
# An INTEGER PRIMARY KEY DESC is no rowid alias (SQLite's quirk): its record holds the value.
_KEY_DESC = re.compile(r"\bPRIMARY\s+KEY\b[^,]*\bDESC\b", re.IGNORECASE)


def _real_affinity(declared: str) -> bool:
    """SQLite's affinity rules (datatype3.html, 3.1), in order: only REAL changes a stored value
    on the way out (an integer stored for a real reads as a real)."""
    t = declared.upper()
    if "INT" in t or any(k in t for k in ("CHAR", "CLOB", "TEXT", "BLOB")) or not t:
        return False
    return any(k in t for k in ("REAL", "FLOA", "DOUB"))


@dataclass(frozen=True, slots=True)
class TableLayout:
    """Where a table's columns sit in its records, for the columns the page reader can read."""

    table: str
    root: int
    positions: dict[str, int]  # readable columns: name -> record position
    alias: int  # the INTEGER PRIMARY KEY's position (its value is the rowid), -1 none

    def scan(self, columns: Sequence[str], kinds: str, rows: RowFilter | None) -> PageScan | None:
        """The page reader's read of ``columns`` ("rowid": the rowid; ``kinds`` one per column,
        as Reader.read's) and ``rows``, or None when a column is not one it can read."""
        where = {**self.positions, "rowid": -1}
        member = bound = None
        rows = rows or RowFilter()
        try:
            positions = tuple(where[c] for c in columns)
            if rows.member is not None:
                col, values, nulls = rows.member
                member = (self.positions[col], tuple(int(v) for v in values), bool(nulls))
            if rows.bound is not None:
                col, lo, hi, nulls = rows.bound
                bound = (self.positions[col], _opt_int(lo), _opt_int(hi), bool(nulls))
        except KeyError:
            return None
        spans = None if rows.spans is None else tuple((int(a), int(b)) for a, b in sorted(rows.spans) if a <= b)
        if spans is not None and any(b1 >= a2 for (_, b1), (a2, _) in zip(spans, spans[1:])):
            return None  # overlapping spans: SQLite reads such a filter
        return PageScan(self.table, self.root, positions, kinds, spans, self.alias, member, bound)

    def chunk_scan(self, rows: RowFilter, latest: Latest, first: int, last: int, size: int, n: int) -> ChunkScan | None:
        """The page reader's chunk figures of the rows ``rows``'s member filter keeps, rowids
        ``first..last`` in ``n`` chunks of ``size``; None when a column is not one it can read."""
        try:
            member = None
            if rows.member is not None:
                col, values, nulls = rows.member
                member = (self.positions[col], tuple(int(v) for v in values), bool(nulls))
            at, gate, gates = -1, -1, tuple[int, ...]()
            if latest is not None:
                at = self.positions[latest[0]]
                if latest[1] is not None:
                    gate, gates = self.positions[latest[1][0]], tuple(int(v) for v in latest[1][1])
            start = self.positions["start"]
        except KeyError:
            return None
        return ChunkScan(
            self.table, self.root, int(first), int(last), size, n, start, at, gate, gates, self.alias, member
        )


def _opt_int(v: int | None) -> int | None:
    return None if v is None else int(v)


def without_rowid(sql: str) -> bool:
    """Whether a CREATE TABLE statement makes a WITHOUT ROWID table (an index b-tree)."""
    return _WITHOUT_ROWID.search(sql) is not None


def table_root(table: str, rows: Callable[[str], list[tuple[Any, ...]]]) -> int | None:
    """``table``'s root page when it is a rowid table (a b-tree the page reader can walk, if not
    read), else None (``rows`` runs a small SQL query)."""
    name = "'" + table.replace("'", "''") + "'"
    found = rows(f"SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = {name}")
    if len(found) != 1:
        return None
    root, sql = found[0]
    if not isinstance(root, int) or root < 1 or not isinstance(sql, str) or _WITHOUT_ROWID.search(sql):
        return None
    return root


def table_layout(table: str, rows: Callable[[str], list[tuple[Any, ...]]]) -> TableLayout | None:
    """``table``'s layout from the schema (``rows`` runs a small SQL query), or None when the page
    reader must not read it."""
    name = "'" + table.replace("'", "''") + "'"
    root = table_root(table, rows)
    if root is None:
        return None
    sql = str(rows(f"SELECT sql FROM sqlite_master WHERE type = 'table' AND name = {name}")[0][0])
    if _KEY_DESC.search(sql):
        return None
    indexes = rows(f"SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = {name}")
    if indexes[0][0]:
        return None
    info = rows(f"PRAGMA table_xinfo({quote(table)})")  # cid, name, type, notnull, default, pk, hidden
    # A column named like the rowid hides it from SQL: "rowid" would mean that column there.
    if any(hidden for *_, hidden in info) or any(str(r[1]).lower() in ("rowid", "oid", "_rowid_") for r in info):
        return None
    positions = {
        str(name): int(cid)
        for cid, name, declared, _, default, _, _ in info
        if default is None and not _real_affinity(str(declared or ""))
    }
    keys = [(int(cid), str(declared or "")) for cid, _, declared, _, _, pk, _ in info if pk]
    alias = keys[0][0] if len(keys) == 1 and keys[0][1].upper() == "INTEGER" else -1
    return TableLayout(table, int(root), positions, alias)
