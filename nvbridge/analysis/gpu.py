"""The GPU header of a summary: per device, busy time, idle share, kernels and copy volume.

The figures follow the one timeline (nvbridge.dataset.timeline): a device's span runs from its first
GPU op start to its last GPU op end, busy time is the union of its GPU ops, and the start-up
its processes spent in CUDA calls before their first GPU op is reported beside the span.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import merged_intervals, np_col
from nvbridge.dataset.timeline import GpuBounds, StartupTally


@dataclass(frozen=True, slots=True)
class GpuHeader:
    """One device of one report. ``busy_ns`` is the union of its GPU ops' intervals,
    ``summed_ns`` their summed durations (overlapping streams count twice), ``attributed_ns``
    the part launched inside an op."""

    device_id: int
    name: str | None
    busy_ns: int
    span_ns: int  # first GPU op start to last GPU op end (nvbridge.dataset.timeline)
    idle_share: float
    kernels: int
    gpu_ops: int
    summed_ns: int
    attributed_ns: int
    memcpy_bytes: Mapping[str, int]  # by copy direction (HtoD, DtoH, ...)
    report: str | None = None  # the report's source, where the header covers several reports
    start_ns: int = 0  # the span's start and end
    end_ns: int = 0
    startup_ns: int = 0  # CUDA calls of its processes before their first GPU op: not in the span


def _is(kind: pa.ChunkedArray | pa.Array, value: str) -> np.ndarray:
    """Rows whose ``kind`` is ``value`` (compared by Arrow, not one Python string a row)."""
    equal = pc.fill_null(pc.equal(kind, value), False)
    return np.asarray(equal.to_numpy(zero_copy_only=False), bool)


def busy_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of [start, end) intervals: time the GPU was doing anything."""
    s, e = merged_intervals(start, end)
    return int((e - s).sum())


def gpu_header(
    gpu_ops: pa.Table, devices: pa.Table, report: str | None = None, api_calls: pa.Table | None = None
) -> list[GpuHeader]:
    """Per device with GPU ops, in device order (start-up from ``api_calls``, 0 without)."""
    tally = GpuTally()
    tally.add(gpu_ops)
    startup = tally.startup()
    if api_calls is not None:
        startup.add(api_calls)
    return tally.headers(devices, report, startup.result())


class GpuTally:
    """The GPU header's sums over a report's GPU ops, added a part at a time (a dataset's row
    groups), so the GPU ops are never held whole; also what ``[no op]``, the peaks' device and
    MFU need of them."""

    COLUMNS = ["op_id", "kind", "device_id", "process_id", "start_ns", "end_ns", "bytes", "copy_kind"]

    def __init__(self) -> None:
        self.first_launched: dict[int, int] = {}  # process -> its first GPU op's start
        self.bounds = GpuBounds()  # device -> (first GPU op start, last GPU op end)
        self.processes: dict[int, set[int]] = {}  # device -> processes with GPU ops on it
        self.counts: dict[int, list[int]] = {}  # device -> [GPU ops, kernels, summed, attributed]
        self.unattributed: dict[int, list[int]] = {}  # device -> [GPU ops no op launched, their ns]
        self._copies: dict[int, dict[str, int]] = {}
        # Busy time: the union of the intervals seen, kept as disjoint intervals; those ending
        # before every later part starts can no longer grow and are only counted.
        self._busy: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._busy_done: dict[int, int] = {}

    def add(self, gpu_ops: pa.Table, later_start: int | None = None) -> None:
        """Count one part (columns COLUMNS); ``later_start``: no later part starts before it
        (None: unknown)."""
        dev = np_col(gpu_ops, "device_id", fill=-1)
        kernel, memcpy = (_is(gpu_ops.column("kind"), k) for k in ("kernel", "memcpy"))
        s, e = np_col(gpu_ops, "start_ns"), np_col(gpu_ops, "end_ns")
        # Copy directions and sizes of the memcpy rows only (a few in a thousand GPU ops).
        copy = np.asarray(
            gpu_ops.column("copy_kind").filter(pa.array(memcpy)).fill_null("").to_numpy(zero_copy_only=False)
        )
        nbytes = np_col(gpu_ops, "bytes", fill=0)[memcpy]
        attributed = np_col(gpu_ops, "op_id", fill=-1) >= 0
        self.bounds.add(gpu_ops)
        proc = np_col(gpu_ops, "process_id", fill=-1)
        for p in np.unique(proc[proc >= 0]).tolist():
            low = int(s[proc == p].min())
            self.first_launched[p] = min(self.first_launched.get(p, low), low)
        for d in np.unique(dev).tolist():
            m = dev == d
            dur = e[m] - s[m]
            c = self.counts.setdefault(d, [0, 0, 0, 0])
            c[0] += int(m.sum())
            c[1] += int((m & kernel).sum())
            c[2] += int(dur.sum())
            c[3] += int(dur[attributed[m]].sum())
            outside = self.unattributed.setdefault(d, [0, 0])
            outside[0] += int((~attributed[m]).sum())
            outside[1] += int(dur[~attributed[m]].sum())
            self._add_busy(d, s[m], e[m])
            self.processes.setdefault(d, set()).update(np.unique(proc[m & (proc >= 0)]).tolist())
            mine = m[memcpy]
            copies = self._copies.setdefault(d, {})
            for k in set(copy[mine].tolist()):
                copies[k] = copies.get(k, 0) + int(nbytes[mine & (copy == k)].sum())
        if later_start is not None:
            for d, (bs, be) in self._busy.items():
                done = be < later_start
                self._busy_done[d] = self._busy_done.get(d, 0) + int((be[done] - bs[done]).sum())
                self._busy[d] = bs[~done], be[~done]

    def _add_busy(self, device: int, start: np.ndarray, end: np.ndarray) -> None:
        if device in self._busy:
            start, end = np.concatenate([self._busy[device][0], start]), np.concatenate([self._busy[device][1], end])
        self._busy[device] = merged_intervals(start, end)

    def startup(self) -> StartupTally:
        """What counts the start-up, from the API calls, once every GPU op was added."""
        return StartupTally(self.first_launched)

    def headers(
        self, devices: pa.Table, report: str | None = None, startup: Mapping[int, int] | None = None
    ) -> list[GpuHeader]:
        """Per device with GPU ops, in device order; ``startup``: ns per process
        (:meth:`startup`)."""
        names = dict(zip(np_col(devices, "device_id", fill=-1).tolist(), devices.column("name").to_pylist()))
        out = []
        for d in sorted(self.counts):
            n, kernels, summed, attributed = self.counts[d][:4]
            first, last = self.bounds.bounds[d]
            busy = self._busy_done.get(d, 0) + busy_ns(*self._busy[d])
            span = last - first
            out.append(
                GpuHeader(
                    device_id=d,
                    name=names.get(d),
                    busy_ns=busy,
                    span_ns=span,
                    idle_share=1.0 - busy / span if span else 0.0,
                    kernels=kernels,
                    gpu_ops=n,
                    summed_ns=summed,
                    attributed_ns=attributed,
                    memcpy_bytes=dict(sorted(self._copies[d].items())),
                    report=report,
                    start_ns=first,
                    end_ns=last,
                    startup_ns=sum((startup or {}).get(p, 0) for p in self.processes.get(d, ())),
                )
            )
        return out

    def no_op(self, device: int | None = None) -> tuple[int, int]:
        """(calls, ns) of the GPU ops (of ``device``) no op launched."""
        parts = [v for d, v in self.unattributed.items() if device is None or d == device]
        return sum(p[0] for p in parts), sum(p[1] for p in parts)
