"""The page reader (native/pages.c) reads what SQLite reads: every table of every real export and
sample, hand-made files with each storage case SQLite writes, every filter the readers use; and it
refuses, for SQLite to read, what it cannot be sure of. The reference is SQLite through the
stdlib's sqlite3 driver: raw SQL, none of nvbridge's readers in its loop."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from nvbridge.compiled import native
from nvbridge.readers._db import Database
from nvbridge.readers._pages import RowFilter
from nvbridge.readers._sqlite import _array
from scripts.hostile.page_map import encode_varint, varint
from tests.conftest import REAL_DB, require_native
from tests.page_reads import (
    _inputs,
    _kind,
    _layout,
    _make,
    _page_read,
    _same,
    _small,
    _sqlite_read,
    _wal_file,
)


@pytest.fixture(autouse=True)
def _native_built() -> None:
    require_native()


def test_every_table_of_every_export_reads_as_sqlite_reads_it() -> None:
    """Integer and text columns plus the rowid, whole tables and filtered by rowid spans, a set of
    values and bounds (each with and without NULLs passing), on the real exports and samples."""
    compared = 0
    for path in _inputs():
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
            tables = [
                (name, _layout(con, name), con.execute(f'PRAGMA table_info("{name}")').fetchall())
                for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            ]
        for name, layout, info in tables:
            if layout is None:
                continue
            cols = [
                (str(r[1]), _kind(str(r[2] or "")))
                for r in info
                if _kind(str(r[2] or "")) and str(r[1]) in layout.positions
            ]
            names = [c for c, _ in cols] + ["rowid"]
            kinds = "".join(k for _, k in cols) + "i"
            _same(_page_read(path, name, names, kinds), _sqlite_read(path, name, names, kinds))
            ints = [c for c, k in cols if k == "i"]
            ((lo, hi, n),) = (
                sqlite3.connect(f"file:{path}?mode=ro", uri=True)
                .execute(f'SELECT min(rowid), max(rowid), count(*) FROM "{name}"')
                .fetchall()
            )
            if not ints or not n:
                continue
            col = ints[0]
            values = tuple(
                v
                for (v,) in sqlite3.connect(f"file:{path}?mode=ro", uri=True).execute(
                    f'SELECT DISTINCT "{col}" FROM "{name}" WHERE typeof("{col}") = \'integer\' LIMIT 3'
                )
            )
            mid = (lo + hi) // 2
            for rows in (
                RowFilter(spans=((lo, mid), (mid + 2, hi))),
                RowFilter(spans=((mid, mid),), member=(col, values, True)),
                RowFilter(member=(col, values, False)),
                RowFilter(bound=(col, values[0] if values else None, None, True)),
                RowFilter(spans=((lo + 1, hi - 1),), bound=(col, None, values[-1] if values else 0, False)),
                RowFilter(spans=()),
            ):
                _same(_page_read(path, name, names, kinds, rows), _sqlite_read(path, name, names, kinds, rows.sql()))
            compared += 1
    assert compared >= 20


@pytest.mark.parametrize("page_size", [512, 4096, 65536])
def test_storage_cases_read_as_sqlite_reads_them(tmp_path: Path, page_size: int) -> None:
    """Multi-level b-trees, payloads spilling over overflow pages, integers of every stored width
    and sign, NULLs, UTF-8 text, a rowid alias, records older than a column added later, deleted
    rows and negative rowids."""
    path = tmp_path / "cases.sqlite"
    con = _make(path, page_size)
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, b TEXT, c INT)")
    rng = random.Random(page_size)
    widths = [
        0,
        1,
        -1,
        127,
        -128,
        32767,
        -32768,
        1 << 23,
        -(1 << 23),
        1 << 31,
        -(1 << 31),
        1 << 47,
        -(1 << 47),
        1 << 62,
        -(1 << 63),
    ]
    rows = []
    for i in range(-300, 4000):
        text = None if i % 7 == 0 else ("é€😀" * rng.randint(0, 3) + "x" * rng.choice([0, 5, 100, 3000, 70000]))
        rows.append((i * 3, rng.choice(widths) if i % 11 else None, text, i))
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
    con.execute("DELETE FROM t WHERE id % 5 = 1")
    con.execute("ALTER TABLE t ADD COLUMN d INTEGER")
    con.execute("INSERT INTO t (id, a, b, c, d) VALUES (100000, 1, 'late', 2, 3)")
    con.commit()
    con.close()
    names, kinds = ["id", "a", "b", "c", "d", "rowid"], "iisiii"
    _same(_page_read(path, "t", names, kinds), _sqlite_read(path, "t", names, kinds))
    for rows_ in (
        RowFilter(spans=((-900, -3), (30, 33), (3000, 9000))),
        RowFilter(member=("a", (0, 1, -1, 1 << 62), True), bound=("c", -10, 500, False)),
        RowFilter(spans=((-1, 10**12),), bound=("a", -(1 << 40), 1 << 40, True)),
    ):
        _same(_page_read(path, "t", names, kinds, rows_), _sqlite_read(path, "t", names, kinds, rows_.sql()))
    from nvbridge.readers._column import Column

    with Database(path) as db:
        for first in (-1000, -900, 0, 5, 11_000, 200_000):
            for offset in (0, 1, 7, 500, 5000):
                want = db.scalar_rows(
                    f"SELECT rowid FROM t WHERE rowid >= {first} ORDER BY rowid LIMIT 1 OFFSET {offset}"
                )
                _, stop = db.read_window("t", [Column("id", "id")], first, offset, None)  # the page reader's pass
                assert stop == (int(want[0][0]) if want else None)


def test_types_are_as_strict_as_sqlites_reader(tmp_path: Path) -> None:
    """A real, text or blob in an integer column, a blob or invalid UTF-8 in a text column: both
    readers refuse (the slow path then reads or names it); reals read as reals in 'f' columns."""
    path = tmp_path / "types.sqlite"
    con = _make(path)
    con.execute("CREATE TABLE t (a, b)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(1, "x"), (2.5, "y"), ("z", b"\xff"), (None, None)])
    con.commit()
    con.close()
    for names, kinds in ((["a"], "i"), (["a"], "f"), (["b"], "s"), (["b"], "b"), (["a", "b"], "fs")):
        for rows in (None, RowFilter(spans=((1, 1),)), RowFilter(spans=((2, 2),)), RowFilter(spans=((3, 4),))):
            _same(
                _page_read(path, "t", names, kinds, rows),
                _sqlite_read(path, "t", names, kinds, rows.sql() if rows else "1"),
            )
    # A filter column holding a real: the page reader cannot judge SQLite's comparison; refused.
    assert _page_read(path, "t", ["rowid"], "i", RowFilter(member=("a", (2,), False))) == "refused"


def test_tables_and_files_it_cannot_be_sure_of_go_to_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "schema.sqlite"
    con = _make(path)
    con.execute("CREATE TABLE indexed (a INTEGER)")
    con.execute("CREATE INDEX i ON indexed (a)")
    con.execute("CREATE TABLE norowid (a INTEGER PRIMARY KEY) WITHOUT ROWID")
    con.execute("CREATE TABLE desc_key (a INTEGER PRIMARY KEY DESC, b INTEGER)")
    con.execute("CREATE TABLE named_rowid (rowid INTEGER, b INTEGER)")
    con.execute("CREATE TABLE generated (a INTEGER, b INTEGER AS (a + 1))")
    con.execute("CREATE TABLE mixed (a REAL, b INTEGER DEFAULT 7, c INTEGER)")
    con.commit()
    for table in ("indexed", "norowid", "desc_key", "named_rowid", "generated"):
        assert _layout(con, table) is None, table
    mixed = _layout(con, "mixed")
    assert mixed is not None and set(mixed.positions) == {"c"}  # REAL affinity, a default: SQLite reads them
    assert mixed.scan(["a"], "i", None) is None and mixed.scan(["c", "rowid"], "ii", None) is not None
    con.close()

    wal = _wal_file(tmp_path / "wal.sqlite")
    utf16 = tmp_path / "utf16.sqlite"
    con = sqlite3.connect(utf16)
    con.execute("PRAGMA encoding = 'UTF-16le'")
    con.execute("CREATE TABLE t (a TEXT)")
    con.commit()
    con.close()
    assert native is not None
    for refused in (wal, utf16, tmp_path / "missing.sqlite"):
        with pytest.raises(native.Unreadable):
            native.Pages(refused)


def test_damaged_pages_never_crash(tmp_path: Path) -> None:
    """Random bytes over a file's pages: each read gives SQLite's rows or a refusal (then SQLite
    reads it or names the damage); never a crash, never rows SQLite does not have."""
    assert native is not None
    source = tmp_path / "good.sqlite"
    con = _make(source, 512)
    con.execute("CREATE TABLE t (a INTEGER, b TEXT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(i, "n" * (i % 900)) for i in range(3000)])
    con.commit()
    with_layout = _layout(con, "t")
    con.close()
    assert with_layout is not None
    good = source.read_bytes()
    rng = random.Random(7)
    refused = read = 0
    for trial in range(300):
        data = bytearray(good)
        for _ in range(rng.choice([1, 4, 40])):
            at = rng.randrange(512, len(data))  # past page 1's header: the schema stays readable
            data[at] = rng.randrange(256)
        path = tmp_path / f"bad{trial}.sqlite"
        path.write_bytes(bytes(data))
        try:
            out = native.Pages(path).scan(root=with_layout.root, positions=(0, 1, -1), kinds="isi")[0]
        except (native.Unreadable, native.Damaged):
            refused += 1
            continue
        read += 1
        got = pa.table([_array(k, c) for k, c in zip("isi", out)], names=["a", "b", "rowid"])
        try:
            want = _sqlite_read(path, "t", ["a", "b", "rowid"], "isi")
        except Exception:  # noqa: BLE001 - SQLite's own error on a damaged file
            continue
        if not isinstance(want, str):
            assert got.equals(pa.table(want, names=["a", "b", "rowid"])), trial
        path.unlink()
    assert refused and read  # both outcomes were exercised


def test_windows_read_in_one_pass_as_through_sqlite(tmp_path: Path) -> None:
    """A window (count rows from a rowid, then a member filter) and the rowid after it, from one
    pass over the pages, equal SQL's OFFSET walk and the filtered rows, both by the stdlib driver;
    on rowid gaps, negative rowids, the end of the table and a real export's NVTX_EVENTS."""
    path = tmp_path / "gaps.sqlite"
    con = _make(path, 1024)
    con.execute("CREATE TABLE t (k INTEGER, v TEXT)")
    rng = random.Random(3)
    con.executemany(
        "INSERT INTO t (rowid, k, v) VALUES (?, ?, ?)",
        [(r, rng.choice([1, 2, 3, None]), "v" * (r % 50)) for r in range(-500, 5000, 3)],
    )
    con.execute("DELETE FROM t WHERE rowid % 7 = 0")
    con.commit()
    con.close()
    from nvbridge.readers._column import Column
    from nvbridge.readers._pages import Member

    cases: list[tuple[Path, str, list[Column], Member]] = [
        (path, "t", [Column("k", "k"), Column("v", "v", "str"), Column("rowid", "rowid")], ("k", (1, 3), True))
    ]
    fsdp = REAL_DB / "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"
    if fsdp.exists():
        from nvbridge.readers.nsys_tables import NVTX

        cases.append((fsdp, "NVTX_EVENTS", NVTX, ("eventType", (59, 60, 70, 71), False)))
    windows = 0
    for source, table, columns, member in cases:
        with Database(source) as db:
            assert db._layout(table) is not None
            for first in (-10_000, -500, -497, 0, 1, 2, 1234, 4999, 5000, 16_000, 10**9):
                for count in (0, 1, 2, 100, 1000, 17_000):
                    got, stop = db.read_window(table, columns, first, count, member)
                    with sqlite3.connect(f"file:{source}?mode=ro", uri=True) as con:
                        end = con.execute(
                            f'SELECT rowid FROM "{table}" WHERE rowid >= {first} ORDER BY rowid LIMIT 1 OFFSET {count}'
                        ).fetchall()
                    want_stop = int(end[0][0]) if end else None
                    rows = RowFilter(((first, want_stop - 1 if want_stop is not None else 2**63 - 1),), member)
                    kinds = "".join("s" if c.type == "str" else "i" for c in columns)
                    want = _sqlite_read(source, table, [c.raw for c in columns], kinds, rows.sql())
                    assert stop == want_stop and isinstance(want, list), (table, first, count)
                    for column, values in zip(columns, want):
                        assert got.column(column.field).combine_chunks().equals(values), (table, first, count)
                    windows += 1
    assert windows >= 66


def test_arguments_out_of_range_are_refused_not_crashes(tmp_path: Path) -> None:
    """Record positions past SQLite's column limit, a chunk count whose buffer size overflows, a
    root page past 32 bits: ValueError, never a read out of bounds (found by review)."""
    assert native is not None
    path = tmp_path / "t.sqlite"
    root = _small(path, [(1, 2, 3.0)])
    pages = native.Pages(path)
    huge = 2**31 - 1
    calls: list[Callable[[], object]] = [
        lambda: pages.scan(root=root, positions=(huge,), kinds="i"),
        lambda: pages.scan(root=root, positions=(1,), kinds="i", member=(huge, (1,), False)),
        lambda: pages.scan(root=root, positions=(1,), kinds="i", alias=huge),
        lambda: pages.scan(root=root, positions=(-2,), kinds="i"),
        lambda: pages.chunk_spans(root=root, first=0, last=100, size=1, n=10, start=huge),
        lambda: pages.chunk_spans(root=root, first=0, last=100, size=1, n=2**61, start=0),
        lambda: pages.scan(root=2**40, positions=(1,), kinds="i"),
    ]
    for call in calls:
        with pytest.raises((ValueError, OverflowError)):
            call()
    assert _array("i", pages.scan(root=root, positions=(1,), kinds="i")[0][0]).to_pylist() == [2]


def test_damaged_overflow_chains_and_nan_read_as_sqlite_would(tmp_path: Path) -> None:
    """An overflow chain that loops or claims more pages than the file has is refused (SQLite then
    names the damage); a REAL whose bits are NaN reads as NULL, as SQLite reads it."""
    import struct

    assert native is not None
    path = tmp_path / "loop.sqlite"
    root = _small(path, [(1, b"\x01" * 20000, 1.25)])
    data = bytearray(path.read_bytes())
    # The first overflow page of the 20,000-byte blob points back at itself.
    cell = struct.unpack(">H", data[(root - 1) * 4096 + 8 : (root - 1) * 4096 + 10])[0]
    u, size = 4096, None
    start = (root - 1) * 4096 + cell
    size, _ = varint(data, start)
    x, m = u - 35, (u - 12) * 32 // 255 - 23
    k = m + (size - m) % (u - 4)
    local = size if size <= x else (k if k <= x else m)
    header = len(encode_varint(size)) + len(encode_varint(1))
    first = struct.unpack(">I", data[start + header + local : start + header + local + 4])[0]
    data[(first - 1) * 4096 : (first - 1) * 4096 + 4] = struct.pack(">I", first)
    path.write_bytes(bytes(data))
    with pytest.raises(native.Damaged, match="loops|shorter"):
        native.Pages(path).scan(root=root, positions=(1,), kinds="b", alias=0)

    nan = tmp_path / "nan.sqlite"
    root = _small(nan, [(1, 1, 3.5), (2, 2, 1.25), (3, 3, 7.0)])
    data = bytearray(nan.read_bytes())
    at = data.find(struct.pack(">d", 1.25))
    data[at : at + 8] = struct.pack(">Q", 0x7FF8000000000001)
    nan.write_bytes(bytes(data))
    _same(_page_read(nan, "t", ["f"], "f"), _sqlite_read(nan, "t", ["f"], "f"))
    assert _page_read(nan, "t", ["f"], "f")[0].to_pylist() == [3.5, None, 7.0]  # type: ignore[index]


def test_an_unbounded_bound_keeps_nulls_as_its_sql_does(tmp_path: Path) -> None:
    path = tmp_path / "b.sqlite"
    _small(path, [(1, None, 1.0), (2, 5, 2.0)])
    rows = RowFilter(bound=("a", None, None, False))
    _same(_page_read(path, "t", ["id"], "i", rows), _sqlite_read(path, "t", ["id"], "i", rows.sql()))


def test_a_refused_file_leaves_the_reader_closed_and_a_changed_file_is_refused(tmp_path: Path) -> None:
    """__init__ on a file it refuses forgets the file it had; a file written since it was opened
    is not read from stale pages."""
    assert native is not None
    good = tmp_path / "good.sqlite"
    root = _small(good, [(1, 2, 3.0)])
    pages = native.Pages(good)
    wal = _wal_file(tmp_path / "wal.sqlite")
    with pytest.raises(native.Unreadable):
        pages.__init__(wal)
    with pytest.raises(native.Unreadable, match="closed"):
        pages.scan(root=root, positions=(1,), kinds="i")
    pages = native.Pages(good)
    con = sqlite3.connect(good)
    con.execute("INSERT INTO t VALUES (2, 3, 4.0)")
    con.commit()
    con.close()
    with pytest.raises(native.Unreadable, match="changed"):
        pages.scan(root=root, positions=(1,), kinds="i")
