"""The peaks a report's ops compare with: dense TFLOP/s per precision and memory bandwidth of its GPU.

Where the report records the device's facts (SM count, SM clock, compute capability: the
dataset's ``devices`` columns), peaks are derived from them with the per-architecture rates of
:mod:`nvbridge.gpu.arch`, so a GPU nobody listed still gets them. Where the device name matches a
datasheet row (:mod:`nvbridge.gpu.skus`) with the same SM count, the datasheet's figures are used
and the derivation checks them; a report with a name and no facts gets the datasheet's alone.
The bandwidth the report records replaces the datasheet's. ``--peak-tflops`` / ``--peak-gbps``
override any of this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from nvbridge.gpu.arch import arch_of, derive, is_geforce, parse_cc
from nvbridge.gpu.skus import SKUS, Sku

PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "fp4", "int8")
SHOWN = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "fp4")  # the floating-point rates printed
# Where a GPU lacks these, its ops in them run on the FP32 units (torch converts or emulates).
_AT_FP32 = ("tf32", "fp16", "bf16")
# Rows describe desktop and server parts: a laptop part shares their name, not their figures.
_MOBILE = re.compile(r"laptop|mobile|max-q", re.IGNORECASE)
_COMPILED = [(re.compile(s.pattern, re.IGNORECASE), s) for s in SKUS]


@dataclass(frozen=True, slots=True)
class Facts:
    """What a report records about one device (a row of the dataset's ``devices`` table)."""

    name: str | None = None
    memory_gbps: float | None = None
    sm_count: int | None = None
    clock_mhz: float | None = None  # the maximum SM clock the driver reports
    compute_capability: str | None = None
    chip: str | None = None


@dataclass(frozen=True, slots=True)
class Peaks:
    """One GPU's peaks: TFLOP/s per precision (None: not offered or not known) and GB/s."""

    name: str
    gbps: float | None
    fp64: float | None = None
    fp32: float | None = None
    tf32: float | None = None
    fp16: float | None = None
    bf16: float | None = None
    fp8: float | None = None
    fp4: float | None = None
    int8: float | None = None
    gbps_source: str = "datasheet"
    flops_source: str = "datasheet"  # where the TFLOP/s come from (a datasheet, a derivation, --peak-tflops)

    def effective(self, precision: str) -> tuple[str, float | None]:
        """The precision an op in ``precision`` runs at on this GPU and its peak: its own, or
        fp32 for tf32/fp16/bf16 on a GPU without them (Turing's tf32, Volta's bf16); fp32 for a
        name nvbridge.engine.costs.flops does not know."""
        p = precision if precision in PRECISIONS else "fp32"
        value: float | None = getattr(self, p)
        if value is None and p in _AT_FP32 and self.fp32 is not None:
            return "fp32", self.fp32
        return p, value

    def tflops(self, precision: str) -> float | None:
        """Peak TFLOP/s for a precision (nvbridge.engine.costs.flops.PRECISION names), as :meth:`effective`."""
        return self.effective(precision)[1]

    def rates(self) -> dict[str, float]:
        """The floating-point precisions this GPU offers, with their TFLOP/s."""
        return {p: v for p in SHOWN if (v := getattr(self, p))}

    def text(self) -> str:
        """``fp32 15.7, fp16 125 TFLOP/s; 898 GB/s (report)``: never an empty figure."""
        rates = ", ".join(f"{p} {fmt(v)}" for p, v in self.rates().items())
        compute = f"{rates} TFLOP/s" if rates else f"compute peak unknown ({self.flops_source})"
        memory = f"{self.gbps:.0f} GB/s ({self.gbps_source})" if self.gbps else "memory bandwidth unknown"
        return f"{compute}; {memory}"


def fmt(value: float) -> str:
    """3 significant digits, 0.1 above 100 (a datasheet's 494.5 stays 494.5)."""
    return f"{round(value, 1):g}" if value >= 100 else f"{value:.3g}"


def _sku(device_name: str | None) -> Sku | None:
    if not device_name or _MOBILE.search(device_name):
        return None
    return next((sku for pattern, sku in _COMPILED if pattern.search(device_name)), None)


def _row(sku: Sku) -> dict[str, float]:
    return {k: v for k, v in sku.figures.items() if k != "gbps"}


def lookup(device_name: str | None) -> Peaks | None:
    """The datasheet peaks of a reported device name; None when no row matches."""
    sku = _sku(device_name)
    return (
        None
        if sku is None
        else Peaks(sku.name, sku.figures["gbps"], **_row(sku), gbps_source="datasheet", flops_source="datasheet")
    )


def _derived(facts: Facts) -> tuple[dict[str, float], str] | None:
    """TFLOP/s derived from the recorded facts, and how; None where a fact is missing."""
    cc = parse_cc(facts.compute_capability)
    if cc is None or not facts.sm_count or not facts.clock_mhz:
        return None
    figures = derive(cc, facts.sm_count, facts.clock_mhz, facts.name, facts.chip)
    arch = arch_of(cc, facts.name, facts.chip)
    if figures is None or arch is None:
        return None
    how = (
        f"{facts.sm_count} SMs x {facts.clock_mhz:.0f} MHz (the recorded max clock) x {arch.name} {cc[0]}.{cc[1]} rates"
    )
    if arch.geforce_half and is_geforce(facts.name):
        how += " (GeForce: half-rate FP32 accumulation)"
    return figures, how


def _agreement(datasheet: dict[str, float], derived: dict[str, float]) -> str:
    """How the derivation compares with the datasheet, on the precisions both give."""
    both = [p for p in PRECISIONS if p in datasheet and p in derived]
    worst = max(both, key=lambda p: abs(derived[p] / datasheet[p] - 1), default=None)
    if worst is None:
        return ""
    off = derived[worst] / datasheet[worst] - 1
    if abs(off) < 0.05:
        return f"; the report's SMs and clock agree within {max(abs(off) * 100, 1):.0f}%"
    return f"; the report's SMs and clock give {worst} {fmt(derived[worst])} ({off * 100:+.0f}%)"


def from_facts(facts: Facts) -> Peaks | None:
    """The peaks a report's facts give (no overrides); None when they give no TFLOP/s."""
    derived = _derived(facts)
    sku = _sku(facts.name)
    if sku is not None and (
        (facts.sm_count and sku.sms != facts.sm_count)
        or (facts.compute_capability and facts.compute_capability != sku.cc)
    ):
        sku = None  # another configuration under that name (MIG slice, variant): its facts win
    gbps = facts.memory_gbps if facts.memory_gbps and facts.memory_gbps > 0 else None
    if sku is not None:
        sheet = _row(sku)
        figures = {**(derived[0] if derived else {}), **sheet}
        source = f"datasheet {sku.name}" + (_agreement(sheet, derived[0]) if derived else "")
        name, gbps_source = sku.name, "report" if gbps else "datasheet"
        gbps = gbps or sku.figures["gbps"]
    elif derived is not None:
        figures, source = derived
        name, gbps_source = facts.name or "GPU", "report"
    else:
        return None
    return Peaks(name, gbps, **figures, gbps_source=gbps_source, flops_source=source)


def resolve(
    device_name: str | None = None,
    peak_tflops: float | None = None,
    peak_gbps: float | None = None,
    recorded_gbps: float | None = None,
    facts: Facts | None = None,
) -> Peaks | None:
    """The device's peaks (:func:`from_facts`; ``facts`` default to the name and recorded
    bandwidth alone), with the user's overrides (TFLOP/s for every precision, GB/s) over them;
    None when nothing gives a figure."""
    if facts is None:
        facts = Facts(name=device_name, memory_gbps=recorded_gbps)
    found = from_facts(facts)
    recorded = facts.memory_gbps if facts.memory_gbps and facts.memory_gbps > 0 else None
    if peak_tflops is None and peak_gbps is None and (found is not None or recorded is None):
        return found
    base = found or Peaks(facts.name or "GPU", recorded, gbps_source="report", flops_source=_why_unknown(facts))
    flops = {p: peak_tflops if peak_tflops is not None else getattr(base, p) for p in PRECISIONS}
    gbps, gbps_source = (peak_gbps, "--peak-gbps") if peak_gbps is not None else (base.gbps, base.gbps_source)
    source = "--peak-tflops" if peak_tflops is not None else base.flops_source
    return Peaks(base.name, gbps, **flops, gbps_source=gbps_source, flops_source=source)


def _why_unknown(facts: Facts) -> str:
    cc = parse_cc(facts.compute_capability)
    if cc is not None and arch_of(cc) is None:
        return f"compute capability {cc[0]}.{cc[1]} is not in nvbridge's table; give --peak-tflops"
    return "no SM count, clock and compute capability known for it; give --peak-tflops"


def device_facts(devices: pa.Table, device_id: int | None) -> Facts:
    """The facts of ``device_id`` in a dataset's ``devices`` table (columns a dataset written
    before they existed lacks read as unknown)."""
    if device_id is None or "device_id" not in devices.column_names:
        return Facts()
    ids = devices.column("device_id").to_pylist()
    if device_id not in ids:
        return Facts()
    at = ids.index(device_id)

    def get(column: str) -> object:
        return devices.column(column)[at].as_py() if column in devices.column_names else None

    sm, clock, gbps = get("sm_count"), get("sm_clock_mhz"), get("memory_gbps")
    return Facts(
        name=None if get("name") is None else str(get("name")),
        memory_gbps=float(gbps) if isinstance(gbps, (int, float)) else None,
        sm_count=int(sm) if isinstance(sm, int) else None,
        clock_mhz=float(clock) if isinstance(clock, (int, float)) else None,
        compute_capability=None if get("compute_capability") is None else str(get("compute_capability")),
        chip=None if get("chip") is None else str(get("chip")),
    )
