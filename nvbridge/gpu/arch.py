"""Dense peak throughput per streaming multiprocessor and clock, by compute capability: what turns
a report's recorded device facts (SM count, SM clock, compute capability) into peaks for any
NVIDIA GPU, listed or not.

Figures are FLOPs (int8: operations) per clock per SM **without sparsity**, from NVIDIA's
architecture whitepapers (per-SM unit counts: FP32 and FP64 lanes x 2 for an FMA; tensor cores x
their dense FMAs per clock x 2). ``fp16``/``bf16``/``tf32``/``fp8``/``fp4``/``int8`` are the
tensor-core rates where the architecture has tensor cores; ``fp16`` with FP32 accumulation, which
is what PyTorch's matmuls and convolutions use. A precision absent from an architecture's rates
is one it does not offer (Turing has no tf32 or bf16, Volta no bf16, Maxwell no native fp16): an
op in that precision runs at another rate (nvbridge.gpu.peaks.Peaks.effective says which).

Two traps the datasheets hide:

- GeForce parts of GA10x, AD10x and GB20x (and Turing's) run FP16/BF16/TF32/FP8 tensor ops with
  FP32 accumulation at half the rate of the professional parts of the same chip (the whitepapers'
  "with FP32 accumulate" rows); int8 and fp4 are not halved.
- Hopper's and data-centre Blackwell's datasheet tensor figures are at a lower clock than the
  maximum boost clock the driver reports (H100 whitepaper, table 3: 1830 of 1980 MHz on SXM5,
  1620 of 1755 MHz on PCIe), so their tensor rates are scaled by ``tensor_clock``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

TENSOR = frozenset({"tf32", "fp16", "bf16", "fp8", "fp4", "int8"})  # precisions tensor cores run


@dataclass(frozen=True, slots=True)
class Arch:
    """One architecture (one compute capability): dense FLOPs per clock per SM by precision."""

    name: str
    rates: Mapping[str, int]
    geforce_half: frozenset[str] = frozenset()  # precisions a GeForce part runs at half rate
    tensor_clock: float = 1.0  # the datasheets' tensor-core clock / the maximum boost clock


_HALF = frozenset({"tf32", "fp16", "bf16", "fp8"})  # FP32-accumulate ops a GeForce halves

ARCHS: dict[tuple[int, int], Arch] = {
    # Kepler (GK10x; GK110/GK210 for 3.5/3.7): 192 FP32 lanes per SMX, 8 or 64 FP64 lanes
    (3, 0): Arch("Kepler", {"fp32": 384, "fp64": 16}),
    (3, 5): Arch("Kepler", {"fp32": 384, "fp64": 128}),
    (3, 7): Arch("Kepler", {"fp32": 384, "fp64": 128}),
    # Maxwell: 128 FP32 lanes, 4 FP64 lanes per SM; fp16 at twice the fp32 rate only on Tegra X1
    (5, 0): Arch("Maxwell", {"fp32": 256, "fp64": 8}),
    (5, 2): Arch("Maxwell", {"fp32": 256, "fp64": 8}),
    (5, 3): Arch("Maxwell", {"fp32": 256, "fp64": 8, "fp16": 512}),
    # Pascal: GP100 64 FP32 + 32 FP64 lanes, fp16x2; GP10x 128 FP32 lanes, fp16 at 1/64 (left out:
    # PyTorch's half matmuls accumulate in FP32 there, at the fp32 rate)
    (6, 0): Arch("Pascal", {"fp32": 128, "fp64": 64, "fp16": 256}),
    (6, 1): Arch("Pascal", {"fp32": 256, "fp64": 8}),
    (6, 2): Arch("Pascal", {"fp32": 256, "fp64": 8, "fp16": 512}),
    # Volta: 64 FP32 + 32 FP64 lanes, 8 tensor cores x 64 FMA (fp16 in, fp16 or fp32 accumulate)
    (7, 0): Arch("Volta", {"fp64": 64, "fp32": 128, "fp16": 1024}),
    (7, 2): Arch("Volta (Xavier)", {"fp32": 128, "fp16": 1024, "int8": 2048}),
    # Turing: 64 FP32 + 2 FP64 lanes, 8 tensor cores x 64 FMA fp16 (x2 int8); no tf32, no bf16
    (7, 5): Arch("Turing", {"fp64": 4, "fp32": 128, "fp16": 1024, "int8": 2048}, geforce_half=_HALF),
    # Ampere GA100: 64 FP32 + 32 FP64 lanes, 4 tensor cores x 256 FMA fp16
    (8, 0): Arch("Ampere", {"fp64": 64, "fp32": 128, "tf32": 1024, "fp16": 2048, "bf16": 2048, "int8": 4096}),
    # Ampere GA10x: 128 FP32 lanes, 2 FP64 lanes, 4 tensor cores x 128 FMA fp16
    (8, 6): Arch(
        "Ampere", {"fp64": 4, "fp32": 256, "tf32": 512, "fp16": 1024, "bf16": 1024, "int8": 2048}, geforce_half=_HALF
    ),
    # Orin (GA10B): GA10x FP32 lanes, GA100-class tensor cores (no FP64 figure published)
    (8, 7): Arch("Ampere (Orin)", {"fp32": 256, "tf32": 1024, "fp16": 2048, "bf16": 2048, "int8": 4096}),
    # Ada: GA10x lanes, 4th-generation tensor cores adding fp8
    (8, 9): Arch(
        "Ada",
        {"fp64": 4, "fp32": 256, "tf32": 512, "fp16": 1024, "bf16": 1024, "fp8": 2048, "int8": 2048},
        geforce_half=_HALF,
    ),
    # Hopper: 128 FP32 + 64 FP64 lanes, 4 tensor cores x 512 FMA fp16
    (9, 0): Arch(
        "Hopper",
        {"fp64": 128, "fp32": 256, "tf32": 2048, "fp16": 4096, "bf16": 4096, "fp8": 8192, "int8": 8192},
        tensor_clock=1830 / 1980,
    ),
    # Blackwell (B100/B200): twice Hopper's tensor rate per SM, fp4 twice fp8
    (10, 0): Arch(
        "Blackwell",
        {
            "fp64": 128,
            "fp32": 256,
            "tf32": 4096,
            "fp16": 8192,
            "bf16": 8192,
            "fp8": 16384,
            "fp4": 32768,
            "int8": 16384,
        },
        tensor_clock=0.93,
    ),
    # Blackwell Ultra (B300): B200's rates but fp4 1.5x; FP64 and int8 cut (no figure kept)
    (10, 3): Arch(
        "Blackwell Ultra",
        {"fp32": 256, "tf32": 4096, "fp16": 8192, "bf16": 8192, "fp8": 16384, "fp4": 49152},
        tensor_clock=0.93,
    ),
    # Blackwell GB20x (GeForce RTX 50, RTX PRO): Ada's lanes and tensor rates plus fp4
    (12, 0): Arch(
        "Blackwell",
        {"fp64": 4, "fp32": 256, "tf32": 512, "fp16": 1024, "bf16": 1024, "fp8": 2048, "fp4": 4096, "int8": 2048},
        geforce_half=_HALF,
    ),
}
# Turing chips without tensor cores (GTX 16xx, MX450/550, T400-T1000): fp16x2 at twice the fp32 rate
TURING_NO_TENSOR = Arch("Turing (no tensor cores)", {"fp64": 4, "fp32": 128, "fp16": 256})
_NO_TENSOR_CHIPS = re.compile(r"^TU11[67]", re.IGNORECASE)
_NO_TENSOR_NAMES = re.compile(r"\bGTX 16\d\d|\bMX\s?[45]\d0\b|\bT(400|500|550|600|1000|1200)\b|Quadro T\d", re.I)
_GEFORCE = re.compile(r"\bGeForce\b", re.IGNORECASE)


def parse_cc(text: str | None) -> tuple[int, int] | None:
    """``"8.9"`` -> (8, 9); None for anything else."""
    match = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def arch_of(cc: tuple[int, int], name: str | None = None, chip: str | None = None) -> Arch | None:
    """The architecture of a compute capability (a minor version the table lacks takes the
    nearest lower one of its major: 8.8 would be read as 8.7); None for a major it lacks."""
    if cc == (7, 5) and (_NO_TENSOR_CHIPS.match(chip or "") or _NO_TENSOR_NAMES.search(name or "")):
        return TURING_NO_TENSOR
    known = [k for k in ARCHS if k[0] == cc[0] and k[1] <= cc[1]]
    return ARCHS[max(known)] if known else None


def is_geforce(name: str | None) -> bool:
    """GeForce parts (TITANs are not: they run FP32 accumulation at the full rate)."""
    return bool(_GEFORCE.search(name or ""))


def derive(
    cc: tuple[int, int], sm_count: int, clock_mhz: float, name: str | None = None, chip: str | None = None
) -> dict[str, float] | None:
    """Dense peak TFLOP/s (TOPS for int8) per precision of a GPU with ``sm_count`` SMs at
    ``clock_mhz`` (the maximum SM clock the driver reports); None for an architecture the table
    lacks or facts that cannot be a GPU's."""
    arch = arch_of(cc, name, chip)
    if arch is None or sm_count <= 0 or not 100 <= clock_mhz <= 10_000:
        return None
    half = arch.geforce_half if is_geforce(name) else frozenset()
    out = {}
    for precision, per_clock in arch.rates.items():
        scale = (arch.tensor_clock if precision in TENSOR else 1.0) * (0.5 if precision in half else 1.0)
        out[precision] = per_clock * scale * sm_count * clock_mhz * 1e6 / 1e12
    return out
