"""The ``devices`` table every reader returns: one row per device id, with the facts peaks are
derived from (nvbridge.gpu.peaks). Units are converted here, once, from what each profiler records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from nvbridge.readers.raw import DEVICES_SCHEMA


def _number(value: Any) -> float | None:
    """A positive number, else None (drivers write 0 for what they do not know; text is damage)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def clock_mhz(value: Any) -> float | None:
    """An SM clock in MHz from Hz (nsys TARGET_INFO_GPU), kHz (CUPTI, TARGET_INFO_CUDA_GPU) or MHz:
    a GPU clock lies between 100 MHz and 10 GHz, so the three ranges cannot be confused and a
    unit changed by a future export still reads right."""
    v = _number(value)
    if v is None:
        return None
    mhz = v / 1e6 if v > 3e7 else v / 1e3 if v > 3e4 else v
    return mhz if 100 <= mhz <= 10_000 else None


def gbps(value: Any, bytes_per_unit: float) -> float | None:
    """A bandwidth in GB/s from a count of ``bytes_per_unit``-byte units per second; None for 0
    and for figures no memory has (under 1 GB/s or over 100 TB/s: a unit the export changed)."""
    v = _number(value)
    if v is None:
        return None
    out = v * bytes_per_unit / 1e9
    return out if 1 <= out <= 100_000 else None


def compute_capability(major: Any, minor: Any) -> str | None:
    if not isinstance(major, int) or not isinstance(minor, int) or major <= 0 or minor < 0:
        return None
    return f"{major}.{minor}"


def sm_count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def devices_table(rows: Sequence[Sequence[Any]]) -> pa.Table:
    """Rows of (device_id, name, memory_gbps, sm_count, sm_clock_mhz, compute_capability, chip),
    already in those units, as the table; the first row of a device id repeated is kept."""
    seen: set[int] = set()
    kept = []
    for row in rows:
        if row[0] not in seen:
            seen.add(row[0])
            kept.append(row)
    columns: list[Sequence[Any]] = list(zip(*kept)) if kept else [[] for _ in DEVICES_SCHEMA]
    return pa.table([pa.array(list(c), f.type) for c, f in zip(columns, DEVICES_SCHEMA)], schema=DEVICES_SCHEMA)
