"""GPU peaks (nvbridge.gpu.peaks) against raw SQL on the real exports, and reports naming a GPU
nobody listed (planted in temporary copies of real exports). tests/test_gpu_datasheets.py checks
the architecture table against NVIDIA's datasheets.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.analysis import throughput
from nvbridge.cli import cli
from nvbridge.gpu.arch import arch_of, parse_cc
from nvbridge.gpu.peaks import Facts, device_facts, from_facts, resolve
from tests.conftest import ALL_FILES, SAMPLE_DB, raw, real_db


def _expected_facts(path: Path) -> dict[int, tuple[Any, ...]]:
    """Per device id: (name, memory GB/s, SMs, clock MHz, compute capability), from raw SQL with
    each table's documented units (nsys TARGET_INFO_GPU: B/s and Hz; CUPTI's device record and
    TARGET_INFO_CUDA_GPU: KB/s and kHz); a 0 is "not recorded"."""
    tables = {r[0] for r in raw(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "TARGET_INFO_GPU" in tables:
        sql = (
            "SELECT id, name, memoryBandwidth / 1e9, smCount, clockRate / 1e6, computeMajor, computeMinor "
            "FROM TARGET_INFO_GPU"
        )
    elif "TARGET_INFO_CUDA_GPU" in tables:
        sql = (
            "SELECT deviceId, name, globalMemoryBandwidth * 1000 / 1e9, numMultiprocessors, coreClockRate / 1e3, "
            "computeCapabilityMajor, computeCapabilityMinor FROM TARGET_INFO_CUDA_GPU"
        )
    elif "CUPTI_ACTIVITY_KIND_DEVICE" in tables:
        sql = (
            "SELECT d.id, s.value, d.globalMemoryBandwidth * 1000 / 1e9, d.numMultiprocessors, "
            "d.coreClockRate / 1e3, d.computeCapabilityMajor, d.computeCapabilityMinor "
            "FROM CUPTI_ACTIVITY_KIND_DEVICE d JOIN StringTable s ON s._id_ = d.name"
        )
    else:
        return {}
    out: dict[int, tuple[Any, ...]] = {}
    for i, name, bw, sm, mhz, major, minor in raw(path, sql):
        out.setdefault(
            int(i),
            (name, bw or None, sm or None, mhz or None, f"{major}.{minor}" if major else None),
        )
    return out


@pytest.mark.parametrize("name", ALL_FILES)
def test_device_facts_equal_raw_sql(name: str) -> None:
    path = real_db(name)
    devices = nvbridge.load(path).devices
    got = {
        r["device_id"]: (r["name"], r["memory_gbps"], r["sm_count"], r["sm_clock_mhz"], r["compute_capability"])
        for r in devices.to_pylist()
    }
    expected = _expected_facts(path)
    for device, facts in expected.items():
        assert got[device] == pytest.approx(facts), (name, device)
    # devices the report does not describe (GPU ops only) have no facts
    assert all(v[1:] == (None,) * 4 for d, v in got.items() if d not in expected)


def _report_cc(path: Path) -> str | None:
    """The compute capability of the device that ran the most kernels, from raw SQL."""
    facts = _expected_facts(path)
    table = "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL" if path.name.startswith("nvprof") else "CUPTI_ACTIVITY_KIND_KERNEL"
    try:
        rows = raw(path, f"SELECT deviceId, count(*) c FROM {table} GROUP BY deviceId ORDER BY c DESC LIMIT 1")
    except sqlite3.OperationalError:
        rows = []
    device = int(rows[0][0]) if rows else min(facts, default=None)
    return None if device is None or device not in facts else facts[device][4]


PEAKS_LINE = re.compile(r"^Peaks \((?P<name>[^)]*)\): (?P<rest>.*)$")


def _summary(path: Path, *args: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a NaN cast warning is an internal error
        result = CliRunner().invoke(cli, ["summary", str(path), *args])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("name", ALL_FILES)
def test_every_real_export_prints_numeric_peaks_of_its_architecture_or_one_unknown_line(name: str) -> None:
    path = real_db(name)
    text = _summary(path)
    cc = _report_cc(path)
    peaks_lines = [line for line in text.splitlines() if line.startswith("Peaks")]
    assert len(peaks_lines) == 1
    if cc is None:  # no device facts (the FSDP export) or no device at all
        assert peaks_lines[0].startswith("Peaks: unknown GPU; give --peak-tflops")
        assert "MFU" not in text.replace("for % of peak and MFU", "")
        return
    match = PEAKS_LINE.match(peaks_lines[0])
    assert match is not None, peaks_lines[0]
    rates = re.findall(r"\b(fp\d+|tf32|bf16) ([\d.]+)\b", match["rest"].split(" TFLOP/s")[0])
    assert rates and all(float(v) > 0 for _, v in rates), peaks_lines[0]
    arch = arch_of(parse_cc(cc) or (0, 0))
    assert arch is not None and {p for p, _ in rates} <= set(arch.rates), (cc, rates)  # no dtype the arch lacks
    advice = CliRunner().invoke(cli, ["advise", str(path), "--json"])
    assert advice.exit_code == 0, advice.output
    if '"peaks": null' not in advice.stdout:
        peaks_text = re.search(r'"peaks": "([^"]*)"', advice.stdout)
        assert peaks_text is not None and re.search(r"\bfp32 [\d.]+\b.* TFLOP/s", peaks_text[1]), peaks_text


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLE_DB.glob("*.sqlite")))
def test_samples_print_no_empty_peak_and_at_most_one_mfu_peak_line(name: str) -> None:
    text = _summary(SAMPLE_DB / name)
    assert text.count("Peaks") == 1 and "Peaks: unknown GPU; give --peak-tflops" in text  # no GPU recorded
    assert text.count("unknown peak") <= 1 and " TFLOP/s;" not in text.split("Peaks")[1].split("\n")[0]


def test_turing_reports_no_tf32_and_runs_float32_convolutions_at_fp32() -> None:
    path = real_db("nsys-2022.1-dlprof-torch-seq.sqlite")
    ((sms, hz, major, minor),) = raw(path, "SELECT smCount, clockRate, computeMajor, computeMinor FROM TARGET_INFO_GPU")
    assert (major, minor) == (7, 5)
    report = nvbridge.load(path)
    peaks = throughput.device_peaks(report.devices, report.gpu_ops)
    assert peaks is not None and peaks.tf32 is None and peaks.bf16 is None
    assert peaks.effective("tf32") == ("fp32", peaks.fp32)
    # 64 FP32 lanes x 2 per SM and clock (Turing whitepaper): the RTX 2070 SUPER at its recorded clock
    assert peaks.fp32 == pytest.approx(int(sms) * 128 * int(hz) / 1e12)
    text = _summary(path)
    assert "tf32" not in text and "(fp32 precision" in text


def _plant(src: Path, dest: Path, sql: str) -> Path:
    shutil.copyfile(src, dest)
    con = sqlite3.connect(dest)
    try:
        con.execute(sql)
        con.commit()
    finally:
        con.close()
    return dest


def test_a_gpu_nobody_listed_gets_peaks_from_its_recorded_sms_and_clock(tmp_path: Path) -> None:
    """The A100 export's device renamed: no datasheet row matches, and the recorded 108 SMs at
    1410 MHz of compute capability 8.0 still give the A100's datasheet figures (A100 datasheet,
    2021: fp32 19.5, tf32 156, bf16 312 TFLOP/s) within 5%."""
    path = _plant(
        real_db("nsys-2024.2-pyprof-markers.sqlite"),
        tmp_path / "renamed.sqlite",
        "UPDATE TARGET_INFO_GPU SET name = 'NVIDIA Mystery GPU 9000'",
    )
    report = nvbridge.load(path)
    peaks = throughput.device_peaks(report.devices, report.gpu_ops)
    assert peaks is not None and peaks.name == "NVIDIA Mystery GPU 9000" and "SMs x" in peaks.flops_source
    for precision, sheet in (("fp32", 19.5), ("tf32", 156), ("bf16", 312)):
        assert abs((peaks.tflops(precision) or 0) / sheet - 1) < 0.05, precision
    text = _summary(path)
    assert re.search(r"^Peaks \(NVIDIA Mystery GPU 9000\): fp64 [\d.]+, fp32 [\d.]+, tf32 [\d.]+", text, re.M)
    # every finding: start-up and idle come first on this capture (its first cuDNN launch)
    advice = CliRunner().invoke(cli, ["advise", str(path), "--limit", "-1"])
    assert "Roofline peaks: Mystery GPU 9000: fp32 " in advice.stdout and "below_roofline" in advice.stdout


def test_a_listed_name_with_other_facts_gets_its_own_peaks(tmp_path: Path) -> None:
    """The nvprof V100 report with 40 of its 80 SMs recorded (a cut-down part or a partition under
    the same name): the datasheet row no longer applies, the recorded facts do."""
    path = _plant(
        real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite"),
        tmp_path / "half.sqlite",
        "UPDATE CUPTI_ACTIVITY_KIND_DEVICE SET numMultiprocessors = 40",
    )
    ((khz,),) = raw(path, "SELECT coreClockRate FROM CUPTI_ACTIVITY_KIND_DEVICE")
    report = nvbridge.load(path)
    peaks = throughput.device_peaks(report.devices, report.gpu_ops)
    assert peaks is not None and peaks.name == "Tesla V100-SXM2-16GB"
    assert abs((peaks.fp32 or 0) / (15.7 / 2) - 1) < 0.05  # half of the V100 SXM2 datasheet's 15.7
    assert peaks.fp32 == pytest.approx(40 * 128 * int(khz) * 1e3 / 1e12)
    full = nvbridge.load(real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite"))
    listed = throughput.device_peaks(full.devices, full.gpu_ops)
    assert listed is not None and listed.name == "V100 SXM2" and listed.fp32 == 15.7


@pytest.mark.parametrize(
    ("name", "sql"),
    [
        # a version without TARGET_INFO_GPU.smCount: the SMs from TARGET_INFO_CUDA_DEVICE (by uuid)
        ("nsys-2026.2-windows-cs336.sqlite", "ALTER TABLE TARGET_INFO_GPU DROP COLUMN smCount"),
        # a version recording the clock in kHz, as CUPTI does
        ("nsys-2026.2-windows-cs336.sqlite", "UPDATE TARGET_INFO_GPU SET clockRate = clockRate / 1000"),
        # a 2021-era 5-column TARGET_INFO_GPU beside TARGET_INFO_CUDA_GPU: the facts are read from the latter
        (
            "nsys-2021-pre-metadata.sqlite",
            "CREATE TABLE TARGET_INFO_GPU AS SELECT vmId, deviceId, name, pciBusId AS busLocation, 1 AS isDiscrete "
            "FROM TARGET_INFO_CUDA_GPU",
        ),
    ],
)
def test_facts_are_found_where_other_versions_keep_them(name: str, sql: str, tmp_path: Path) -> None:
    original = nvbridge.load(real_db(name)).devices
    planted = nvbridge.load(_plant(real_db(name), tmp_path / name, sql)).devices
    assert planted.equals(original)
    assert original.column("sm_count")[0].as_py() and original.column("sm_clock_mhz")[0].as_py()


def test_an_architecture_nvbridge_does_not_know_says_so_in_one_line(tmp_path: Path) -> None:
    path = _plant(
        real_db("nsys-2022.1-dlprof-torch-seq.sqlite"),
        tmp_path / "future.sqlite",
        "UPDATE TARGET_INFO_GPU SET computeMajor = 13, computeMinor = 0",
    )
    text = _summary(path)
    (line,) = [x for x in text.replace("\n  ", " ").splitlines() if x.startswith("Peaks")]  # wrapped at 100
    assert "compute capability 13.0 is not in nvbridge's table" in line and "448 GB/s (report)" in line
    assert "unknown peak" not in text.replace(line, "")


def test_unknown_devices_give_no_peaks_and_overrides_give_them() -> None:
    assert from_facts(Facts()) is None and resolve(None) is None
    assert from_facts(Facts(name="NVIDIA GeForce RTX 4090 Laptop GPU")) is None  # no row for laptops
    given = resolve(facts=Facts(), peak_tflops=100.0)
    assert given is not None and given.tflops("bf16") == 100.0 and given.gbps is None
    assert device_facts(pa.table({"device_id": [0], "name": ["x"]}), 0) == Facts(name="x")  # an older dataset


def _roofline_rows(peaks_tflops: float) -> pa.Table:
    """Two op groups (a float32 convolution and a bf16 matmul) below a GPU's roofs."""
    return pa.table(
        {
            "name": ["torch.nn.functional.conv2d", "aten::mm"],
            "compute_dtype": ["float32", "bfloat16"],
            "intensity": [50.0, 200.0],
            "achieved_tflops": [peaks_tflops / 10, peaks_tflops / 5],
            "gpu_total_ns": [1_000_000, 2_000_000],
            "bound": ["compute", "compute"],
        }
    )


@pytest.mark.parametrize(
    "name",
    [
        "nsys-2026.2-windows-cs336.sqlite",
        "nsys-2022.1-dlprof-torch-seq.sqlite",
        "nvprof-2020-pytorch14-pyprof-lm.sqlite",
        "nvprof-2021-mxnet-driver.nvvp",
        "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite",
    ],
)
def test_the_roofline_has_a_roof_per_precision_and_a_legend(name: str) -> None:
    import matplotlib.pyplot as plt

    from nvbridge.plot.roofline import figure

    report = nvbridge.load(real_db(name))
    peaks = throughput.device_peaks(report.devices, report.gpu_ops)
    cc = _report_cc(real_db(name))
    if cc is None:  # the FSDP export records no device: no roof unless the user gives peaks
        assert peaks is None
        fig = figure(_roofline_rows(1.0), None)
        assert "unknown peak" in fig.axes[0].get_title() and not fig.axes[0].get_lines()
        plt.close(fig)
        peaks = throughput.device_peaks(report.devices, report.gpu_ops, peak_tflops=989.5, peak_gbps=3350)
    assert peaks is not None and peaks.fp32
    fig = figure(_roofline_rows(peaks.fp32), peaks)
    try:
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        roofs = [t for t in legend if " roof: " in t]
        arch = arch_of(parse_cc(cc) or (0, 0)) if cc else None
        wanted = {
            "tf32" if arch is None or "tf32" in arch.rates else "fp32",
            "bf16" if arch is None or "bf16" in arch.rates else "fp32",
        }
        assert {t.split(" roof")[0] for t in roofs} == wanted, legend
        for line in fig.axes[0].get_lines():
            kind = str(line.get_label()).split(" roof")[0]
            assert max(line.get_ydata()) == pytest.approx(peaks.effective(kind)[1])
        assert any(t.startswith("op: ") for t in legend)
    finally:
        plt.close(fig)


def test_plot_and_advise_on_a_turing_export_raise_no_numpy_warning(tmp_path: Path) -> None:
    path = str(real_db("nsys-2022.1-dlprof-torch-seq.sqlite"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot = CliRunner().invoke(cli, ["plot", path, "--roofline", "-o", str(tmp_path / "roof.png")])
        advice = CliRunner().invoke(cli, ["advise", path])
    assert plot.exit_code == 0 and advice.exit_code == 0, plot.output + advice.output
    assert "Roofline peaks: GeForce RTX 2070 SUPER: fp32 " in advice.stdout
