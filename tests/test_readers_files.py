"""The readers and the file they are handed: a WAL-mode export read without writing beside it (and
its uncheckpointed rows from a copy), a locked database, a hot journal left alone, a .nsys-rep
exported through nsys (nothing written beside it), a .sqlite passed through, and the row estimate
taken from the event tables' largest rowids. tests/test_readers_validation.py checks the rows."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import nvbridge
from nvbridge.errors import DamagedDatabase, NotAProfileDatabase
from nvbridge.readers import estimate_rows, exported, read_profile
from tests.conftest import raw, require_nsys
from tests.edited_db import FIRST_RANGE, GPU_SAMPLE, RANGE, K, edited


def _listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_wal_mode_export_is_read_without_writing_beside_it(tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    path = src / "wal.sqlite"
    shutil.copyfile(GPU_SAMPLE, path)
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    con.close()
    before = _listing(src)
    profile = read_profile(path)
    nvbridge.convert(path, tmp_path / "ds")
    assert _listing(src) == before  # no -shm, no -wal, same bytes
    assert profile.ranges.num_rows == raw(GPU_SAMPLE, f"SELECT count(*) FROM NVTX_EVENTS WHERE {RANGE}")[0][0]


def test_wal_with_uncheckpointed_rows_reads_them_from_a_copy(tmp_path: Path) -> None:
    """A -wal file holding committed rows: they are part of the database, so they are read."""
    path = tmp_path / "wal.sqlite"
    shutil.copyfile(GPU_SAMPLE, path)
    code = (
        "import sqlite3, os, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA journal_mode=WAL');"
        "c.execute('PRAGMA wal_autocheckpoint=0'); c.execute(sys.argv[2]); c.commit(); os._exit(0)"
    )
    rename = f"UPDATE NVTX_EVENTS SET text = 'renamed' WHERE {FIRST_RANGE}"
    subprocess.run([sys.executable, "-c", code, str(path), rename], check=True)  # exits without a checkpoint
    assert (tmp_path / "wal.sqlite-wal").stat().st_size > 0
    before = _listing(tmp_path)
    names = read_profile(path).ranges.column("name").to_pylist()
    assert names.count("renamed") == 1
    assert _listing(tmp_path) == before


def test_locked_database_says_locked(tmp_path: Path) -> None:
    path = edited(tmp_path)
    code = (
        "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None);"
        "c.execute('BEGIN EXCLUSIVE'); c.execute('DELETE FROM StringIds'); print('held', flush=True); "
        "time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(DamagedDatabase, match="is locked / in use by another program"):
            read_profile(path)
    finally:
        holder.kill()
        holder.communicate()


def test_hot_journal_says_in_use_and_is_left_alone(tmp_path: Path) -> None:
    path = edited(tmp_path)
    journal = tmp_path / (path.name + "-journal")
    journal.write_bytes(b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7" + bytes(504))  # a journal header: a write cut short
    before = _listing(tmp_path)
    with pytest.raises(DamagedDatabase, match="is locked / in use by another program"):
        read_profile(path)
    assert _listing(tmp_path) == before


def _record_true(tmp_path: Path) -> Path:
    """A real, tiny capture: nsys profile of /bin/true, left as .qdstrm (2022.4 does not import
    it itself) in its own folder."""
    nsys = require_nsys()
    folder = tmp_path / "capture"
    folder.mkdir()
    subprocess.run(
        [
            nsys,
            "profile",
            "-t",
            "nvtx,osrt",
            "--sample=none",
            "--cpuctxsw=none",
            "-f",
            "true",
            "-o",
            str(folder / "rep"),
            "/bin/true",
        ],
        capture_output=True,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    for name in ("rep.nsys-rep", "rep.qdstrm"):
        if (folder / name).is_file():
            return folder / name
    pytest.fail(f"nsys profile wrote neither report: {sorted(p.name for p in folder.iterdir())}")


def test_exported_reads_reports_through_nsys_and_writes_nothing_beside_them(tmp_path: Path) -> None:
    report = _record_true(tmp_path)
    before = _listing(report.parent)
    with exported(report) as path:
        # the SQLite export, in a temporary folder, under the report's own name (what convert says it read)
        assert Path(path).name == report.name and Path(path).parent != report.parent
        assert int(str(raw(Path(path), "SELECT count(*) FROM StringIds")[0][0])) > 0
        read_profile(path)
    assert not Path(path).exists()  # the temporary export is gone
    assert _listing(report.parent) == before


def test_exported_passes_sqlite_through_and_names_the_install_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with exported(GPU_SAMPLE) as path:
        assert path == GPU_SAMPLE
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"not really a report")
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys here
    with pytest.raises(NotAProfileDatabase) as err, exported(report):
        pass
    assert str(err.value).startswith(
        "run.nsys-rep is an Nsight Systems report and nsys is not on PATH; install Nsight Systems ("
    )


def test_estimate_rows_is_the_event_tables_largest_rowids() -> None:
    expected = sum(
        int(str(raw(GPU_SAMPLE, f"SELECT coalesce(max(rowid), 0) FROM {t}")[0][0]))
        for t in ("NVTX_EVENTS", K + "RUNTIME", K + "KERNEL", K + "MEMCPY")
    )
    assert expected > 0 and estimate_rows(GPU_SAMPLE) == expected
    assert estimate_rows("sqlite:///x.sqlite") == 0
