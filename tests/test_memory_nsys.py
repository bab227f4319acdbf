"""Nsight Systems' own device-memory events (CUDA_GPU_MEMORY_USAGE_EVENTS, --cuda-memory-usage=true)
read as the memory table, held to SQL over the file (Python's sqlite3). No export recorded with
that option exists here: the file is a copy of a sample with synthetic, labelled events
(scripts/record/synthetic_memory.py), in the columns of the 2022.4 exporter."""

from __future__ import annotations

import importlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import nvbridge
from nvbridge.engine import correlate
from nvbridge.readers import read_profile
from nvbridge.readers._db import Database
from nvbridge.readers.memory_nsys import read_events
from scripts.record.synthetic_memory import generate
from tests.conftest import SAMPLE_DB

pipeline = importlib.import_module("nvbridge.conversion.pipeline")
DEVICE_EVENTS = """SELECT m.start, m.deviceId, m.address,
    CASE o.label WHEN 'Deallocation' THEN -m.bytes ELSE m.bytes END AS signed,
    (SELECT r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = m.correlationId
     AND r.globalTid >> 24 = m.globalPid >> 24) AS tid
    FROM CUDA_GPU_MEMORY_USAGE_EVENTS m JOIN ENUM_CUDA_MEM_KIND k ON k.id = m.memKind
    JOIN ENUM_CUDA_DEV_MEM_EVENT_OPER o ON o.id = m.memoryOperationType
    WHERE k.label = 'Device'"""


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("nsys_memory") / "synthetic_memory.sqlite"
    generate(SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite", out)
    return out


def _sql(path: Path, query: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def test_the_rows_are_the_device_events_signed_in_time_order(export: Path) -> None:
    memory = nvbridge.load(export).memory
    want = _sql(export, DEVICE_EVENTS + " ORDER BY m.start, m.rowid")
    assert memory.column("ts_ns").to_pylist() == [r[0] for r in want]
    assert memory.column("device").to_pylist() == [f"cuda:{r[1]}" for r in want]
    assert memory.column("address").to_pylist() == [r[2] for r in want]
    assert memory.column("bytes").to_pylist() == [r[3] for r in want]
    assert memory.column("thread_id").to_pylist() == [None if r[4] is None else r[4] & 0xFFFFFF for r in want]
    assert set(memory.column("source").to_pylist()) == {"nsys"}
    # The allocator's view: the running sum of the device's events.
    running, total = [], 0
    for r in want:
        total += r[3]
        running.append(total)
    assert memory.column("total_allocated").to_pylist() == running == memory.column("total_reserved").to_pylist()
    # Pinned host memory is not device memory; an event whose call is missing has no op.
    ((pinned,),) = _sql(export, "SELECT count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS")
    assert memory.num_rows == pinned - 1
    assert memory.column("op_id").null_count == 1


def test_each_ops_cuda_memory_equals_the_sql_sum_of_its_calls_events(export: Path) -> None:
    ops = nvbridge.load(export).ops
    per_range = _sql(
        export,
        f"""SELECT n.globalTid % 16777216, n.start, n.end, coalesce(sum(e.signed), 0) FROM NVTX_EVENTS n
        LEFT JOIN ({DEVICE_EVENTS}) e ON e.tid = n.globalTid AND e.start BETWEEN n.start AND n.end
        WHERE n.eventType = 59 GROUP BY n.rowid""",
    )
    want = {(t, s, e): v for t, s, e, v in per_range}
    keys = zip(*(ops.column(c).to_pylist() for c in ("thread_id", "start_ns", "end_ns")), strict=True)
    assert ops.column("cuda_memory_usage").to_pylist() == [want[k] for k in keys]
    assert any(want.values())
    assert set(ops.column("cpu_memory_usage").to_pylist()) == {0}  # the report has memory events: 0, not null


def test_streamed_equals_one_window(export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = correlate(read_profile(export))
    monkeypatch.setattr(pipeline, "WINDOW_ROWS", 97)
    nvbridge.convert(export, tmp_path / "out")
    streamed = nvbridge.load(tmp_path / "out")
    assert streamed.memory.to_pylist() == whole.memory.cast(streamed.memory.schema).to_pylist()
    columns = ["op_id", "self_cuda_memory_usage", "cuda_memory_usage", "cuda_memory_peak"]
    assert streamed.ops.select(columns).to_pylist() == whole.ops.select(columns).to_pylist()


def test_nvbridge_marks_win_over_nsys_events(export: Path, tmp_path: Path) -> None:
    both = tmp_path / "both.sqlite"
    both.write_bytes(export.read_bytes())
    ((tid, start),) = _sql(both, "SELECT globalTid, min(start) FROM NVTX_EVENTS WHERE eventType = 59")
    con = sqlite3.connect(both)
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (?, ?, ?, ?, 9)",
        [(start - 2, 75, "nvbridge", tid), (start - 1, 34, "mem cpu 4096 64 64 0", tid)],
    )
    con.commit()
    con.close()
    nvbridge.convert(both, tmp_path / "out")
    for report in (nvbridge.load(both), nvbridge.load(tmp_path / "out")):
        assert report.memory.column("source").to_pylist() == ["nvbridge"]


def test_each_event_takes_the_thread_of_its_call_in_its_own_process(tmp_path: Path) -> None:
    """Two processes reuse correlation ids (each counts its own), one event names no call and one
    has none: the thread is the call's with that id in the event's process, as SQL finds it."""
    path = tmp_path / "two_processes.sqlite"
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(start INT, end INT, globalTid INT, correlationId INT);
        CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS(start INT, globalPid INT, deviceId INT, address INT,
            bytes INT, memKind INT, memoryOperationType INT, correlationId INT);
        CREATE TABLE ENUM_CUDA_MEM_KIND(id INT, name TEXT, label TEXT);
        CREATE TABLE ENUM_CUDA_DEV_MEM_EVENT_OPER(id INT, name TEXT, label TEXT);
        INSERT INTO ENUM_CUDA_MEM_KIND VALUES (5, 'K', 'Device');
        INSERT INTO ENUM_CUDA_DEV_MEM_EVENT_OPER VALUES (3, 'A', 'Allocation'), (4, 'D', 'Deallocation');
        """
    )
    a, b = 11 << 24, 12 << 24
    calls = [(10 * i, 10 * i + 5, (a if i % 2 else b) | (100 + i % 3), i // 2) for i in range(40)]
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?)", calls)
    events: list[tuple[int | None, ...]] = [
        (10 * i + 1, a if i % 3 else b, i % 2, 4096 * (i // 2), 64, 5, 3 + i % 2, i // 2) for i in range(30)
    ]
    events += [(500, a, 0, 8, 64, 5, 3, 999), (501, b, 1, 16, 64, 5, 3, None)]
    con.executemany("INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS VALUES (?, ?, ?, ?, ?, ?, ?, ?)", events)
    con.commit()
    con.close()
    want = _sql(path, DEVICE_EVENTS + " ORDER BY m.start, m.rowid")
    with Database(path) as db:
        memory = read_events(db)
    assert memory.column("thread_id").to_pylist() == [None if r[4] is None else r[4] & 0xFFFFFF for r in want]
    assert memory.column("process_id").to_pylist() == [
        r[0] >> 24 for r in _sql(path, "SELECT globalPid FROM CUDA_GPU_MEMORY_USAGE_EVENTS ORDER BY start, rowid")
    ]
    assert sum(r[4] is not None for r in want) == 30  # the check sees both processes' threads
