"""scripts/record/shift_clock.py (issue 28: another host's clock, simulated): every time column of
the report, as the file's own tables name them, moves by the offset, row for row; nothing else
changes; the copy says what was done. Checked on every Nsight Systems export and a gloo sample,
through sqlite3 on both files, with a broader reading of "a time column" than the script's."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from scripts.record import shift_clock
from tests.conftest import NSYS_FILES, SAMPLE_DB, real_db

OFFSET = 987_654_321_123
# Any column whose name says start, end, stop, time, stamp or a CUPTI queue time is a candidate;
# these are not times of the capture's clock: thread ids, line numbers, an enum, the wall-clock
# start (its own mode) and its text. Ids (``...Id``) never are.
CANDIDATE = re.compile(r"start|end|stop|time|stamp|queued|submitted|completed", re.IGNORECASE)
NOT_TIMES = {"endGlobalTid", "endLineNo", "funcEndLineNo", "timestampType", "utcTime", "localTime", "utcEpochNs"}
FILES = [*NSYS_FILES, "sample:ranks_gloo2_cpu.rank1.sqlite", "sample:ranks_gloo2_onefile_cpu.sqlite"]


def _path(name: str) -> Path:
    return SAMPLE_DB / name.removeprefix("sample:") if name.startswith("sample:") else real_db(name)


def _open(path: Path) -> sqlite3.Connection:
    """Read-only, text as bytes: real exports hold strings that are not UTF-8."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.text_factory = bytes
    return con


def _columns(con: sqlite3.Connection) -> dict[str, list[str]]:
    tables = [t.decode() for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {t: [r[1].decode() for r in con.execute(f"PRAGMA table_info('{t}')")] for t in tables}


def _is_time(column: str) -> bool:
    return bool(CANDIDATE.search(column)) and column not in NOT_TIMES and not column.endswith(("Id", "id"))


def _rows(con: sqlite3.Connection, table: str) -> list[tuple[object, ...]]:
    return con.execute(f'SELECT * FROM "{table}" ORDER BY rowid').fetchall()


@pytest.mark.parametrize("name", FILES)
def test_every_time_column_moves_by_the_offset_and_nothing_else(name: str, tmp_path: Path) -> None:
    source = _path(name)
    dest = tmp_path / "shifted.sqlite"
    before = source.read_bytes()
    label = shift_clock.shift(source, dest, OFFSET)
    assert source.read_bytes() == before  # the input is never modified
    a, b = _open(source), _open(dest)
    shifted = {tuple(k.removeprefix("column.").split(".", 1)) for k in label if k.startswith("column.")}
    seen_times = 0
    for table, columns in _columns(a).items():
        old, new = _rows(a, table), _rows(b, table)
        assert len(old) == len(new), table
        for i, column in enumerate(columns):
            was, now = [r[i] for r in old], [r[i] for r in new]
            if _is_time(column) and all(v is None or isinstance(v, int) for v in was):
                seen_times += bool(was)
                assert (table, column) in shifted, f"{table}.{column} is a time and was not shifted"
                assert now == [v + OFFSET if isinstance(v, int) else v for v in was], f"{table}.{column}"
            else:
                assert (table, column) not in shifted and now == was, f"{table}.{column} changed"
    assert seen_times and len(shifted) >= seen_times
    # the label: in the copy, naming the offset, the mode and the source
    got = {k.decode(): v.decode() for k, v in b.execute("SELECT name, value FROM NVBRIDGE_SHIFTED")}
    assert got == label and got["offset_ns"] == str(OFFSET) and got["clock"] == "events"
    assert got["source"] == source.name and got["shifted"] == "yes"


def test_wallclock_mode_moves_the_session_start_only(tmp_path: Path) -> None:
    source = SAMPLE_DB / "ranks_gloo2_cpu.rank1.sqlite"
    dest = tmp_path / "wall.sqlite"
    shift_clock.shift(source, dest, -OFFSET, "wallclock")
    a, b = _open(source), _open(dest)
    for table in _columns(a):
        if table == "TARGET_INFO_SESSION_START_TIME":
            (was,) = a.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
            (now,) = b.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
            assert now == was - OFFSET
        else:
            assert _rows(a, table) == _rows(b, table), table


def test_a_dataset_of_the_shifted_report_is_the_same_run_later(tmp_path: Path) -> None:
    """nvbridge reads the copy as the same ops, each OFFSET later."""
    import nvbridge

    source = SAMPLE_DB / "ranks_gloo2_cpu.rank1.sqlite"
    dest = tmp_path / "shifted.sqlite"
    shift_clock.shift(source, dest, OFFSET)
    nvbridge.convert(source, tmp_path / "a")
    nvbridge.convert(dest, tmp_path / "b")
    a, b = nvbridge.load(tmp_path / "a").ops, nvbridge.load(tmp_path / "b").ops
    assert a.column("name").to_pylist() == b.column("name").to_pylist()
    assert [s + OFFSET for s in a.column("start_ns").to_pylist()] == b.column("start_ns").to_pylist()


def test_the_script_refuses_to_overwrite(tmp_path: Path) -> None:
    dest = tmp_path / "x.sqlite"
    dest.write_text("keep")
    with pytest.raises(SystemExit, match="exists"):
        shift_clock.main([str(SAMPLE_DB / "ranks_gloo2_cpu.rank1.sqlite"), str(dest), "--offset-ns", "5"])
    assert dest.read_text() == "keep"
