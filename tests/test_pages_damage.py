"""The page reader on damaged pages (issue 24, items 2 and 7): it accepts only what SQLite's own
checks accept, refuses the rest naming table and page (never reading it through SQLite instead,
which may read a damaged page without an error), cross-checks what it read against SQLite's
count, can be turned off, and takes only typed arguments.

Mutants are made here from the project's own recordings (sample_db/) by setting bytes found with
scripts/hostile/page_map.py. The reference that a mutant is damaged is SQLite itself, through the
stdlib's sqlite3: PRAGMA integrity_check, or a plain read raising."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nvbridge.compiled import native
from nvbridge.errors import DamagedDatabase
from nvbridge.readers import read_profile
from nvbridge.readers._column import Column
from nvbridge.readers._db import Database
from nvbridge.readers._page_scan import PageScan, Tally
from scripts.hostile.page_map import PageMap
from tests.conftest import SAMPLE_DB, require_native

SAMPLE = SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite"


@pytest.fixture(autouse=True)
def _native_built() -> None:
    require_native()


def _mutant(tmp_path: Path, edits: Callable[[PageMap], list[tuple[int, bytes]]], name: str = "m.sqlite") -> Path:
    out = tmp_path / name
    shutil.copyfile(SAMPLE, out)
    data = bytearray(out.read_bytes())
    for at, value in edits(PageMap(SAMPLE)):
        data[at : at + len(value)] = value
    out.write_bytes(bytes(data))
    return out


def _setting(at: int, value: bytes) -> Callable[[PageMap], list[tuple[int, bytes]]]:
    return lambda m: [(at, value)]


def _sqlite_refuses(path: Path, table: str) -> bool:
    """SQLite's own verdict: integrity_check is not ok, or a plain read of ``table`` raises."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if con.execute("PRAGMA integrity_check").fetchall() != [("ok",)]:
            return True
        con.execute(f'SELECT * FROM "{table}"').fetchall()
        return False
    except sqlite3.DatabaseError:
        return True
    finally:
        con.close()


def _refusal(path: Path) -> str:
    with pytest.raises(DamagedDatabase) as caught:
        read_profile(path)
    message = str(caught.value)
    assert "\n" not in message and "export it again" in message
    return message


def test_an_empty_leaf_below_the_root_is_refused(tmp_path: Path) -> None:
    """A non-root leaf whose cell count is 0: SQLite's cursor calls it corrupt (getAndInitPage);
    the page reader used to read the tree without its rows (7,276 kernels of 7,328)."""
    for table in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL"):
        leaf = PageMap(SAMPLE).trees[table].leaves()[1]
        path = _mutant(tmp_path, _setting(leaf.head + 3, b"\0\0"), f"{table}.sqlite")
        assert _sqlite_refuses(path, table)
        message = _refusal(path)
        assert f"table {table}, page {leaf.pgno}: an empty page below the root" in message, message


@pytest.mark.parametrize("change", [2, -2, "header"])
def test_record_headers_must_fill_their_record(tmp_path: Path, change: int | str) -> None:
    """A text column's serial type one byte longer or shorter than its value, or a header size one
    past the header: the record's sizes no longer add up to its payload. SQLite's OP_Column
    checks that (integrity_check reads each row's last column); the page reader used to read
    the names truncated and the values after them shifted."""
    cell = next(c for c in PageMap(SAMPLE).trees["StringIds"].cells if c.overflow_at is None and len(c.types_at) == 2)

    def edits(m: PageMap) -> list[tuple[int, bytes]]:
        if change == "header":
            return [(cell.record_at, bytes([m.data[cell.record_at] + 1]))]
        text = cell.types_at[1]
        return [(text, bytes([m.data[text] + int(change)]))]

    path = _mutant(tmp_path, edits)
    assert _sqlite_refuses(path, "StringIds")
    assert f"table StringIds, page {cell.page}: " in _refusal(path)


def test_a_damaged_cell_pointer_in_the_first_nvtx_leaf_is_refused_every_time(tmp_path: Path) -> None:
    """One cell pointer of the leftmost NVTX leaf moved a byte into its cell: the page reader
    used to fall back to SQLite, which read 0 to 1,031 of 1,054 ops across runs, exit 0."""
    leaf = PageMap(SAMPLE).trees["NVTX_EVENTS"].leaves()[0]

    def edits(m: PageMap) -> list[tuple[int, bytes]]:
        at = leaf.pointers_at + 2 * 3
        return [(at, (int.from_bytes(m.data[at : at + 2], "big") + 1).to_bytes(2, "big"))]

    path = _mutant(tmp_path, edits)
    assert _sqlite_refuses(path, "NVTX_EVENTS")
    answers = {_refusal(path) for _ in range(3)}
    assert len(answers) == 1, answers
    assert f"table NVTX_EVENTS, page {leaf.pgno}: " in answers.pop()


def test_pages_used_twice_or_by_nothing_are_refused(tmp_path: Path) -> None:
    """A kernel-table child pointer moved to an NVTX leaf (a page used by two b-trees), and an
    NVTX interior page that lost its last cell, the bytes it held counted as fragments (the
    subtree below it reached by nothing, its rows gone): only integrity_check sees either; so
    does the page reader's survey of the file."""
    m = PageMap(SAMPLE)
    kernel, nvtx = m.trees["CUPTI_ACTIVITY_KIND_KERNEL"], m.trees["NVTX_EVENTS"]
    top = kernel.interior()[0]
    moved = _mutant(tmp_path, lambda m: [(top.child_at[0], nvtx.leaves()[1].pgno.to_bytes(4, "big"))], "moved.sqlite")
    assert _sqlite_refuses(moved, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert "used twice" in _refusal(moved)

    root = nvtx.interior()[0]
    assert root.ncells >= 2

    def drop_last_cell(m: PageMap) -> list[tuple[int, bytes]]:
        at = m.offset(root.pgno) + int.from_bytes(m.data[root.pointers_at + 2 * (root.ncells - 1) :][:2], "big")
        size = 4 + len(_varint_bytes(m.data, at + 4))
        frag = m.data[root.head + 7] + size
        return [(root.head + 3, (root.ncells - 1).to_bytes(2, "big")), (root.head + 7, bytes([frag]))]

    orphan = _mutant(tmp_path, drop_last_cell, "orphan.sqlite")
    assert _sqlite_refuses(orphan, "NVTX_EVENTS")
    assert "no b-tree refers to" in _refusal(orphan)


def _varint_bytes(data: bytes, at: int) -> bytes:
    end = at
    while data[end] & 0x80 and end - at < 8:
        end += 1
    return data[at : end + 1]


def test_the_cross_check_catches_a_dropped_leaf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page reader that skipped a leaf (here made to, by a span that leaves one out, while it
    reports the whole table as read) gives fewer rows than SQLite's count: refused. Unpatched,
    the same read is checked and passes."""
    table, columns = "CUPTI_ACTIVITY_KIND_KERNEL", [Column("start", "start"), Column("rowid", "rowid")]
    tree = PageMap(SAMPLE).trees[table]
    rowids = [c.rowid for c in tree.cells if c.page == tree.leaves()[0].pgno]
    with Database(SAMPLE) as db:
        whole = db.read_table(table, columns)
        assert db._fast is not None
        tally = db._fast.tally
    assert table in tally._checked  # the unpatched read was checked, and passed
    run = PageScan.run

    def skipping(self: PageScan, pages: Any) -> Any:
        if self.table != table or self.spans is not None:
            return run(self, pages)
        spans = ((-(1 << 62), min(rowids) - 1), (max(rowids) + 1, 1 << 62))
        columns, stop, tally = run(PageScan(self.table, self.root, self.positions, self.kinds, spans), pages)
        return columns, stop, Tally((None, None), tally.passed, tally.lo, tally.hi)

    monkeypatch.setattr(PageScan, "run", skipping)
    counts = f"SQLite counts {whole.num_rows:,} "
    with pytest.raises(DamagedDatabase, match=f"table {table}: the page reader read .* {counts}"):
        with Database(SAMPLE) as db:
            db.read_table(table, columns)


def test_the_environment_switch_turns_the_page_reader_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NVBRIDGE_PAGE_READER=0: no page is read by it (every read goes through SQLite) and the
    dataset is the same; on a damaged file, SQLite's own error is the one reported."""
    on = read_profile(SAMPLE)
    monkeypatch.setenv("NVBRIDGE_PAGE_READER", "0")
    assert native is not None
    monkeypatch.setattr(native, "Pages", None)  # any use of the page reader would fail
    with Database(SAMPLE) as db:
        assert db._fast is not None and not db._fast.pages
    off = read_profile(SAMPLE)
    for name in ("ranges", "api_calls", "gpu_ops"):
        assert getattr(off, name).equals(getattr(on, name)), name
    leaf = PageMap(SAMPLE).trees["NVTX_EVENTS"].leaves()[1]
    damaged = _mutant(tmp_path, lambda m: [(leaf.head + 3, b"\0\0")])
    message = _refusal(damaged)
    assert "malformed" in message and "page reader" not in message and "empty page" not in message


def test_typed_scan_arguments_refuse_a_wrong_shape() -> None:
    """The scan's arguments are keyword-only and checked for their exact shape on both sides: a
    positional call, a list for a tuple, a short filter tuple, a bool for a position."""
    assert native is not None
    with sqlite3.connect(f"file:{SAMPLE}?mode=ro", uri=True) as con:
        root = int(con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'StringIds'").fetchone()[0])
    pages = native.Pages(SAMPLE)
    good = PageScan("StringIds", root, (0, -1), "si")
    assert len(good.run(pages)[0]) == 2
    wrong: list[Callable[[], object]] = [
        lambda: pages.scan(root, (0,), "i"),
        lambda: pages.scan(root=root, positions=[0], kinds="i"),
        lambda: pages.scan(root=root, positions=(0,), kinds="i", member=(0, (1,))),
        lambda: pages.scan(root=root, positions=(0,), kinds="i", member=(0, [1], False)),
        lambda: pages.scan(root=root, positions=(0,), kinds="i", bound=(True, 1, 2, False)),
        lambda: pages.scan(root=root, positions=(0,), kinds="i", spans=((1, 2, 3),)),
        lambda: pages.chunk_spans(root=root, first=0, last=9, size=4, n=3, start=0, gates=[1]),
        lambda: PageScan("StringIds", root, [0], "i"),  # type: ignore[arg-type]
        lambda: PageScan("StringIds", root, (0,), "i", member=(0, (1,), 1)),  # type: ignore[arg-type]
        lambda: PageScan("StringIds", root, (0,), "i", spans=((1, 2),), count=5),
        lambda: PageScan("StringIds", root, (0, 1), "i"),
    ]
    for call in wrong:
        with pytest.raises(TypeError):
            call()


def test_a_null_where_the_schema_says_not_null_is_refused(tmp_path: Path) -> None:
    """A kernel's gridY stored as the constant 1 (serial type 9) turned NULL (type 0): the record's
    sizes still add up, so no page check sees it; SQLite reads NULL, integrity_check reports it
    ("NULL value in"), and the readers used to write a GPU op without its grid."""
    with sqlite3.connect(f"file:{SAMPLE}?mode=ro", uri=True) as con:
        info = con.execute('PRAGMA table_info("CUPTI_ACTIVITY_KIND_KERNEL")').fetchall()
    column = next(int(r[0]) for r in info if r[1] == "gridY" and r[3])
    m = PageMap(SAMPLE)
    cell = next(c for c in m.trees["CUPTI_ACTIVITY_KIND_KERNEL"].cells if m.data[c.types_at[column]] == 9)
    path = _mutant(tmp_path, _setting(cell.types_at[column], b"\0"))
    assert _sqlite_refuses(path, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert "column gridY holds NULL in 1 rows; its schema says NOT NULL" in _refusal(path)


def test_a_table_sqlite_reads_is_walked_first(tmp_path: Path) -> None:
    """A kernel table with an index (so SQLite, not the page reader, reads it) whose second leaf
    lost its last cell: SQLite reads one row fewer without an error (integrity_check sees the
    bytes no cell or free block accounts for). The page reader's walk of the table, made once
    before SQLite reads it, refuses it."""
    indexed = tmp_path / "indexed.sqlite"
    shutil.copyfile(SAMPLE, indexed)
    con = sqlite3.connect(indexed)
    con.execute("CREATE INDEX kernel_start ON CUPTI_ACTIVITY_KIND_KERNEL (start)")
    con.commit()
    con.close()
    leaf = PageMap(indexed).trees["CUPTI_ACTIVITY_KIND_KERNEL"].leaves()[1]
    data = bytearray(indexed.read_bytes())
    data[leaf.head + 3 : leaf.head + 5] = (leaf.ncells - 1).to_bytes(2, "big")
    path = tmp_path / "m.sqlite"
    path.write_bytes(bytes(data))
    assert _sqlite_refuses(path, "CUPTI_ACTIVITY_KIND_KERNEL")
    cells = len(PageMap(indexed).trees["CUPTI_ACTIVITY_KIND_KERNEL"].cells)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        assert len(con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()) == cells - 1
    assert f"table CUPTI_ACTIVITY_KIND_KERNEL, page {leaf.pgno}: free bytes its header does not count" in _refusal(path)


def test_a_value_its_index_does_not_hold_is_refused(tmp_path: Path) -> None:
    """A string of an indexed StringIds (as nvprof's tables all are) changed by a letter: a sound
    page and a plausible row, which SQLite reads; only its index disagrees (integrity_check:
    "row missing from index"). Such a table is checked by SQLite's integrity_check before it is
    read; the readers used to name ops after the changed string."""
    indexed = tmp_path / "indexed.sqlite"
    shutil.copyfile(SAMPLE, indexed)
    con = sqlite3.connect(indexed)
    con.execute("CREATE UNIQUE INDEX string_value ON StringIds (value)")
    con.commit()
    con.close()
    m = PageMap(indexed)
    cell = next(c for c in m.trees["StringIds"].cells if c.overflow_at is None and c.payload_size > 20)
    at = cell.at + cell.payload_size  # inside the string, the cell's last bytes
    data = bytearray(m.data)
    data[at] = ord("A") if data[at] != ord("A") else ord("B")
    path = tmp_path / "m.sqlite"
    path.write_bytes(bytes(data))
    assert _sqlite_refuses(path, "StringIds")
    assert "table StringIds: SQLite's integrity_check finds row" in _refusal(path)
