"""The GPU header of a summary: per device, busy time, idle share, kernels and copy volume."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from nvbridge.columns import merged_intervals, np_col


@dataclass(frozen=True, slots=True)
class GpuHeader:
    """One device of one report. ``busy_ns`` is the union of its GPU ops' intervals,
    ``summed_ns`` their summed durations (overlapping streams count twice), ``attributed_ns``
    the part launched inside an op."""

    device_id: int
    name: str | None
    busy_ns: int
    span_ns: int
    idle_share: float
    kernels: int
    gpu_ops: int
    summed_ns: int
    attributed_ns: int
    memcpy_bytes: Mapping[str, int]  # by copy direction (HtoD, DtoH, ...)
    report: str | None = None  # the report's source, where the header covers several reports


def busy_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of [start, end) intervals: time the GPU was doing anything."""
    s, e = merged_intervals(start, end)
    return int((e - s).sum())


def gpu_header(gpu_ops: pa.Table, devices: pa.Table, report: str | None = None) -> list[GpuHeader]:
    """Per device with GPU ops, in device order."""
    out = []
    dev = np_col(gpu_ops, "device_id", fill=-1)
    kinds = np.asarray(gpu_ops.column("kind").to_numpy(zero_copy_only=False))
    s, e = np_col(gpu_ops, "start_ns"), np_col(gpu_ops, "end_ns")
    copy = np.asarray(gpu_ops.column("copy_kind").fill_null("").to_numpy(zero_copy_only=False))
    nbytes = np_col(gpu_ops, "bytes", fill=0)
    attributed = np_col(gpu_ops, "op_id", fill=-1) >= 0
    names = dict(zip(np_col(devices, "device_id", fill=-1).tolist(), devices.column("name").to_pylist()))
    for d in np.unique(dev):
        m = dev == d
        span = int(e[m].max() - s[m].min())
        busy = busy_ns(s[m], e[m])
        is_copy = m & (kinds == "memcpy")
        copies = {k: int(nbytes[is_copy & (copy == k)].sum()) for k in sorted(set(copy[is_copy]))}
        out.append(
            GpuHeader(
                device_id=int(d),
                name=names.get(int(d)),
                busy_ns=busy,
                span_ns=span,
                idle_share=1.0 - busy / span if span else 0.0,
                kernels=int((m & (kinds == "kernel")).sum()),
                gpu_ops=int(m.sum()),
                summed_ns=int((e[m] - s[m]).sum()),
                attributed_ns=int((e[m] - s[m])[attributed[m]].sum()),
                memcpy_bytes=copies,
                report=report,
            )
        )
    return out
