"""Whether a report has allocator marks is asked of its first rows only
(nvbridge.readers.nsys_nvtx.NvtxParts.has_memory, PROBE_ROWS): its cost does not grow with the
table, and marks that come after those rows restart the conversion expecting them, giving the
tables a conversion that knew from the start gives (the whole report correlated at once)."""

from __future__ import annotations

import importlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import nvbridge
from nvbridge.dataset import schema
from nvbridge.engine import correlate
from nvbridge.readers import read_profile
from nvbridge.readers._db import Database
from nvbridge.readers.raw import Restart
from scripts.record.synthetic_memory import generate
from tests.conftest import SAMPLE_DB
from tests.test_memory_dataset import MARK, build

pipeline = importlib.import_module("nvbridge.conversion.pipeline")
whole_mod = importlib.import_module("nvbridge.readers.whole")
nsys_nvtx = importlib.import_module("nvbridge.readers.nsys_nvtx")
MEMORY_COLUMNS = schema.OPS.names[-6:]  # the ops' memory columns


def _streamed(path: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> list[Restart]:
    """Convert in windows of 97 NVTX rows (never read whole); the Restarts on the way."""
    monkeypatch.setattr(pipeline, "WINDOW_ROWS", 97)

    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("the report fell back to the one-window conversion")

    monkeypatch.setattr(whole_mod, "OneWindow", refuse)
    restarts: list[Restart] = []
    attempt = pipeline._attempt

    def spy(*args: Any) -> Any:
        done = attempt(*args)
        restarts.extend([done] if isinstance(done, Restart) else [])
        return done

    monkeypatch.setattr(pipeline, "_attempt", spy)
    nvbridge.convert(path, out)
    return restarts


def _first_mark_row(path: Path) -> int:
    """The rowid of the first allocator mark, by SQL."""
    db = sqlite3.connect(path)
    [(first,)] = db.execute(f"SELECT min(rowid) FROM NVTX_EVENTS WHERE eventType = {MARK} AND text LIKE 'mem %'")
    db.close()
    return int(first)


@pytest.mark.parametrize("probe_rows", [1, 1 << 16])
def test_marks_after_the_probed_rows_restart_once_and_give_the_same_tables(
    probe_rows: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = build(tmp_path / "memory.sqlite")
    late = _first_mark_row(path) > probe_rows
    assert late == (probe_rows == 1)  # the first row: the domain's creation
    monkeypatch.setattr(nsys_nvtx, "PROBE_ROWS", probe_rows)
    restarts = _streamed(path, tmp_path / "out", monkeypatch)
    assert [r.marks for r in restarts] == ([True] if late else [])
    got, whole = nvbridge.load(tmp_path / "out"), correlate(read_profile(path))
    assert got.memory.num_rows > 97
    assert got.memory.to_pylist() == whole.memory.cast(got.memory.schema).to_pylist()
    columns = ["op_id", *MEMORY_COLUMNS]
    assert got.ops.select(columns).to_pylist() == whole.ops.select(columns).to_pylist()
    assert got.ops.column("cpu_memory_usage").null_count == 0


def _probe_steps(path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """SQLite VM steps of the probe's query over ``path`` (the query as the reader sends it)."""
    sent: list[str] = []
    scalar_rows = Database.scalar_rows

    def spy(self: Database, sql: str) -> list[tuple[Any, ...]]:
        sent.extend([sql] if "substr(text" in sql else [])
        return scalar_rows(self, sql)

    with monkeypatch.context() as m:
        m.setattr(Database, "scalar_rows", spy)
        m.setattr(nsys_nvtx, "PROBE_ROWS", 20)
        nvbridge.load(path)
    [sql] = sent
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    db = sqlite3.connect(path)
    db.set_progress_handler(count, 1)
    assert db.execute(sql).fetchall() == []
    db.close()
    return steps


def test_without_marks_the_probe_reads_its_rows_and_no_more(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two reports without marks, one ten times the other's NVTX rows: the probe's query costs
    the same on both (it stopped reading the whole table)."""
    small, large = build(tmp_path / "small.sqlite"), build(tmp_path / "large.sqlite")
    for path in (small, large):
        with sqlite3.connect(path) as db:
            db.execute("DELETE FROM NVTX_EVENTS WHERE text LIKE 'mem %'")
    db = sqlite3.connect(large)
    [(n,)] = db.execute("SELECT max(rowid) FROM NVTX_EVENTS").fetchall()
    for k in range(1, 10):  # the report nine more times, later
        db.execute(
            f"""INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId)
            SELECT start + {k * 100_000}, end + {k * 100_000}, eventType, text, globalTid, domainId
            FROM NVTX_EVENTS WHERE rowid <= {n} ORDER BY rowid"""
        )
    db.commit()
    [(rows_small,)] = sqlite3.connect(small).execute("SELECT count(*) FROM NVTX_EVENTS").fetchall()
    [(rows_large,)] = db.execute("SELECT count(*) FROM NVTX_EVENTS").fetchall()
    db.close()
    assert rows_large == 10 * rows_small > 2 * 20
    assert _probe_steps(small, monkeypatch) == _probe_steps(large, monkeypatch)


def test_marks_after_the_probed_rows_still_win_over_nsys_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report with Nsight Systems' device-memory events and, after the probed rows, nvbridge's
    marks: the probe finds none and the reader takes nsys' events, then the marks restart the
    conversion, which keeps only the marks (docs/memory.md, "Which wins")."""
    both = tmp_path / "both.sqlite"
    generate(SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite", both)
    with sqlite3.connect(both) as db:
        ((tid, last),) = db.execute("SELECT globalTid, max(start) FROM NVTX_EVENTS WHERE eventType = 59").fetchall()
        db.executemany(
            "INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (?, ?, ?, ?, 9)",
            [(last + 1, 75, "nvbridge", tid), (last + 2, MARK, "mem cpu 4096 64 64 0", tid)],
        )
        [(nsys_events,)] = db.execute("SELECT count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS").fetchall()
    assert nsys_events > 0
    monkeypatch.setattr(nsys_nvtx, "PROBE_ROWS", 16)
    restarts = _streamed(both, tmp_path / "out", monkeypatch)
    assert [r.marks for r in restarts] == [True]
    memory = nvbridge.load(tmp_path / "out").memory
    assert memory.select(["ts_ns", "bytes", "source"]).to_pylist() == [
        {"ts_ns": last + 2, "bytes": 64, "source": "nvbridge"}
    ]
