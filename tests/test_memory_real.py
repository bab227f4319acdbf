"""Memory figures on every real export: as many memory rows as the export's raw tables hold
allocator events (nvbridge's `mem` marks, else Nsight Systems' CUDA_GPU_MEMORY_USAGE_EVENTS),
counted here with Python's sqlite3; where there are none, the ops' memory columns are null and
summary reports no memory, rather than a peak of 0 bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.cli import cli
from tests.conftest import ALL_FILES, raw, real_db

MEMORY_COLUMNS = ("self_cpu_memory_usage", "cpu_memory_usage", "self_cuda_memory_usage", "cuda_memory_usage")


def _raw_events(path: Path) -> int:
    """Allocator events in the export, by raw SQL: our marks win where both sources exist."""
    tables = {t for (t,) in raw(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "NVTX_EVENTS" not in tables:
        return 0
    columns = {c[1] for c in raw(path, "PRAGMA table_info(NVTX_EVENTS)")}
    marks = 0
    if {"domainId", "text"} <= columns:
        [(marks,)] = raw(
            path,
            "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34 AND text LIKE 'mem %' AND domainId IN "
            "(SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'nvbridge')",
        )
    if marks or "CUDA_GPU_MEMORY_USAGE_EVENTS" not in tables:
        return int(marks)
    [(events,)] = raw(path, "SELECT count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS")
    return int(events)


@pytest.mark.parametrize("name", ALL_FILES)
def test_memory_rows_and_columns_follow_the_raw_tables(name: str, tmp_path: Path) -> None:
    path = real_db(name)
    expected = _raw_events(path)
    out = tmp_path / "ds"
    nvbridge.convert(path, out)
    report = nvbridge.load(out)
    assert report.memory.num_rows == expected
    for column in MEMORY_COLUMNS:
        values = report.ops.column(column)
        if expected:
            assert values.null_count == 0, column
        else:
            assert values.null_count == len(values), column  # no events: unknown, not 0 bytes
    result = CliRunner().invoke(cli, ["summary", str(out), "--json"])
    if result.exit_code != 0:  # a capture summary refuses (the empty nvprof capture): one line
        assert result.output.count("\n") == 1, result.output
        return
    memory = json.loads(result.stdout).get("memory") or {}
    if not expected:
        assert memory == {}
    else:
        peak = max(m["peak_allocated_bytes"] for m in memory.values())
        assert peak == pc.max(report.memory.column("total_allocated")).as_py()
