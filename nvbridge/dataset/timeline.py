"""Time windows over a report: ProfilerStep windows, overlap filters and first/last event times.

One home for what ``trace`` and ``plot`` both cut by: a step's window comes from the
``ProfilerStep#N`` ranges (written by ``nvbridge.emit_nvtx(...).step()`` or torch.profiler), and a
row is in a window when it overlaps it (``end >= start_ns`` and ``start <= end_ns``, ends included).
Everything is columnar and works on a whole table or on one chunk of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import merged_intervals, np_col
from nvbridge.gpu import cuda_api

STEP_PATTERN = r"^ProfilerStep#(?P<n>\d+)$"


def step_numbers(names: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """N of each ``ProfilerStep#N`` name, -1 for any other name (dictionary arrays are matched
    on their dictionary, once per distinct name)."""
    if isinstance(names, pa.ChunkedArray):
        names = names.combine_chunks()
    if pa.types.is_dictionary(names.type):
        numbers = step_numbers(names.dictionary)
        indices = np.asarray(names.indices.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
        out = numbers[indices] if len(numbers) else np.full(len(names), -1, np.int64)
        return np.where(np.asarray(names.is_valid().to_numpy(zero_copy_only=False)), out, -1)
    steps = pc.extract_regex(names.cast(pa.string()), STEP_PATTERN)
    n = pc.struct_field(steps, "n").cast(pa.int64()).fill_null(-1)
    return np.asarray(n.to_numpy(zero_copy_only=False), np.int64)


def step_spans(ops: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N, start_ns, end_ns) of every ``ProfilerStep#N`` range in ``ops`` (a table or a chunk)."""
    n = step_numbers(ops.column("op_name"))
    sel = n >= 0
    return n[sel], np_col(ops, "start_ns")[sel], np_col(ops, "end_ns")[sel]


def step_window_of(spans: tuple[np.ndarray, np.ndarray, np.ndarray], first: int, last: int) -> tuple[int, int]:
    """[start, end] covering steps ``first``..``last`` among ``spans`` (from :func:`step_spans`).

    Raises:
        ValueError: the report has no such steps.
    """
    n, start, end = spans
    if not len(n):
        raise ValueError("the report has no ProfilerStep#N ranges; record with nvbridge.emit_nvtx(...).step()")
    sel = (n >= first) & (n <= last)
    if not sel.any():
        raise ValueError(f"no steps {first}..{last} in the report (it has steps {int(n.min())}..{int(n.max())})")
    return int(start[sel].min()), int(end[sel].max())


def step_window(ops: pa.Table, first: int, last: int) -> tuple[int, int]:
    """[start, end] of ProfilerStep#first .. ProfilerStep#last.

    Raises:
        ValueError: the report has no such steps.
    """
    return step_window_of(step_spans(ops), first, last)


def in_window(
    table: pa.Table, start_ns: int | None, end_ns: int | None, processes: Iterable[int] | None = None
) -> np.ndarray:
    """Mask of the rows overlapping [start_ns, end_ns] (either end open when None) of the given
    host processes (rows without a process are outside any process filter)."""
    keep = np.ones(table.num_rows, bool)
    if start_ns is not None:
        keep &= np_col(table, "end_ns") >= start_ns
    if end_ns is not None:
        keep &= np_col(table, "start_ns") <= end_ns
    if processes is not None:
        keep &= np.isin(np_col(table, "process_id", fill=-1), list(processes))
    return keep


def first_start(tables: Iterable[pa.Table]) -> int | None:
    """Earliest ``start_ns`` over the tables (None when all are empty)."""
    return min((int(pc.min(t.column("start_ns")).as_py()) for t in tables if t.num_rows), default=None)


def last_end(tables: Iterable[pa.Table]) -> int | None:
    """Latest ``end_ns`` over the tables (None when all are empty)."""
    return max((int(pc.max(t.column("end_ns")).as_py()) for t in tables if t.num_rows), default=None)


# ---------------------------------------------------------------------------------------------
# The one timeline: the capture window, each GPU's timeline and its start-up. summary's header,
# advise's span, MFU, plot and trace all take their figures from here.
# ---------------------------------------------------------------------------------------------

# The tables whose rows make the capture window: what the report recorded on the host and GPU.
CAPTURE_TABLES = ("ops", "api_calls", "gpu_ops")


@dataclass(frozen=True, slots=True)
class CaptureWindow:
    """First start to last end over ops, API calls and GPU ops (None: the report is empty)."""

    start_ns: int | None = None
    end_ns: int | None = None

    @property
    def span_ns(self) -> int:
        return 0 if self.start_ns is None or self.end_ns is None else self.end_ns - self.start_ns

    def add(self, chunk: pa.Table) -> CaptureWindow:
        """The window grown to cover a part of a table (its ``start_ns``/``end_ns``)."""
        if not chunk.num_rows:
            return self
        low, high = int(pc.min(chunk.column("start_ns")).as_py()), int(pc.max(chunk.column("end_ns")).as_py())
        return CaptureWindow(
            low if self.start_ns is None else min(self.start_ns, low),
            high if self.end_ns is None else max(self.end_ns, high),
        )


def capture_window(tables: Iterable[pa.Table]) -> CaptureWindow:
    """The capture window of whole tables (or parts of them)."""
    window = CaptureWindow()
    for table in tables:
        window = window.add(table)
    return window


class GpuBounds:
    """Each device's GPU timeline bounds, first GPU op start and last GPU op end, over parts of
    the GPU ops (columns ``device_id``, ``start_ns``, ``end_ns``): the span summary's header,
    plot's idle shading and MFU divide by."""

    COLUMNS = ["device_id", "start_ns", "end_ns"]

    def __init__(self) -> None:
        self.bounds: dict[int, tuple[int, int]] = {}

    def add(self, gpu_ops: pa.Table) -> None:
        dev = np_col(gpu_ops, "device_id", fill=-1)
        s, e = np_col(gpu_ops, "start_ns"), np_col(gpu_ops, "end_ns")
        for d in np.unique(dev).tolist():  # a few devices
            m = dev == d
            lo, hi = int(s[m].min()), int(e[m].max())
            old = self.bounds.get(d, (lo, hi))
            self.bounds[d] = (min(old[0], lo), max(old[1], hi))


@dataclass(frozen=True, slots=True)
class LaneTimeline:
    """One process's work on one GPU (a rank's GPU: a *lane*).

    The GPU timeline runs from the lane's first GPU op start to its last GPU op end: what
    every share (idle, busy, a finding's) divides by. ``startup_ns`` is the time the process
    spent in CUDA calls before its first GPU op on any device (context creation, module
    loading, a first launch that loads code): the process's, the same on each of its lanes,
    reported beside the timeline and never inside it.
    """

    process_id: int
    device_id: int
    start_ns: int
    end_ns: int
    busy_ns: int  # union of the lane's GPU ops (overlapping streams count once)
    startup_ns: int
    gpu_ops: int
    kernels: int

    @property
    def span_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def idle_ns(self) -> int:
        return self.span_ns - self.busy_ns


def owning_process(process: np.ndarray, device: np.ndarray) -> np.ndarray:
    """The process of each GPU op; one without a process (an nvprof op whose API call is not in
    the capture) belongs to the process that used its device, where one process did."""
    out: np.ndarray = np.array(process, np.int64)
    orphan = out < 0
    if not orphan.any():
        return out
    process = out.copy()
    device = np.asarray(device, np.int64)
    for d in np.unique(device[orphan]).tolist():  # a few devices
        users = np.unique(process[(device == d) & ~orphan])
        if len(users) == 1:
            out[orphan & (device == d)] = users[0]
    return out


def startup_calls(names: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """API calls that count as start-up when they run before their process's first GPU op:
    every CUDA call but syncs and copies (those wait for or move data, whenever they run)."""
    cls = cuda_api.classes(names)
    out: np.ndarray = (cls != cuda_api.SYNC) & (cls != cuda_api.SYNC_COPY) & (cls != cuda_api.ASYNC_COPY)
    return out


def startup_before(process: np.ndarray, start: np.ndarray, end: np.ndarray, first: Mapping[int, int]) -> dict[int, int]:
    """Per process, the union of the given calls' time before ``first[process]`` (its first
    GPU op start): the start-up. Calls are clipped there; processes absent from ``first`` ran
    no GPU work and have none."""
    out: dict[int, int] = {}
    for p, f in first.items():
        m = (process == p) & (start < f)
        s, e = merged_intervals(start[m], np.minimum(end[m], f))
        out[p] = int((e - s).sum())
    return out


def lane_timelines(gpu_ops: pa.Table, api_calls: pa.Table) -> list[LaneTimeline]:
    """The GPU timeline of every (process, device) pair with GPU work, sorted by both."""
    if not gpu_ops.num_rows:
        return []
    dev = np_col(gpu_ops, "device_id", fill=-1)
    proc = owning_process(np_col(gpu_ops, "process_id", fill=-1), dev)
    s, e = np_col(gpu_ops, "start_ns"), np_col(gpu_ops, "end_ns")
    kernel = np.asarray(pc.fill_null(pc.equal(gpu_ops.column("kind"), "kernel"), False).to_numpy(zero_copy_only=False))
    pairs = sorted(set(zip(proc.tolist(), dev.tolist())))
    # the first GPU op each process launched (an op with no known process was not seen launched)
    launched = np_col(gpu_ops, "process_id", fill=-1)
    first = {p: int(s[launched == p].min()) for p in np.unique(launched[launched >= 0]).tolist()}
    api_proc = np_col(api_calls, "process_id", fill=-1)
    setup = startup_calls(api_calls.column("name")) if api_calls.num_rows else np.zeros(0, bool)
    before = startup_before(
        api_proc[setup], np_col(api_calls, "start_ns")[setup], np_col(api_calls, "end_ns")[setup], first
    )
    out = []
    for p, d in pairs:
        m = (proc == p) & (dev == d)
        bs, be = merged_intervals(s[m], e[m])
        out.append(
            LaneTimeline(
                p,
                d,
                int(s[m].min()),
                int(e[m].max()),
                int((be - bs).sum()),
                before.get(p, 0),
                int(m.sum()),
                int((m & kernel).sum()),
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Timeline:
    """A report's capture window and its GPU timelines (see :class:`LaneTimeline`)."""

    capture: CaptureWindow
    lanes: tuple[LaneTimeline, ...]

    @property
    def span_ns(self) -> int:
        """The GPU timelines' length, summed over lanes: what shares divide by."""
        return sum(lane.span_ns for lane in self.lanes)

    @property
    def busy_ns(self) -> int:
        return sum(lane.busy_ns for lane in self.lanes)

    @property
    def startup_ns(self) -> int:
        """Start-up before the GPU timelines, summed over processes (each counted once)."""
        return sum({lane.process_id: lane.startup_ns for lane in self.lanes}.values())


def timeline(ops: pa.Table, api_calls: pa.Table, gpu_ops: pa.Table) -> Timeline:
    """The timeline of whole tables (a loaded report's)."""
    return Timeline(capture_window([ops, api_calls, gpu_ops]), tuple(lane_timelines(gpu_ops, api_calls)))


class StartupTally:
    """:func:`startup_before` over API calls read a part at a time (a streamed summary): only the
    few calls before each process's first GPU op are kept."""

    COLUMNS = ["process_id", "name", "start_ns", "end_ns"]

    def __init__(self, first: Mapping[int, int]) -> None:
        self.first = dict(first)
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.until = max(self.first.values(), default=None)  # no later call counts

    def add(self, calls: pa.Table) -> None:
        """One part of the API calls (columns COLUMNS)."""
        if self.until is None or not calls.num_rows:
            return
        start = np_col(calls, "start_ns")
        keep = start < self.until
        if not keep.any():
            return
        keep &= startup_calls(calls.column("name"))
        self._parts.append((np_col(calls, "process_id", fill=-1)[keep], start[keep], np_col(calls, "end_ns")[keep]))

    def result(self) -> dict[int, int]:
        """Start-up ns per process that ran GPU work."""
        parts = self._parts or [(np.zeros(0, np.int64),) * 3]
        process, start, end = (np.concatenate([p[i] for p in parts]) for i in range(3))
        return startup_before(process, start, end, self.first)
