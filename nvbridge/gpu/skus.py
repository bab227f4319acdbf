"""Datasheet peaks of GPUs users profile on, by the device name reports record.

Every figure is the vendor's published peak **without sparsity** (NVIDIA datasheets quote
tensor-core figures "with sparsity" at twice the dense rate; those are halved here), in TFLOP/s
(TOPS for int8) and GB/s (10^9 bytes/s). GeForce rows give tensor-core rates with FP32
accumulation (what PyTorch's matmuls use), from NVIDIA's architecture whitepapers. Each row
keeps the SM count of the part, so a report whose recorded SM count differs (a MIG slice, a
laptop part sharing a desktop name, a cut-down variant) is not given that part's figures.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Sku:
    """One datasheet row: a pattern on the reported name, the part's SM count and its peaks."""

    pattern: str
    sms: int
    cc: str  # compute capability
    figures: dict[str, float]  # precision -> TFLOP/s; "gbps" -> memory bandwidth
    name: str


def _sku(name: str, pattern: str, cc: str, sms: int, gbps: float, **figures: float) -> Sku:
    return Sku(pattern, sms, cc, {"gbps": gbps, **figures}, name)


# First matching pattern first. Sources, one per row, are the vendor documents named.
SKUS: list[Sku] = [
    # NVIDIA HGX B200 datasheet (2024): 8 GPUs; per GPU, dense = sparse / 2
    _sku("B200", r"\bB200\b", "10.0", 148, 8000, fp64=37, fp32=75, tf32=1100, fp16=2250, bf16=2250, fp8=4500, fp4=9000),
    # NVIDIA H200 Tensor Core GPU datasheet (2024), SXM
    _sku("H200 SXM", r"\bH200\b", "9.0", 132, 4800, fp64=34, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979),
    # NVIDIA H100 Tensor Core GPU datasheet (2023), PCIe
    _sku("H100 PCIe", r"\bH100\b.*PCIe", "9.0", 114, 2000, fp64=26, fp32=51, tf32=378, fp16=756, bf16=756, fp8=1513),
    # NVIDIA H100 Tensor Core GPU datasheet (2023), H100 NVL per GPU: its tensor clock is lower still
    _sku(
        "H100 NVL", r"\bH100\b.*NVL", "9.0", 132, 3900, fp64=30, fp32=60, tf32=417.5, fp16=835.5, bf16=835.5, fp8=1670.5
    ),
    # NVIDIA H100 Tensor Core GPU datasheet (2023), SXM5; nsys names it "H100 80GB HBM3"
    _sku("H100 SXM", r"\bH100\b", "9.0", 132, 3350, fp64=34, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979),
    # NVIDIA A100 Tensor Core GPU datasheet (2021): 80GB PCIe, 80GB SXM, 40GB
    _sku(
        "A100 80GB PCIe",
        r"\bA100\b.*PCIE.*80GB|\bA100\b.*80GB.*PCIE",
        "8.0",
        108,
        1935,
        fp64=9.7,
        fp32=19.5,
        tf32=156,
        fp16=312,
        bf16=312,
        int8=624,
    ),
    _sku("A100 80GB", r"\bA100\b.*80GB", "8.0", 108, 2039, fp64=9.7, fp32=19.5, tf32=156, fp16=312, bf16=312, int8=624),
    _sku("A100 40GB", r"\bA100\b", "8.0", 108, 1555, fp64=9.7, fp32=19.5, tf32=156, fp16=312, bf16=312, int8=624),
    # NVIDIA A30 Tensor Core GPU datasheet (2021)
    _sku("A30", r"\bA30\b", "8.0", 56, 933, fp64=5.2, fp32=10.3, tf32=82, fp16=165, bf16=165, int8=330),
    # NVIDIA L40S GPU datasheet (2023)
    _sku("L40S", r"\bL40S\b", "8.9", 142, 864, fp32=91.6, tf32=183, fp16=362.05, bf16=362.05, fp8=733, int8=733),
    # NVIDIA L40 GPU datasheet (2022): its tensor figures are half the L40S's per SM and clock
    _sku("L40", r"\bL40\b", "8.9", 142, 864, fp32=90.5, tf32=90.5, fp16=181.05, bf16=181.05, fp8=362, int8=362),
    # NVIDIA L4 Tensor Core GPU datasheet (2023)
    _sku("L4", r"\bL4\b", "8.9", 58, 300, fp32=30.3, tf32=60, fp16=121, bf16=121, fp8=242.5, int8=242.5),
    # NVIDIA A40 datasheet (2021)
    _sku("A40", r"\bA40\b", "8.6", 84, 696, fp32=37.4, tf32=74.8, fp16=149.7, bf16=149.7, int8=299.3),
    # NVIDIA A10 Tensor Core GPU datasheet (2021)
    _sku("A10", r"\bA10\b", "8.6", 72, 600, fp32=31.2, tf32=62.5, fp16=125, bf16=125, int8=250),
    # NVIDIA T4 Tensor Core GPU datasheet (2019); fp16 is the tensor-core mixed-precision rate
    _sku("T4", r"\bT4\b", "7.5", 40, 320, fp32=8.1, fp16=65, int8=130),
    # NVIDIA V100 Tensor Core GPU datasheet (2020): V100S PCIe, V100 PCIe, V100 SXM2; fp16 on tensor cores
    _sku("V100S PCIe", r"\bV100S\b", "7.0", 80, 1134, fp64=8.2, fp32=16.4, fp16=130),
    _sku("V100 PCIe", r"\bV100\b.*PCIE", "7.0", 80, 900, fp64=7, fp32=14, fp16=112),
    _sku("V100 SXM2", r"\bV100\b", "7.0", 80, 900, fp64=7.8, fp32=15.7, fp16=125),
    # NVIDIA TITAN V product page (2017): 640 tensor cores, 110 TFLOPS deep learning
    _sku("TITAN V", r"\bTITAN V\b", "7.0", 80, 652.8, fp64=7.45, fp32=14.9, fp16=110),
    # NVIDIA TITAN RTX product page (2018): 130 tensor TFLOPS (full-rate FP32 accumulation)
    _sku("TITAN RTX", r"\bTITAN RTX\b", "7.5", 72, 672, fp32=16.3, fp16=130, int8=261),
    # NVIDIA Quadro RTX 6000 / 8000 datasheets (2018): 130.5 tensor TFLOPS
    _sku("Quadro RTX 6000/8000", r"Quadro RTX [68]000", "7.5", 72, 672, fp32=16.3, fp16=130.5, int8=261),
    # NVIDIA RTX A6000 datasheet (2021): 309.7 tensor TFLOPS with sparsity
    _sku("RTX A6000", r"RTX A6000", "8.6", 84, 768, fp32=38.7, fp16=154.8, bf16=154.8),
    # NVIDIA RTX 6000 Ada Generation datasheet (2022): 1457 TFLOPS fp8 with sparsity
    _sku("RTX 6000 Ada", r"RTX 6000 Ada", "8.9", 142, 960, fp32=91.1, fp16=364.2, bf16=364.2, fp8=728.5),
    # GeForce RTX 5090 / 5080 (NVIDIA RTX Blackwell GPU architecture whitepaper, 2025)
    _sku("RTX 5090", r"RTX 5090", "12.0", 170, 1792, fp32=104.8, tf32=104.8, fp16=209.5, bf16=209.5),
    _sku("RTX 5080", r"RTX 5080", "12.0", 84, 960, fp32=56.3, tf32=56.3, fp16=112.6, bf16=112.6),
    # GeForce RTX 4090 / 4080 (NVIDIA Ada GPU architecture whitepaper, 2022)
    _sku("RTX 4090", r"RTX 4090", "8.9", 128, 1008, fp32=82.6, tf32=82.6, fp16=165.2, bf16=165.2, fp8=330.3),
    _sku("RTX 4080", r"RTX 4080", "8.9", 76, 716.8, fp32=48.7, tf32=48.7, fp16=97.5, bf16=97.5, fp8=194.9),
    # GeForce RTX 3090 / 3080 (NVIDIA Ampere GA102 GPU architecture whitepaper, 2020)
    _sku("RTX 3090", r"RTX 3090", "8.6", 82, 936, fp32=35.6, tf32=35.6, fp16=71, bf16=71, int8=284),
    _sku("RTX 3080", r"RTX 3080", "8.6", 68, 760, fp32=29.8, tf32=29.8, fp16=59.5, bf16=59.5, int8=238),
    # GeForce RTX 2080 Ti Founders Edition (NVIDIA Turing GPU architecture whitepaper, 2018)
    _sku("RTX 2080 Ti", r"RTX 2080 Ti", "7.5", 68, 616, fp32=14.2, fp16=56.9, int8=227.7),
]
