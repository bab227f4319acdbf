"""Rates, peaks and MFU (nvbridge.analysis.throughput, nvbridge.gpu.peaks) against references computed
here: torch's FlopCounterMode on the recorded workload, raw SQL, the docs' formulas."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.analysis import throughput
from nvbridge.analysis.mfu import mfu
from nvbridge.cli import cli
from nvbridge.gpu.peaks import Peaks, lookup, resolve
from tests.conftest import raw, real_db

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_db" / "transformer_shapes_cpu.sqlite"


def workload_flops() -> list[tuple[int, int]]:
    """(forward, backward) FLOPs per step that FlopCounterMode counts when the sample's workload
    (scripts/workloads/samples.py, recorded with record_shapes) runs again here. Its registry has
    no CPU flash-attention kernel (what the encoder's attention runs on CPU): that kernel and its
    backward are counted with torch's own formulas for the CUDA flash kernel."""
    torch = pytest.importorskip("torch")
    from torch.utils import flop_counter
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    cpu_flash = {
        aten._scaled_dot_product_flash_attention_for_cpu: cast(Any, flop_counter.sdpa_flop).__wrapped__,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: cast(
            Any, flop_counter.sdpa_backward_flop
        ).__wrapped__,
    }

    from scripts.workloads import samples

    counted: dict[str, list[int]] = {"forward": [], "backward": []}

    @contextlib.contextmanager
    def phase(name: str) -> Iterator[None]:
        if name not in counted:  # the optimizer's step is not counted
            yield
            return
        with FlopCounterMode(display=False, custom_mapping=cpu_flash) as mode:
            yield
        counted[name].append(int(mode.get_total_flops()))

    samples.transformer().run(phase=phase)
    return list(zip(counted["forward"], counted["backward"]))


def test_recorded_workload_flops_equal_flop_counter_forward_and_backward() -> None:
    steps = workload_flops()
    ops = nvbridge.load(SAMPLE).df("ops")
    # Forward: the aten matmuls outside any backward node; backward: the autograd nodes.
    parent = dict(zip(ops["op_id"], ops["parent_id"]))
    backward_ids = set(ops.loc[ops["is_backward"], "op_id"])

    def under_backward(op_id: int) -> bool:
        p = parent[op_id]
        while p == p and p is not None:
            if p in backward_ids:
                return True
            p = parent[int(p)]
        return False

    attention = "aten::_scaled_dot_product_flash_attention_for_cpu"
    matmuls = ops[ops["op_name"].isin(["aten::mm", "aten::addmm", attention])]
    forward = matmuls[[not under_backward(i) for i in matmuls["op_id"]]]
    nodes = ops[ops["op_name"].isin(["AddmmBackward0", "MmBackward0", "ScaledDotProductFlashAttentionForCpuBackward0"])]
    assert forward["flops"].notna().all() and nodes["flops"].notna().all()
    assert int(forward["flops"].sum()) == sum(f for f, _ in steps) > 0
    assert int(nodes["flops"].sum()) == sum(b for _, b in steps) > 0


def test_mfu_per_step_is_model_flops_over_wall_time_and_peak() -> None:
    steps = workload_flops()
    walls = dict(raw(SAMPLE, "SELECT text, \"end\" - start FROM NVTX_EVENTS WHERE text LIKE 'ProfilerStep#%'"))
    report = nvbridge.load(SAMPLE)
    figures = mfu(report.ops, report.gpu_ops, resolve(None, peak_tflops=0.002, peak_gbps=10))
    assert [s["step"] for s in figures["steps"]] == [0, 1]
    for st, (fwd, bwd) in zip(figures["steps"], steps):
        wall = int(walls[f"ProfilerStep#{st['step']}"])
        assert st["flops"] == fwd + bwd and st["wall_ns"] == wall
        assert math.isclose(st["mfu_pct"], 100 * (fwd + bwd) / (wall * 1e-9 * 0.002e12))
    assert figures["precision"] == "fp32" and figures["assumed_dtype_ops"] > 0


def test_summary_prints_mfu_and_states_the_assumed_dtype() -> None:
    result = CliRunner().invoke(cli, ["summary", str(SAMPLE), "--peak-tflops", "0.002", "--peak-gbps", "10"])
    assert result.exit_code == 0, result.output
    assert "ops without recorded dtypes assume float32" in result.stdout
    assert "step 0: MFU " in result.stdout and "step 1: MFU " in result.stdout
    assert "Unknown calls" in result.stdout  # the cost table under torch's
    result = CliRunner().invoke(cli, ["summary", str(SAMPLE)])
    assert "Peaks: unknown GPU; give --peak-tflops and --peak-gbps" in result.stdout
    # No row with a known cost: the header says why, and no empty table follows.
    result = CliRunner().invoke(cli, ["summary", str(ROOT / "sample_db" / "cnn_cpu+synthetic_gpu.sqlite")])
    assert "model FLOPs unknown: no matmul, convolution or attention op records its shapes" in result.stdout
    assert "Unknown calls" not in result.stdout


def test_rates_follow_the_documented_formulas() -> None:
    peaks = Peaks("test", gbps=1000, fp32=20, bf16=300)
    rows = pa.table(
        {
            "name": ["gemm", "add", "unknown", "mixed"],
            "calls": [1, 1, 2, 2],
            "unknown_calls": [0, 0, 2, 1],
            "flops": [4_000_000_000, 1_000_000, 0, 10_000_000],
            "bytes": [10_000_000, 12_000_000, 0, 1_000_000],
            "gpu_total_ns": [1_000_000, 20_000, 5_000, 1_000],
            "compute_dtype": ["bf16", "float32", None, "float32"],
        }
    )
    out = throughput.rates(rows, peaks).to_pylist()
    gemm, add, unknown, mixed = out
    assert math.isclose(gemm["achieved_tflops"], 4e9 / 1e-3 / 1e12)  # 4 TFLOP/s
    assert math.isclose(gemm["achieved_gbps"], 1e7 / 1e-3 / 1e9)
    assert math.isclose(gemm["intensity"], 400) and gemm["bound"] == "compute"  # ridge 300e12 / 1e12 = 300
    assert math.isclose(gemm["pct_of_peak"], 100 * 4 / 300)
    assert add["bound"] == "memory"  # intensity 1/12 < ridge 20
    assert math.isclose(add["pct_of_peak"], 100 * (12e6 / 20e-6 / 1e9) / 1000)  # bandwidth share
    assert unknown["achieved_tflops"] is None and unknown["bound"] is None and unknown["pct_of_peak"] is None
    assert mixed["achieved_tflops"] is not None  # one of two calls known: rated over its calls' time
    assert throughput.rates(rows, None).column("pct_of_peak").null_count == 4


def test_gpu_table_matches_the_reports_device_names_and_their_recorded_bandwidth() -> None:
    recorded = []
    for file in (
        "nsys-2023.3-openmp-offload.sqlite",
        "nsys-2024.2-pyprof-markers.sqlite",
        "nsys-2024.6-nvfuser-cpp-nvtx.sqlite",
    ):
        recorded += raw(real_db(file), "SELECT DISTINCT name, memoryBandwidth / 1e9 FROM TARGET_INFO_GPU")
    for file in ("nvprof-2020-pytorch14-pyprof-lm.sqlite", "nvprof-2021-mxnet-driver.nvvp"):
        # CUPTI records the bandwidth in KB/s.
        recorded += raw(
            real_db(file),
            "SELECT s.value, d.globalMemoryBandwidth / 1e6 "
            "FROM CUPTI_ACTIVITY_KIND_DEVICE d JOIN StringTable s ON s._id_ = d.name",
        )
    expected = {
        "Tesla T4": "T4",
        "NVIDIA A100-SXM4-40GB": "A100 40GB",
        "NVIDIA H200": "H200 SXM",
        "Tesla V100-SXM2-16GB": "V100 SXM2",
        "TITAN V": "TITAN V",
    }
    assert {str(name) for name, _ in recorded} == set(expected)
    for name, gbps in recorded:
        peaks = lookup(str(name))
        assert peaks is not None and peaks.name == expected[str(name)] and peaks.gbps is not None
        assert abs(peaks.gbps - float(gbps)) / float(gbps) < 0.03, name  # datasheet vs what the driver reports


@pytest.mark.parametrize(
    ("name", "row"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
        ("NVIDIA GeForce RTX 5090", "RTX 5090"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
    ],
)
def test_device_names_pick_their_row(name: str, row: str) -> None:
    peaks = lookup(name)
    assert peaks is not None and peaks.name == row


def test_recorded_bandwidth_reaches_the_devices_table_and_the_peaks() -> None:
    db = real_db("nsys-2024.2-pyprof-markers.sqlite")
    (recorded,) = raw(db, "SELECT DISTINCT memoryBandwidth FROM TARGET_INFO_GPU")
    report = nvbridge.load(db)
    assert set(report.devices.column("memory_gbps").to_pylist()) == {float(str(recorded[0])) / 1e9}
    peaks = throughput.device_peaks(report.devices, report.gpu_ops)
    assert peaks is not None and peaks.name == "A100 40GB" and peaks.gbps_source == "report"
    assert peaks.gbps == float(str(recorded[0])) / 1e9 and peaks.bf16 == 312
    nvprof = real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite")
    (kbps,) = raw(nvprof, "SELECT globalMemoryBandwidth FROM CUPTI_ACTIVITY_KIND_DEVICE")
    assert nvbridge.load(nvprof).devices.column("memory_gbps").to_pylist() == [float(str(kbps[0])) / 1e6]


def test_overrides_replace_the_table() -> None:
    assert lookup("NVIDIA A10G") is None and lookup(None) is None
    peaks = resolve("NVIDIA A100-SXM4-40GB", peak_tflops=100.0)
    assert peaks is not None and peaks.gbps == 1555 and peaks.tflops("bf16") == peaks.tflops("fp32") == 100.0
    peaks = resolve("mystery GPU", peak_gbps=500.0)
    assert peaks is not None and peaks.gbps == 500 and peaks.tflops("fp32") is None
    # The user's figure over the report's, the report's over the datasheet's.
    assert resolve("NVIDIA A10", recorded_gbps=590.0).gbps == 590.0  # type: ignore[union-attr]
    assert resolve("NVIDIA A10", peak_gbps=100.0, recorded_gbps=590.0).gbps == 100.0  # type: ignore[union-attr]


def test_roofline_picture(tmp_path: Path) -> None:
    out = tmp_path / "roof.png"
    result = CliRunner().invoke(
        cli, ["plot", str(real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite")), "-o", str(out), "--roofline"]
    )
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 20_000 and out.read_bytes()[:4] == b"\x89PNG"
    drawn = int(result.stdout.split("(")[1].split()[0])
    report = nvbridge.load(real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite"))
    ops = report.df("ops")
    known = ops[ops["flops"].notna() & (ops["total_gpu_ns"] > 0) & ((ops["flops"] > 0) | (ops["bytes"] > 0))]
    with_flops = known[known["flops"] > 0]
    # One point per (name, input shapes) with FLOPs and GPU time.
    assert drawn == len(with_flops.groupby(["op_name", "input_shapes"])) > 10
    result = CliRunner().invoke(cli, ["plot", str(SAMPLE), "-o", str(tmp_path / "none.png"), "--roofline"])
    assert result.exit_code == 1 and "no op has both a known FLOP count and GPU time" in result.output
    assert not (tmp_path / "none.png").exists()
    result = CliRunner().invoke(cli, ["plot", str(SAMPLE), "-o", str(out), "--roofline", "--step", "1"])
    assert result.exit_code == 2 and "the roofline covers the whole report" in result.stderr


def test_a_dataset_written_before_cost_columns_is_refused_in_one_line(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    out = tmp_path / "old"
    nvbridge.convert(SAMPLE, out)
    ops = pq.read_table(out / "ops.parquet")
    pq.write_table(
        ops.drop_columns(["flops", "bytes", "compute_dtype", "dtype_assumed", "input_dtypes"]), out / "ops.parquet"
    )
    result = CliRunner().invoke(cli, ["summary", str(out)])
    assert result.exit_code == 1
    assert "lacks the columns flops, bytes, compute_dtype, dtype_assumed" in result.output
    assert "convert the report again" in result.output and "Traceback" not in result.output


def test_mfu_per_rank_of_a_partitioned_dataset(tmp_path: Path) -> None:
    import shutil

    inputs = []
    for rank in (0, 1):
        inputs.append(tmp_path / f"rank{rank}.sqlite")
        shutil.copyfile(SAMPLE, inputs[-1])
    result = CliRunner().invoke(cli, ["convert", *map(str, inputs), "-o", str(tmp_path / "ds"), "-q"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["summary", str(tmp_path / "ds"), "--peak-tflops", "0.002", "--json"])
    figures = __import__("json").loads(result.stdout)["flops"]
    single = mfu(nvbridge.load(SAMPLE).ops, nvbridge.load(SAMPLE).gpu_ops, resolve(None, 0.002))
    assert sorted(figures) == ["rank 0", "rank 1"]
    for fig in figures.values():
        assert [s["mfu_pct"] for s in fig["steps"]] == [s["mfu_pct"] for s in single["steps"]]
    text = CliRunner().invoke(cli, ["summary", str(tmp_path / "ds"), "--peak-tflops", "0.002"]).stdout
    assert "rank 0:   step 0: MFU" in text and "rank 1:   step 1: MFU" in text


def test_float32_convolutions_compare_with_tf32_and_matmuls_with_fp32() -> None:
    from nvbridge.engine.costs.flops import precision

    assert precision("torch.nn.functional.conv2d", "float32") == "tf32"
    assert precision("aten::convolution_backward", "f32") == "tf32"
    assert precision("aten::mm", "float32") == "fp32" and precision("aten::mm", "bf16") == "bf16"
    a100, v100 = lookup("NVIDIA A100-SXM4-40GB"), lookup("Tesla V100-SXM2-16GB")
    assert a100 is not None and v100 is not None
    assert a100.tflops("tf32") == 156 and v100.tflops("tf32") == v100.fp32 == 15.7  # no TF32 before Ampere
    rows = pa.table(
        {
            "name": ["torch.nn.functional.conv2d"],
            "calls": [1],
            "unknown_calls": [0],
            "flops": [10**12],
            "bytes": [10**9],
            "gpu_total_ns": [10**8],
            "compute_dtype": ["float32"],
        }
    )
    (row,) = throughput.rates(rows, a100).to_pylist()
    assert math.isclose(row["pct_of_peak"], 100 * 10 / 156)  # 10 TFLOP/s at intensity 1000: compute-bound


def test_csv_and_json_write_null_flops_for_ops_of_unknown_cost() -> None:
    """An op whose cost is unknown on every call has null FLOPs and bytes, as the dataset's
    ops rows do, not 0 (issue 25, item 15); an op with known calls sums them."""
    import csv
    import io
    import json

    path = real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite")
    ops = nvbridge.load(path).ops
    flops = ops.column("flops").to_pylist()
    names = ops.column("op_name").to_pylist()
    unknown = {n for n in set(names) if all(f is None for f, m in zip(flops, names) if m == n)}
    known = {n for n in set(names) if any(f is not None for f, m in zip(flops, names) if m == n)}
    assert unknown and known
    rows = json.loads(CliRunner().invoke(cli, ["summary", str(path), "--json", "--limit", "-1"]).stdout)["rows"]
    text = CliRunner().invoke(cli, ["summary", str(path), "--csv", "--limit", "-1"]).stdout
    for row, line in zip(rows, csv.DictReader(io.StringIO(text))):
        if row["name"] in unknown:
            assert row["flops"] is None and row["bytes"] is None and line["flops"] == line["bytes"] == ""
        elif row["name"] in known:
            want = sum(f or 0 for f, m in zip(flops, names) if m == row["name"])
            assert row["flops"] == want and int(line["flops"]) == want
