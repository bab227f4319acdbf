"""`summary` and `plot` read a dataset a row group at a time (issue #19): the figures equal those
of the tables read whole (and the GPU busy time the union of the raw rows' intervals), no event
table is ever read whole, and each summary mode reads only the ops columns it needs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.analysis import gpu_header
from nvbridge.analysis.mfu import mfu
from nvbridge.cli import cli
from nvbridge.dataset.files import Files
from nvbridge.gpu.peaks import resolve
from tests.conftest import SAMPLE_DB, raw, real_db

FSDP = "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"
EVENTS = ("ops", "gpu_ops", "api_calls")
OPTIONS: list[tuple[dict[str, Any], list[str]]] = [
    ({}, []),
    ({"group_by_input_shape": True}, ["--group-by", "shape"]),
    ({"group_by_module": True}, ["--group-by", "module"]),
    ({"group_by_stack_n": 2}, ["--group-by", "stack", "--stack-depth", "2"]),
    ({"top_level_events_only": True}, ["--top-level"]),
    ({"device": 1}, ["--device", "1"]),
    ({"rank": 1}, ["--rank", "1"]),
]


def _in_row_groups(source: Path, out: Path, rows: int, order: str) -> Path:
    """``source`` converted, its event tables rewritten in row groups of ``rows`` rows (the
    converter writes 131,072): as written, shuffled (ops out of op_id order, GPU ops out of time
    order), or in time order with each second pair of row groups swapped (a part may start
    before the one read just before it)."""
    nvbridge.convert(source, out)
    for name in EVENTS:
        table = pq.read_table(out / f"{name}.parquet")
        n = table.num_rows
        if order == "shuffled":
            table = table.take(pa.array(np.random.default_rng(19).permutation(n)))
        elif order == "swapped":
            table = table.sort_by("start_ns")
            block = np.arange(n) // rows
            swapped = np.where(block % 2 == 1, block + 1, np.where((block % 2 == 0) & (block > 0), block - 1, block))
            table = table.take(pa.array(np.argsort(np.minimum(swapped, block.max()), kind="stable")))
        pq.write_table(table, out / f"{name}.parquet", row_group_size=rows)
    return out


@pytest.fixture(scope="module", params=["as written", "shuffled", "swapped"])
def fsdp(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fsdp") / "ds"
    return _in_row_groups(real_db(FSDP), out, 500, request.param)


def _union_ns(intervals: Sequence[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals, by a plain sweep."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total, reach = total + end - start, end
        elif end > reach:
            total, reach = total + end - reach, end
    return total


def test_row_groups_give_the_figures_of_whole_tables(fsdp: Path) -> None:
    assert pq.ParquetFile(fsdp / "gpu_ops.parquet").metadata.num_row_groups >= 10
    whole = nvbridge.load(fsdp)
    for kwargs, _ in OPTIONS:
        summary = nvbridge.summarize(fsdp, **kwargs)
        expected = whole.key_averages(**kwargs, unattributed=True)
        assert summary.averages.sorted(row_limit=-1).to_pylist() == expected.sorted(row_limit=-1).to_pylist()
        assert (summary.averages.self_cpu_total_ns, summary.averages.self_gpu_total_ns) == (
            expected.self_cpu_total_ns,
            expected.self_gpu_total_ns,
        )
    summary = nvbridge.summarize(fsdp)
    assert list(summary.gpus) == gpu_header(whole.gpu_ops, whole.devices, whole.meta.get("source"), whole.api_calls)
    # Busy time against the raw export's kernels, copies and sets, device by device.
    rows: dict[int, list[tuple[int, int]]] = {}
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        for device, start, end in raw(real_db(FSDP), f"SELECT deviceId, start, end FROM {table}"):
            rows.setdefault(device, []).append((start, end))
    assert {d.device_id: d.busy_ns for d in summary.gpus} == {d: _union_ns(v) for d, v in rows.items()}


def test_later_starts_bound_every_later_part(fsdp: Path) -> None:
    """Busy time is settled early only for intervals ending before every later part starts."""
    pf = pq.ParquetFile(fsdp / "gpu_ops.parquet")
    firsts = [min(pf.read_row_group(i, columns=["start_ns"]).column(0).to_pylist()) for i in range(pf.num_row_groups)]
    expected = [min(firsts[i + 1 :]) for i in range(len(firsts) - 1)] + [None]
    assert nvbridge.load(fsdp, streamed=True).later_starts("gpu_ops") == expected


def test_row_groups_give_the_mfu_of_whole_tables(tmp_path: Path) -> None:
    ds = _in_row_groups(SAMPLE_DB / "transformer_shapes_cpu.sqlite", tmp_path / "ds", 50, "shuffled")
    whole = nvbridge.load(ds)
    peaks = resolve(None, peak_tflops=0.002, peak_gbps=10)
    figures = nvbridge.summarize(ds, peak_tflops=0.002, peak_gbps=10).flops[0][1]
    assert figures == mfu(whole.ops, whole.gpu_ops, peaks)
    assert figures["flops"] > 0 and len(figures["steps"]) >= 2


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[str]]:
    """Columns read from each table, a part at a time; reading an event table whole fails."""
    seen: dict[str, set[str]] = {}
    chunks, read = Files.chunks, Files.read

    def chunks_spy(self: Files, name: str, columns: Sequence[str], *args: Any) -> Iterator[pa.Table]:
        seen.setdefault(name, set()).update(columns)
        return chunks(self, name, columns, *args)

    def read_spy(self: Files, name: str) -> pa.Table:
        assert name not in EVENTS, f"{name} read whole"
        return read(self, name)

    monkeypatch.setattr(Files, "chunks", chunks_spy)
    monkeypatch.setattr(Files, "read", read_spy)
    return seen


COMMON = {"op_name", "self_cpu_ns", "total_cpu_ns", "flops", "bytes", "compute_dtype", "flags", "start_ns", "end_ns"}
COMMON |= {"process_id"}  # the ranks (nvbridge.dataset.ranks)
# across its two ranks (nvbridge.analysis.stragglers): each range's time per rank and step
ACROSS = {"step", "module_path", "self_gpu_ns", "time_self_gpu_ns"}
NEEDED = {  # the ops columns of each summary mode (on a report whose ops record no model FLOPs)
    "": {*COMMON, *ACROSS, "self_gpu_ns", "total_gpu_ns"},
    "--group-by shape": {*COMMON, *ACROSS, "self_gpu_ns", "total_gpu_ns", "input_shapes"},
    "--group-by module": {*COMMON, *ACROSS, "self_gpu_ns", "total_gpu_ns", "module_path"},
    "--group-by stack --stack-depth 2": {*COMMON, *ACROSS, "self_gpu_ns", "total_gpu_ns", "stack"},
    "--top-level": {*COMMON, *ACROSS, "self_gpu_ns", "total_gpu_ns", "parent_id"},
    "--device 1": {*COMMON, "op_id", "parent_id", "depth"},
    "--rank 1": {*COMMON, "self_gpu_ns", "total_gpu_ns"},
}


@pytest.mark.parametrize(("kwargs", "flags"), OPTIONS)
def test_each_summary_mode_reads_only_its_columns(
    fsdp: Path, reads: dict[str, set[str]], kwargs: dict[str, Any], flags: list[str]
) -> None:
    for form in ([], ["--json"], ["--csv"]):
        reads.clear()
        result = CliRunner().invoke(cli, ["summary", str(fsdp), *flags, *form])
        assert result.exit_code == 0, result.output
        assert reads["ops"] == NEEDED[" ".join(flags)], flags
        # the check that no call ends before it starts, then the start-up before each process's
        # first GPU op (nvbridge.dataset.timeline) from the row groups before it
        assert reads["api_calls"] == {"process_id", "name", "start_ns", "end_ns"}


def test_plot_reads_no_event_table_whole(fsdp: Path, tmp_path: Path, reads: dict[str, set[str]]) -> None:
    for flags in (["--start", "0", "--end", "20ms"], ["--roofline", "--peak-tflops", "100"]):
        result = CliRunner().invoke(cli, ["plot", str(fsdp), "-o", str(tmp_path / "p.png"), "--force", *flags])
        assert result.exit_code in (0, 1), result.output  # the export has no FLOPs: no roofline
        assert {"name", "input_values", "stack", "module_path"}.isdisjoint(reads["ops"]), flags


def test_a_partitioned_dataset_reads_its_reports_in_parts(tmp_path: Path, reads: dict[str, set[str]]) -> None:
    sources = [SAMPLE_DB / "ranks_cpu+synthetic_gpu.sqlite", SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite"]
    nvbridge.convert(sources, tmp_path / "many")
    result = CliRunner().invoke(cli, ["summary", str(tmp_path / "many"), "--json"])
    assert result.exit_code == 0, result.output
    assert {"name", "input_values", "stack", "module_path"}.isdisjoint(reads["ops"])
