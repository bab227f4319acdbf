"""summary's and advise's memory answers on real recordings: scripts/workloads/memory.py run under
nsys with emit_nvtx(profile_memory=True), against the same workload under torch.profiler
(profile_memory=True) in a fresh interpreter with nvbridge never imported, and against the raw
allocator marks read with sqlite3."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from nvbridge.cli import cli
from tests.nsys_recorded import memory_run

pytest.importorskip("torch", reason="the workloads need torch")
pytestmark = pytest.mark.nsys
WORKLOADS = ("cnn", "adam", "transformer")


@pytest.fixture(scope="module", params=WORKLOADS)
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """(the nsys database of the annotated run, torch.profiler's figures of the plain run)."""
    return memory_run(str(request.param), tmp_path_factory)


def _raw_totals(db: Path) -> list[int]:
    """total_allocated of every allocator mark, from NVTX_EVENTS (sqlite3, not nvbridge)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        texts = con.execute("SELECT text FROM NVTX_EVENTS WHERE text LIKE 'mem cpu %' ORDER BY start").fetchall()
    finally:
        con.close()
    return [int(t.split()[4]) for (t,) in texts]


def test_summary_json_peaks_and_memory_columns_equal_torchs(run: tuple[Path, dict[str, Any]]) -> None:
    db, torch_side = run
    result = CliRunner().invoke(cli, ["summary", str(db), "--json", "--limit", "-1"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    cpu = data["memory"]["cpu"]
    assert cpu["peak_allocated_bytes"] == max(_raw_totals(db))
    assert [(s["step"], s["peak_allocated_bytes"]) for s in cpu["steps"]] == [
        (s["step"], s["peak_total_allocated"]) for s in torch_side["steps"]
    ]
    rows = {r["name"]: r for r in data["rows"]}
    for want in torch_side["key_averages"]:
        if want["name"] == "ProfilerStep*":  # torch merges the steps into one row; ours keep ProfilerStep#N
            continue
        got = rows[want["name"]]
        assert got["self_cpu_memory_usage"] == want["self_cpu_memory_usage"], want["name"]
        # torch's EventList._remove_dup_nodes folds an op's only child of the same name into it
        # (aten::mean -> aten::mean): its calls, and the child's total counted in the parent's,
        # differ from the op tree as recorded; where the calls agree, so must the totals
        if got["calls"] == want["count"]:
            assert got["cpu_memory_usage"] == want["cpu_memory_usage"], want["name"]


def test_summary_text_and_advise_name_the_peak(run: tuple[Path, dict[str, Any]]) -> None:
    db, _ = run
    peak = max(_raw_totals(db))
    text = CliRunner().invoke(cli, ["summary", str(db), "--sort", "self_cpu_memory_usage", "--limit", "5"])
    assert text.exit_code == 0, text.output
    assert "Self CPU Mem" in text.stdout and "Memory cpu: peak allocated" in text.stdout
    advice = CliRunner().invoke(cli, ["advise", str(db), "--json"])
    assert advice.exit_code == 0, advice.output
    (finding,) = [f for f in json.loads(advice.stdout)["findings"] if f["kind"] == "memory_peak"]
    figures = finding["figures"]
    assert figures["peak_allocated_bytes"] == peak
    held = sum(v for k, v in figures.items() if k.endswith("_bytes") and k not in ("peak_allocated_bytes", "op_bytes"))
    assert held <= peak  # blocks older than the recording are in no category


def test_diff_gates_on_the_peak_of_converted_datasets(run: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    db, _ = run
    a, b = tmp_path / "a", tmp_path / "b"
    assert CliRunner().invoke(cli, ["convert", str(db), "-o", str(a)]).exit_code == 0
    shutil.copytree(a, b)
    # the dataset, read a row group at a time, answers as the report converted in memory
    streamed, whole = (json.loads(CliRunner().invoke(cli, ["summary", str(p), "--json"]).stdout) for p in (a, db))
    assert streamed["memory"] == whole["memory"] and streamed["rows"] == whole["rows"]
    memory = pq.read_table(b / "memory.parquet")  # B: the same events, the allocator's totals doubled
    doubled = pa.array([2 * v for v in memory.column("total_allocated").to_pylist()], pa.int64())
    pq.write_table(
        memory.set_column(memory.column_names.index("total_allocated"), "total_allocated", doubled),
        b / "memory.parquet",
    )
    peak = max(_raw_totals(db))
    loose = CliRunner().invoke(cli, ["diff", str(a), str(b), "--fail-above", "peak_memory=150%", "--json"])
    assert loose.exit_code == 0, loose.output
    (delta,) = json.loads(loose.stdout)["peaks"]
    assert (delta["device"], delta["a_bytes"], delta["b_bytes"]) == ("cpu", peak, 2 * peak)
    gated = CliRunner().invoke(cli, ["diff", str(a), str(b), "--fail-above", "peak_memory=50%"])
    assert gated.exit_code == 1 and "FAIL: peak memory cpu +100.0%" in gated.output
    assert "peak memory cpu: " in gated.stdout


def test_plot_memory_of_a_recording(run: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="plots need matplotlib: pip install -e '.[plot]'")
    db, _ = run
    for flag, name in (("--memory", "m.png"), ("--memory-blocks", "b.svg")):
        result = CliRunner().invoke(cli, ["plot", str(db), "-o", str(tmp_path / name), flag, "--step", "1"])
        assert result.exit_code == 0, result.output
        assert (tmp_path / name).stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.svg", "m.png"]
