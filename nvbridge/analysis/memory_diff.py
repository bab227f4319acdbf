"""diff's memory part: each device's peak allocated in A and B, and the gate on it
(``--fail-above peak_memory=10%``). The per-op deltas are the op rows' own
``self_cpu_memory_usage`` / ``self_cuda_memory_usage`` sums (nvbridge.analysis.diff.OP_SUMS)."""

from __future__ import annotations

from dataclasses import dataclass

from nvbridge.analysis.memory import memory_peaks
from nvbridge.dataset.schema import ReportTables

GATE = "peak_memory"  # the --fail-above key that gates on it


@dataclass(frozen=True, slots=True)
class PeakDelta:
    """A device's peak allocated bytes in A and B (None where a side recorded none on it)."""

    device: str
    a_bytes: int | None
    b_bytes: int | None


def device_peaks(report: ReportTables) -> dict[str, int]:
    """Peak allocated bytes per device (empty without memory events)."""
    return {p.device: p.peak.peak_allocated_bytes for p in memory_peaks(report)}


def merged_peaks(sides: list[dict[str, int]]) -> dict[str, int]:
    """The reports of a partitioned dataset: per device the highest any of them reached (the
    one that runs out first)."""
    out: dict[str, int] = {}
    for side in sides:
        for device, nbytes in side.items():
            out[device] = max(out.get(device, 0), nbytes)
    return out


def peak_deltas(a: dict[str, int], b: dict[str, int]) -> tuple[PeakDelta, ...]:
    """Every device either side has, in name order."""
    return tuple(PeakDelta(d, a.get(d), b.get(d)) for d in sorted(set(a) | set(b)))


def peak_regressions(deltas: tuple[PeakDelta, ...], bound: float) -> list[str]:
    """The devices whose peak grew by more than ``bound`` (0.1: 10%)."""
    return [
        f"peak memory {d.device} {100 * (d.b_bytes / d.a_bytes - 1):+.1f}%"
        for d in deltas
        if d.a_bytes and d.b_bytes is not None and d.b_bytes > d.a_bytes * (1 + bound)
    ]
