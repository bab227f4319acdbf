"""Peak dense throughput per precision and memory bandwidth of the GPUs users profile on.

Every figure is the vendor's published peak **without sparsity** (NVIDIA datasheets quote
tensor-core figures "with sparsity" at twice the dense rate; those are halved here), in
TFLOP/s (TOPS for int8) and GB/s (10^9 bytes/s). GeForce rows give tensor-core rates with FP32
accumulation (what PyTorch's matmuls use), from NVIDIA's architecture whitepapers. Names are
matched against the device names reports record (nsys ``TARGET_INFO_GPU.name``, nvprof/CUPTI
``CUPTI_ACTIVITY_KIND_DEVICE.name``: ``NVIDIA A100-SXM4-40GB``, ``Tesla V100-SXM2-16GB``),
first matching pattern first. ``--peak-tflops`` / ``--peak-gbps`` override any of this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")


@dataclass(frozen=True, slots=True)
class Peaks:
    """One GPU's peaks: TFLOP/s per precision (None: not offered or not published) and GB/s."""

    name: str
    gbps: float
    fp64: float | None = None
    fp32: float | None = None
    tf32: float | None = None
    fp16: float | None = None
    bf16: float | None = None
    fp8: float | None = None
    int8: float | None = None
    gbps_source: str = "datasheet"

    def tflops(self, precision: str) -> float | None:
        """Peak TFLOP/s for a precision (nvbridge.flops.PRECISION names); fp32 for unknown ones
        and for tf32 on GPUs without it (before Ampere)."""
        value: float | None = getattr(self, precision if precision in PRECISIONS else "fp32")
        return self.fp32 if value is None and precision == "tf32" else value


# (pattern on the reported name, peaks). Sources, one per row, are the vendor documents named.
GPUS: list[tuple[str, Peaks]] = [
    # NVIDIA B200 (HGX B200 datasheet, 2024: 8 GPUs; per GPU, dense = sparse / 2)
    (r"\bB200\b", Peaks("B200", 8000, fp64=37, fp32=75, tf32=1100, fp16=2250, bf16=2250, fp8=4500, int8=4500)),
    # NVIDIA H200 SXM (H200 Tensor Core GPU datasheet, 2024)
    (r"\bH200\b", Peaks("H200 SXM", 4800, fp64=34, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979, int8=1979)),
    # NVIDIA H100 PCIe (H100 Tensor Core GPU datasheet, 2023)
    (r"\bH100\b.*PCIe", Peaks("H100 PCIe", 2000, fp64=26, fp32=51, tf32=378, fp16=756, bf16=756, fp8=1513, int8=1513)),
    # NVIDIA H100 SXM5 (H100 Tensor Core GPU datasheet, 2023); nsys names it "H100 80GB HBM3"
    (r"\bH100\b", Peaks("H100 SXM", 3350, fp64=34, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979, int8=1979)),
    # NVIDIA A100 80GB PCIe (A100 Tensor Core GPU datasheet, 2021)
    (
        r"\bA100\b.*PCIE.*80GB|\bA100\b.*80GB.*PCIE",
        Peaks("A100 80GB PCIe", 1935, fp64=9.7, fp32=19.5, tf32=156, fp16=312, bf16=312, int8=624),
    ),
    # NVIDIA A100 80GB SXM (A100 Tensor Core GPU datasheet, 2021)
    (r"\bA100\b.*80GB", Peaks("A100 80GB", 2039, fp64=9.7, fp32=19.5, tf32=156, fp16=312, bf16=312, int8=624)),
    # NVIDIA A100 40GB SXM/PCIe (A100 Tensor Core GPU datasheet, 2021)
    (r"\bA100\b", Peaks("A100 40GB", 1555, fp64=9.7, fp32=19.5, tf32=156, fp16=312, bf16=312, int8=624)),
    # NVIDIA L40S (L40S GPU datasheet, 2023)
    (r"\bL40S\b", Peaks("L40S", 864, fp32=91.6, tf32=183, fp16=362.05, bf16=362.05, fp8=733, int8=733)),
    # NVIDIA L4 (L4 Tensor Core GPU datasheet, 2023)
    (r"\bL4\b", Peaks("L4", 300, fp32=30.3, tf32=60, fp16=121, bf16=121, fp8=242.5, int8=242.5)),
    # NVIDIA A10 (A10 Tensor Core GPU datasheet, 2021)
    (r"\bA10\b", Peaks("A10", 600, fp32=31.2, tf32=62.5, fp16=125, bf16=125, int8=250)),
    # NVIDIA T4 (T4 Tensor Core GPU datasheet, 2019); fp16 is the tensor-core mixed-precision rate
    (r"\bT4\b", Peaks("T4", 320, fp32=8.1, fp16=65, int8=130)),
    # NVIDIA V100 PCIe (V100 Tensor Core GPU datasheet, 2020); fp16 is the tensor-core rate
    (r"\bV100\b.*PCIE", Peaks("V100 PCIe", 900, fp64=7, fp32=14, fp16=112)),
    # NVIDIA V100 SXM2 (V100 Tensor Core GPU datasheet, 2020); fp16 is the tensor-core rate
    (r"\bV100\b", Peaks("V100 SXM2", 900, fp64=7.8, fp32=15.7, fp16=125)),
    # NVIDIA TITAN V (TITAN V product page, 2017): 640 tensor cores, 110 TFLOPS deep learning
    (r"\bTITAN V\b", Peaks("TITAN V", 652.8, fp64=7.45, fp32=14.9, fp16=110)),
    # NVIDIA RTX 6000 Ada Generation (RTX 6000 Ada datasheet, 2022: 1457 TFLOPS fp8 sparse)
    (r"RTX 6000 Ada", Peaks("RTX 6000 Ada", 960, fp32=91.1, tf32=182.1, fp16=364.2, bf16=364.2, fp8=728.5, int8=728.5)),
    # GeForce RTX 5090 (NVIDIA RTX Blackwell GPU architecture whitepaper, 2025)
    (r"RTX 5090", Peaks("RTX 5090", 1792, fp32=104.8, tf32=104.8, fp16=209.5, bf16=209.5)),
    # GeForce RTX 5080 (NVIDIA RTX Blackwell GPU architecture whitepaper, 2025)
    (r"RTX 5080", Peaks("RTX 5080", 960, fp32=56.3, tf32=56.3, fp16=112.6, bf16=112.6)),
    # GeForce RTX 4090 (NVIDIA Ada GPU architecture whitepaper, 2022)
    (r"RTX 4090", Peaks("RTX 4090", 1008, fp32=82.6, tf32=82.6, fp16=165.2, bf16=165.2, fp8=330.3, int8=660.6)),
    # GeForce RTX 4080 (NVIDIA Ada GPU architecture whitepaper, 2022)
    (r"RTX 4080", Peaks("RTX 4080", 716.8, fp32=48.7, tf32=48.7, fp16=97.5, bf16=97.5, fp8=194.9, int8=389.9)),
    # GeForce RTX 3090 (NVIDIA Ampere GA102 GPU architecture whitepaper, 2020)
    (r"RTX 3090", Peaks("RTX 3090", 936, fp32=35.6, tf32=35.6, fp16=71, bf16=71, int8=284)),
    # GeForce RTX 3080 (NVIDIA Ampere GA102 GPU architecture whitepaper, 2020)
    (r"RTX 3080", Peaks("RTX 3080", 760, fp32=29.8, tf32=29.8, fp16=59.5, bf16=59.5, int8=238)),
]
_COMPILED = [(re.compile(pattern, re.IGNORECASE), peaks) for pattern, peaks in GPUS]


def lookup(device_name: str | None) -> Peaks | None:
    """The peaks of a reported device name; None when no row matches."""
    if not device_name:
        return None
    for pattern, peaks in _COMPILED:
        if pattern.search(device_name):
            return peaks
    return None


def resolve(
    device_name: str | None,
    peak_tflops: float | None = None,
    peak_gbps: float | None = None,
    recorded_gbps: float | None = None,
) -> Peaks | None:
    """The device's peaks: the table's, with the bandwidth the report recorded for the device
    (``recorded_gbps``) and the user's overrides (TFLOP/s for every precision) over them; None
    when none of these gives a figure."""
    found = lookup(device_name)
    if peak_tflops is None and peak_gbps is None and not recorded_gbps:
        return found
    base = found or Peaks(device_name or "GPU", 0.0)
    flops = {p: peak_tflops if peak_tflops is not None else getattr(base, p) for p in PRECISIONS}
    gbps, source = (
        (peak_gbps, "--peak-gbps")
        if peak_gbps is not None
        else (recorded_gbps, "report")
        if recorded_gbps
        else (base.gbps, base.gbps_source)
    )
    return Peaks(base.name, gbps, **flops, gbps_source=source)
