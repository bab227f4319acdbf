"""GPU peaks (nvbridge.gpu.peaks, nvbridge.gpu.arch) against NVIDIA's datasheets.

The datasheet test derives each part's peaks from its SM count and boost clock with the
per-architecture rates only (never the name table), so it checks the architecture table: the
figures written here are the vendors', each with the document it comes from. tests/test_gpus.py
checks the peaks against raw SQL on the real exports and reports naming a GPU nobody listed.
"""

from __future__ import annotations

from typing import NamedTuple

import pytest

from nvbridge.gpu.arch import arch_of, derive, parse_cc
from nvbridge.gpu.skus import SKUS
from nvbridge.readers.devices import clock_mhz


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
