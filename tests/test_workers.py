"""nvbridge's worker threads run nicer than the thread that made them (Linux), so the thread a
conversion waits on keeps the cores when they are contended."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nvbridge.workers import WORKER_NICE, worker_pool
from tests.conftest import SAMPLE_DB


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priorities are Linux's")
def test_workers_run_nicer_and_the_caller_is_unchanged() -> None:
    before = _nice()
    with worker_pool(2, "nvbridge-test") as pool:
        seen = set(pool.map(lambda _: _nice(), range(8)))
    assert seen == {min(19, before + WORKER_NICE)}
    assert _nice() == before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priorities are Linux's")
def test_reader_and_writer_threads_are_workers(tmp_path: Path) -> None:
    """A conversion's reader threads and Parquet writer threads run nicer than the caller."""
    from nvbridge.export.parquet import TableWriter
    from nvbridge.readers._db import Database

    nicer = min(19, _nice() + WORKER_NICE)
    with Database(SAMPLE_DB / "cnn_cpu.sqlite") as db:
        assert db.run(_nice).result() == nicer
    writer = TableWriter(tmp_path / "t.parquet")
    try:
        writer.write(lambda: pa.table({"nice": [_nice()]}))
    finally:
        writer.close()
    assert pq.read_table(tmp_path / "t.parquet").column("nice").to_pylist() == [nicer]
