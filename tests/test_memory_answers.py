"""summary's memory answers (torch's memory columns, sort keys, the per-device peak header and
``summary --json``'s ``memory`` object), checked against arithmetic on the memory rows themselves."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

import nvbridge
from nvbridge.analysis import summarize
from nvbridge.analysis.as_json import summary_json
from nvbridge.analysis.memory_columns import MEMORY_COLUMNS
from nvbridge.dataset.report import DatasetTables
from nvbridge.errors import OptionError
from tests.memory_tables import made_up_events, with_memory

SAMPLE = Path(__file__).resolve().parent.parent / "sample_db" / "cnn_cpu.sqlite"


@pytest.fixture(scope="module")
def report() -> DatasetTables:
    return with_memory(SAMPLE)


def test_rows_carry_torchs_memory_columns_summed_per_name(report: DatasetTables) -> None:
    names = dict(zip(report.ops.column("op_id").to_pylist(), report.ops.column("op_name").to_pylist()))
    expected: dict[str, int] = defaultdict(int)
    for e in report.table("memory").to_pylist():
        expected[names[e["op_id"]]] += e["bytes"]
    rows = summarize(report).averages.rows.to_pylist()
    got = {r["name"]: r["self_cpu_memory_usage"] for r in rows}
    assert got == {n: expected.get(n, 0) for n in got}
    assert any(v for v in got.values())
    shown = summary_json(summarize(report), rows)["rows"]
    assert all(set(MEMORY_COLUMNS) <= set(r) for r in shown)


def test_sort_by_memory_orders_rows_by_it(report: DatasetTables) -> None:
    averages = summarize(report).averages
    for key in MEMORY_COLUMNS:
        values = averages.sorted(key).column(key).to_pylist()
        assert values == sorted(values, reverse=True)
    assert "Self CPU Mem" in averages.table("self_cpu_memory_usage", 5)


def test_no_memory_no_columns_and_memory_sort_refused() -> None:
    summary = summarize(SAMPLE)
    assert "CPU Mem" not in summary.averages.table()
    assert summary_json(summary, [])["memory"] == {}
    with pytest.raises(OptionError, match="recorded no memory"):
        summary.averages.sorted("cpu_memory_usage")


def test_peak_per_device_and_step_is_the_raw_rows_maximum(report: DatasetTables) -> None:
    rows = report.table("memory").to_pylist()
    ops = {r["op_id"]: r for r in report.ops.select(["op_id", "parent_id", "op_name", "module_path"]).to_pylist()}

    def module(op_id: int | None) -> str | None:  # the op's module path, else its nearest ancestor's
        while op_id is not None and not ops[op_id]["module_path"]:
            op_id = ops[op_id]["parent_id"]
        return None if op_id is None else str(ops[op_id]["module_path"])

    memory = summary_json(summarize(report), [])["memory"]
    assert set(memory) == {r["device"] for r in rows}
    for device, got in memory.items():
        mine = [r for r in rows if r["device"] == device]
        top = max(r["total_allocated"] for r in mine)
        first = min((r for r in mine if r["total_allocated"] == top), key=lambda r: r["ts_ns"])
        assert (got["peak_allocated_bytes"], got["peak_ns"], got["step"]) == (top, first["ts_ns"], first["step"])
        assert (got["op"], got["module_path"]) == (ops[first["op_id"]]["op_name"], module(first["op_id"]))
        steps = sorted({r["step"] for r in mine if r["step"] is not None})
        assert [s["step"] for s in got["steps"]] == steps and len(steps) >= 2
        for s in got["steps"]:
            assert s["peak_allocated_bytes"] == max(r["total_allocated"] for r in mine if r["step"] == s["step"])


def test_device_filter_keeps_that_gpus_memory() -> None:
    sample = SAMPLE.with_name("cnn_cpu+synthetic_gpu.sqlite")
    events = made_up_events(nvbridge.load(sample).ops)
    for e in events:  # every other block on the GPU (a block's free with its allocation)
        e["device"] = "cuda:0" if (e["address"] // 4096) % 2 else "cpu"
    report = with_memory(sample, events)
    rows = [r for r in report.table("memory").to_pylist() if r["device"] == "cuda:0"]
    memory = summary_json(summarize(report, device=0), [])["memory"]
    assert list(memory) == ["cuda:0"]
    assert memory["cuda:0"]["peak_allocated_bytes"] == max(r["total_allocated"] for r in rows)
    assert set(summary_json(summarize(report), [])["memory"]) == {"cpu", "cuda:0"}
