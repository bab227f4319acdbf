"""GPU peaks (nvbridge.gpu.peaks, nvbridge.gpu.arch) against NVIDIA's datasheets, raw SQL on the real
exports, and reports naming a GPU nobody listed (planted in temporary copies of real exports).

The datasheet test derives each part's peaks from its SM count and boost clock with the
per-architecture rates only (never the name table), so it checks the architecture table: the
figures written here are the vendors', each with the document it comes from.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.analysis import throughput
from nvbridge.cli import cli
from nvbridge.gpu.arch import arch_of, derive, parse_cc
from nvbridge.gpu.peaks import Facts, device_facts, from_facts, resolve
from nvbridge.gpu.skus import SKUS
from nvbridge.readers.devices import clock_mhz
from tests.conftest import ALL_FILES, SAMPLE_DB, raw, real_db


# (name as the driver reports it, compute capability, SMs, boost clock MHz, dense datasheet
# figures in TFLOP/s (int8: TOPS), source, class). Sparse figures are halved. The clock is the
# one the datasheet or whitepaper gives as the maximum boost clock (what cudaDeviceProp.clockRate
# reports); Hopper's and B200's tensor figures are at their lower tensor clock (H100 whitepaper,
# table 3), which the architecture table's tensor_clock carries.
class Sheet(NamedTuple):
    name: str  # as the driver reports it
    cc: str
    sms: int
    mhz: float  # the maximum boost clock
    kind: str
    source: str
    figures: dict[str, float]


DATASHEETS = [
    Sheet("Tesla M40", "5.2", 24, 1114, "data-centre", "NVIDIA Tesla M40 datasheet (2015)", {"fp32": 7.0}),
    Sheet(
        "Tesla P100-SXM2-16GB",
        "6.0",
        56,
        1480,
        "data-centre",
        "Tesla P100 datasheet (2016)",
        {"fp64": 5.3, "fp32": 10.6, "fp16": 21.2},
    ),
    Sheet("Tesla P40", "6.1", 30, 1531, "data-centre", "NVIDIA Tesla P40 datasheet (2016)", {"fp32": 12.0}),
    Sheet(
        "Tesla V100-SXM2-16GB",
        "7.0",
        80,
        1530,
        "data-centre",
        "NVIDIA V100 datasheet (2020)",
        {"fp64": 7.8, "fp32": 15.7, "fp16": 125},
    ),
    Sheet(
        "Tesla V100-PCIE-32GB",
        "7.0",
        80,
        1380,
        "data-centre",
        "NVIDIA V100 datasheet (2020)",
        {"fp64": 7, "fp32": 14, "fp16": 112},
    ),
    Sheet(
        "Tesla V100S-PCIE-32GB",
        "7.0",
        80,
        1597,
        "data-centre",
        "NVIDIA V100S datasheet (2019)",
        {"fp64": 8.2, "fp32": 16.4, "fp16": 130},
    ),
    Sheet(
        "Tesla T4", "7.5", 40, 1590, "data-centre", "NVIDIA T4 datasheet (2019)", {"fp32": 8.1, "fp16": 65, "int8": 130}
    ),
    Sheet(
        "Quadro RTX 6000",
        "7.5",
        72,
        1770,
        "desktop",
        "NVIDIA Quadro RTX 6000 datasheet (2018)",
        {"fp32": 16.3, "fp16": 130.5},
    ),
    Sheet(
        "NVIDIA TITAN RTX",
        "7.5",
        72,
        1770,
        "desktop",
        "NVIDIA TITAN RTX product page (2018)",
        {"fp32": 16.3, "fp16": 130},
    ),
    Sheet(
        "GeForce RTX 2080 Ti",
        "7.5",
        68,
        1635,
        "desktop",
        "NVIDIA Turing GPU architecture whitepaper (2018), appendix A: Founders Edition; fp16 with FP32 accumulate",
        {"fp32": 14.2, "fp16": 56.9, "int8": 227.7},
    ),
    Sheet(
        "NVIDIA A100-SXM4-40GB",
        "8.0",
        108,
        1410,
        "data-centre",
        "NVIDIA A100 datasheet (2021)",
        {"fp64": 9.7, "fp32": 19.5, "tf32": 156, "fp16": 312, "bf16": 312, "int8": 624},
    ),
    Sheet(
        "NVIDIA A30",
        "8.0",
        56,
        1440,
        "data-centre",
        "NVIDIA A30 datasheet (2021)",
        {"fp64": 5.2, "fp32": 10.3, "tf32": 82, "bf16": 165, "int8": 330},
    ),
    Sheet(
        "NVIDIA A10",
        "8.6",
        72,
        1695,
        "data-centre",
        "NVIDIA A10 datasheet (2021)",
        {"fp32": 31.2, "tf32": 62.5, "bf16": 125, "int8": 250},
    ),
    Sheet(
        "NVIDIA A40",
        "8.6",
        84,
        1740,
        "data-centre",
        "NVIDIA A40 datasheet (2021)",
        {"fp32": 37.4, "tf32": 74.8, "bf16": 149.7, "int8": 299.3},
    ),
    Sheet(
        "NVIDIA RTX A6000",
        "8.6",
        84,
        1800,
        "desktop",
        "NVIDIA RTX A6000 datasheet (2021)",
        {"fp32": 38.7, "fp16": 154.8},
    ),
    Sheet(
        "NVIDIA GeForce RTX 3090",
        "8.6",
        82,
        1695,
        "desktop",
        "NVIDIA Ampere GA102 GPU architecture whitepaper (2020), appendix; fp16 with FP32 accumulate",
        {"fp32": 35.6, "tf32": 35.6, "fp16": 71, "int8": 284},
    ),
    Sheet(
        "NVIDIA GeForce RTX 3080",
        "8.6",
        68,
        1710,
        "desktop",
        "NVIDIA Ampere GA102 GPU architecture whitepaper (2020), appendix; fp16 with FP32 accumulate",
        {"fp32": 29.8, "fp16": 59.5, "int8": 238},
    ),
    Sheet(
        "NVIDIA GeForce RTX 3070",
        "8.6",
        46,
        1725,
        "desktop",
        "NVIDIA Ampere GA102 GPU architecture whitepaper (2020), appendix; fp16 with FP32 accumulate",
        {"fp32": 20.3, "fp16": 40.6, "int8": 162.6},
    ),
    Sheet(
        "Orin",
        "8.7",
        16,
        1300,
        "embedded",
        "NVIDIA Jetson AGX Orin series datasheet (2022): GPU 170 sparse INT8 TOPS",
        {"fp32": 5.3, "int8": 85},
    ),
    Sheet(
        "NVIDIA L4",
        "8.9",
        58,
        2040,
        "data-centre",
        "NVIDIA L4 datasheet (2023)",
        {"fp32": 30.3, "tf32": 60, "fp16": 121, "fp8": 242.5, "int8": 242.5},
    ),
    Sheet(
        "NVIDIA L40S",
        "8.9",
        142,
        2520,
        "data-centre",
        "NVIDIA L40S datasheet (2023)",
        {"fp32": 91.6, "tf32": 183, "fp16": 362.05, "fp8": 733, "int8": 733},
    ),
    Sheet(
        "NVIDIA RTX 6000 Ada Generation",
        "8.9",
        142,
        2505,
        "desktop",
        "NVIDIA RTX 6000 Ada datasheet (2022)",
        {"fp32": 91.1, "fp8": 728.5},
    ),
    Sheet(
        "NVIDIA GeForce RTX 4090",
        "8.9",
        128,
        2520,
        "desktop",
        "NVIDIA Ada GPU architecture whitepaper (2022), appendix; fp16, fp8 with FP32 accumulate",
        {"fp32": 82.6, "tf32": 82.6, "fp16": 165.2, "fp8": 330.3, "int8": 660.6},
    ),
    Sheet(
        "NVIDIA GeForce RTX 4080",
        "8.9",
        76,
        2505,
        "desktop",
        "NVIDIA Ada GPU architecture whitepaper (2022), appendix; fp16, fp8 with FP32 accumulate",
        {"fp32": 48.7, "fp16": 97.5, "fp8": 194.9},
    ),
    Sheet(
        "NVIDIA RTX 5000 Ada Generation Laptop GPU",
        "8.9",
        76,
        2190,
        "laptop",
        "NVIDIA RTX 5000 Ada Laptop GPU specifications (2023), 2190 MHz: 682 AI TOPS (fp8 sparse)",
        {"fp32": 42.6, "fp8": 341},
    ),
    Sheet(
        "NVIDIA H100 80GB HBM3",
        "9.0",
        132,
        1980,
        "data-centre",
        "NVIDIA H100 datasheet (2023), SXM5",
        {"fp64": 34, "fp32": 67, "tf32": 494.5, "fp16": 989.5, "fp8": 1979, "int8": 1979},
    ),
    Sheet(
        "NVIDIA H100 PCIe",
        "9.0",
        114,
        1755,
        "data-centre",
        "NVIDIA H100 datasheet (2023), PCIe",
        {"fp64": 26, "fp32": 51, "tf32": 378, "fp16": 756, "fp8": 1513},
    ),
    Sheet(
        "NVIDIA H200",
        "9.0",
        132,
        1980,
        "data-centre",
        "NVIDIA H200 datasheet (2024)",
        {"fp64": 34, "fp32": 67, "bf16": 989.5, "fp8": 1979},
    ),
    Sheet(
        "NVIDIA B200",
        "10.0",
        148,
        1965,
        "data-centre",
        "NVIDIA HGX B200 datasheet (2024), per GPU",
        {"fp64": 37, "fp32": 75, "tf32": 1100, "fp16": 2250, "fp8": 4500, "fp4": 9000, "int8": 4500},
    ),
    Sheet(
        "NVIDIA GeForce RTX 5090",
        "12.0",
        170,
        2407,
        "desktop",
        "NVIDIA RTX Blackwell GPU architecture whitepaper (2025); fp16 with FP32 accumulate",
        {"fp32": 104.8, "fp16": 209.5},
    ),
    Sheet(
        "NVIDIA GeForce RTX 5080",
        "12.0",
        84,
        2617,
        "desktop",
        "NVIDIA RTX Blackwell GPU architecture whitepaper (2025); fp16 with FP32 accumulate",
        {"fp32": 56.3, "fp16": 112.6},
    ),
    Sheet(
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        "12.0",
        188,
        2617,
        "desktop",
        "NVIDIA RTX PRO 6000 Blackwell datasheet (2025): 4000 AI TOPS FP4 sparse",
        {"fp32": 125, "fp4": 2000},
    ),
]


def test_the_datasheets_cover_twenty_parts_six_architectures_and_every_class() -> None:
    archs = {str(getattr(arch_of(parse_cc(d.cc) or (0, 0)), "name", "")).split()[0] for d in DATASHEETS}
    assert len(DATASHEETS) >= 20 and len(archs) >= 6, archs
    assert {"Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell"} <= archs
    assert {"data-centre", "desktop", "laptop"} <= {d.kind for d in DATASHEETS}


@pytest.mark.parametrize("sheet", DATASHEETS, ids=[d.name for d in DATASHEETS])
def test_derived_peaks_are_within_5_percent_of_the_datasheet(sheet: Sheet) -> None:
    derived = derive(parse_cc(sheet.cc) or (0, 0), sheet.sms, sheet.mhz, sheet.name)
    assert derived is not None, sheet.source
    for precision, value in sheet.figures.items():
        assert precision in derived, (sheet.name, precision)
        assert abs(derived[precision] / value - 1) < 0.05, (sheet.name, precision, derived[precision], sheet.source)


def test_precisions_an_architecture_lacks_are_never_given() -> None:
    def offered(cc: str, name: str = "x", chip: str | None = None) -> set[str]:
        return set(derive(parse_cc(cc) or (0, 0), 10, 1500, name, chip) or {})

    assert offered("7.5", "NVIDIA GeForce RTX 2070 SUPER") == {"fp64", "fp32", "fp16", "int8"}  # no tf32, bf16
    assert "bf16" not in offered("7.0") and "tf32" not in offered("7.0")
    assert "fp16" not in offered("5.2") and "fp16" not in offered("6.1")  # no native fp16
    assert "fp8" not in offered("8.6") and "fp8" in offered("8.9") and "fp4" not in offered("9.0")
    assert "fp4" in offered("10.0") and "fp4" in offered("12.0")
    # Turing chips without tensor cores: fp16x2 at twice the fp32 rate, no tensor int8
    for name, chip in (
        ("NVIDIA GeForce GTX 1660 Ti", None),
        ("NVIDIA T1000", None),
        ("NVIDIA GeForce GTX 1650", "TU117"),
    ):
        rates = derive((7, 5), 10, 1500, name, chip)
        assert rates is not None and set(rates) == {"fp64", "fp32", "fp16"} and rates["fp16"] == 2 * rates["fp32"]
    # no datasheet row lists a precision its architecture lacks
    for sku in SKUS:
        arch = arch_of(parse_cc(sku.cc) or (0, 0), sku.name)
        assert arch is not None and set(sku.figures) - {"gbps"} <= set(arch.rates), sku.name


def test_geforce_halves_fp32_accumulation_but_not_int8() -> None:
    pro = derive((8, 9), 100, 2000, "NVIDIA RTX 6000 Ada Generation")
    geforce = derive((8, 9), 100, 2000, "NVIDIA GeForce RTX 4090")
    titan = derive((7, 5), 100, 2000, "NVIDIA TITAN RTX")
    turing = derive((7, 5), 100, 2000, "NVIDIA GeForce RTX 2080 Ti")
    assert pro and geforce and titan and turing
    for p in ("fp16", "bf16", "tf32", "fp8"):
        assert geforce[p] == pro[p] / 2
    assert geforce["int8"] == pro["int8"] and geforce["fp32"] == pro["fp32"]
    assert turing["fp16"] == titan["fp16"] / 2  # a TITAN runs FP32 accumulation at the full rate


def test_units_are_read_by_magnitude() -> None:
    assert clock_mhz(1785000000) == clock_mhz(1785000) == clock_mhz(1785) == 1785.0  # Hz, kHz, MHz
    assert clock_mhz(0) is None and clock_mhz(5) is None and clock_mhz("1785") is None


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
