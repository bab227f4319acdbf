"""What ``nvbridge plot`` draws of a window, decimated to the pixel.

A picture some 1,800 pixels wide cannot show more than one bar per pixel on a row, however many
ops the window holds: drawing one matplotlib patch per op (or per idle gap) cost 90 s and 670 MB
for 25k GPU ops. Here each row's bars (a host thread's ops at one nesting depth, its CUDA API
calls, a GPU stream's ops of one kind) are rasterized to the pixel columns, a row group at a
time and columnar (counts of bars starting and ending per column, no sort), and drawn as the
runs of covered columns: a row holds at most one bar per two columns, so the drawing costs the
same for a thousand ops as for ten million. GPU idle time is measured exactly per pixel
column (the union of the device's ops over every stream, inside its GPU timeline) and shaded by
the share of the column the GPU was idle: thousands of gaps too thin to see add up to the idle
share they are, rather than vanishing under merged bars.

Memory holds one row group, a count per row and pixel column and, per device, the union of the
GPU ops that later row groups may still overlap (row-group statistics say which cannot).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import dense_ids, merged_intervals, np_col
from nvbridge.dataset.report import DatasetTables

MAX_DEPTH = 6  # nesting levels drawn per host lane; deeper ops are folded into the last one
LABELS = 12  # longest ops labelled
FILL_STEPS = 4  # GPU bars are drawn at 1/4, 2/4, 3/4 or full opacity, by how busy their columns were
KINDS = ("kernel", "memcpy", "memset", "graph")  # GPU op kinds by code; any other kind is len(KINDS)
COLUMNS = {
    "ops": ["process_id", "thread_id", "depth", "op_name", "start_ns", "end_ns"],
    "api_calls": ["process_id", "thread_id", "start_ns", "end_ns"],
    "gpu_ops": ["device_id", "stream_id", "kind", "name", "start_ns", "end_ns"],
}
BUSY_COLUMNS = ["device_id", "start_ns", "end_ns"]


@dataclass(frozen=True)
class Bars:
    """One layer's bars, runs of covered pixel columns: ``key`` indexes ``keys`` (the row: (pid,
    tid, depth) for ops, (pid, tid) for API calls, (device, stream, kind code) for GPU ops); a
    bar covers columns [x0, x1)."""

    keys: tuple[tuple[int, ...], ...]
    key: np.ndarray
    x0: np.ndarray
    x1: np.ndarray
    alpha: np.ndarray | None = None  # GPU ops: the share of the bar's columns they filled (in steps)


@dataclass(frozen=True)
class Label:
    """One of the longest ops: its span in the window (ns), its name and the row it is on."""

    ns: int
    start_ns: int
    end_ns: int
    name: str
    host: bool
    row: tuple[int, int, int]  # (pid, tid, depth) or (device, stream, 0)


@dataclass(frozen=True)
class Pixels:
    """The window decimated to ``width`` pixel columns of ``edges`` (ns, ``width + 1`` of them)."""

    width: int
    edges: np.ndarray
    ops: Bars
    api: Bars
    gpu: Bars
    busy_ns: Mapping[int, np.ndarray]  # device -> GPU busy ns per column (inside its GPU timeline)
    timeline_ns: Mapping[int, np.ndarray]  # device -> ns of each column inside its GPU timeline
    labels: tuple[Label, ...] = field(default=())

    def idle_share(self, device: int) -> np.ndarray:
        """Per column, the share of its time inside the device's GPU timeline that the GPU was
        idle (0 where the column lies outside that timeline)."""
        span = self.timeline_ns[device]
        idle = span - self.busy_ns[device]
        out: np.ndarray = np.divide(idle, span, out=np.zeros(len(span)), where=span > 0)
        return out


class _Layer:
    """One layer's bars, rasterized to the pixel columns: per row, how many bars begin and end
    in each column (added up row group by row group, never sorted), turned into runs of covered
    columns at the end. A bar covers every column it touches, so an op shorter than a pixel
    still shows as one; two bars less than a column apart merge. With ``timed``, also the time
    each row spends in each column (in columns), to colour a column by what filled most of it."""

    def __init__(self, width: int, timed: bool = False) -> None:
        self.width = width
        self.timed = timed
        self.ids: dict[tuple[int, ...], int] = {}
        self.edges = np.zeros((0, width + 1), np.int64)  # per row: +1 where a bar starts, -1 past its end
        self.part = np.zeros((0, width + 1), np.float64)  # per row: time in the columns bars end in
        self.full = np.zeros((0, width + 1), np.int64)  # per row: +1/-1 around the columns bars fill

    def add(self, columns: Sequence[np.ndarray], x0: np.ndarray, x1: np.ndarray) -> None:
        if not len(x0):
            return
        local, _ = dense_ids(*columns)
        _, first = np.unique(local, return_index=True)  # one row per distinct key (a few)
        ids = np.array([self._id(tuple(int(c[i]) for c in columns)) for i in first.tolist()], np.int64)
        if len(self.ids) > len(self.edges):
            more = np.zeros((len(self.ids) - len(self.edges), self.width + 1), np.int64)
            self.edges, self.full = np.vstack([self.edges, more]), np.vstack([self.full, more])
            self.part = np.vstack([self.part, more.astype(np.float64)])
        c0 = np.clip(np.floor(x0), 0, self.width - 1).astype(np.int64)
        c1 = np.maximum(np.clip(np.ceil(x1) - 1, 0, self.width - 1).astype(np.int64), c0)
        row = ids[local] * (self.width + 1)
        size = len(self.edges) * (self.width + 1)

        def at(index: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
            out: np.ndarray = np.bincount(index, weights, minlength=size).reshape(self.edges.shape)
            return out

        self.edges += at(row + c0) - at(row + c1 + 1)
        if self.timed:  # within one column: its length; else the two end columns' parts, full ones between
            one = c0 == c1
            self.part += at(row + c0, np.where(one, x1 - x0, c0 + 1 - x0))
            row, c0, c1, x1 = row[~one], c0[~one], c1[~one], x1[~one]
            self.part += at(row + c1, x1 - c1)
            self.full += (at(row + c0 + 1) - at(row + c1)).astype(np.int64)

    def _id(self, row: tuple[int, ...]) -> int:
        return self.ids.setdefault(row, len(self.ids))

    def covered(self) -> np.ndarray:
        """Per row, the columns some bar touches."""
        out: np.ndarray = np.cumsum(self.edges, axis=1)[:, : self.width] > 0
        return out

    def filled(self) -> np.ndarray:
        """Per row (``timed``), the time in each column, in columns."""
        out: np.ndarray = (self.part + np.cumsum(self.full, axis=1))[:, : self.width]
        return out

    def bars(self) -> Bars:
        """Runs of covered columns, row by row."""
        key, x0, x1, _ = runs(self.covered().astype(np.int64))
        return Bars(tuple(self.ids), key, x0, x1)


def by_kind(gpu: _Layer) -> Bars:
    """A GPU stream's bars, each column in the colour of the kind of op (kernel, copy, set,
    graph) that filled most of it (a memset among a thousand kernels does not paint the column
    orange), as opaque as the share of the column the stream's ops filled (in FILL_STEPS: a
    column 10% busy is faint, not solid)."""
    covered, filled = gpu.covered(), gpu.filled()
    code = np.zeros(covered.shape, np.int64)  # 0: nothing; else the fill step
    streams: dict[tuple[int, int], list[int]] = {}
    for i, (dev, stream, _) in enumerate(gpu.ids):
        streams.setdefault((dev, stream), []).append(i)
    for rows in streams.values():  # a few streams
        touched, most = covered[rows].any(axis=0), filled[rows].argmax(axis=0)
        step = np.clip(np.ceil(np.minimum(filled[rows].sum(axis=0), 1.0) * FILL_STEPS), 1, FILL_STEPS)
        for j, row in enumerate(rows):
            code[row] = np.where(touched & (most == j), step, 0)
    key, x0, x1, level = runs(code)
    return Bars(tuple(gpu.ids), key, x0, x1, level / FILL_STEPS)


def runs(code: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(row, first column, one past the last, code) of each run of equal non-zero codes in each row."""
    width = code.shape[1]
    padded = np.zeros((len(code), width + 2), np.int64)
    padded[:, 1:-1] = code
    flat = padded.ravel()
    change = np.flatnonzero(flat[1:] != flat[:-1]) + 1  # where a run (of codes or of zeros) begins
    begin, end = change[:-1], change[1:]  # consecutive changes bound one run; a row's padding ends its last
    keep = flat[begin] != 0
    begin, end = begin[keep], end[keep]
    row, first = np.divmod(begin, width + 2)
    return row, (first - 1).astype(np.float64), (end - row * (width + 2) - 1).astype(np.float64), flat[begin]


class _Busy:
    """Per device, the GPU's busy ns in each pixel column, from the union of its ops clipped to
    its GPU timeline inside the window (exact: integer ns)."""

    def __init__(self, edges: np.ndarray, bounds: Mapping[int, tuple[int, int]]) -> None:
        self.edges = edges
        self.bounds = {d: (max(lo, int(edges[0])), min(hi, int(edges[-1]))) for d, (lo, hi) in bounds.items()}
        self.busy = {d: np.zeros(len(edges) - 1, np.int64) for d in bounds}
        self.pending: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def add(self, chunk: pa.Table, later_start: int | None) -> None:
        """One part of the GPU ops; ``later_start``: no later part starts before it (None: unknown)."""
        dev = np_col(chunk, "device_id", fill=-1)
        s, e = np_col(chunk, "start_ns"), np_col(chunk, "end_ns")
        for d in np.unique(dev).tolist():  # a few devices
            if d not in self.bounds:
                continue
            lo, hi = self.bounds[d]
            m = (dev == d) & (e > lo) & (s < hi)
            old = self.pending.get(d, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
            ms, me = merged_intervals(
                np.concatenate([old[0], np.maximum(s[m], lo)]), np.concatenate([old[1], np.minimum(e[m], hi)])
            )
            done = me <= later_start if later_start is not None else np.zeros(len(ms), bool)
            self.busy[d] += covered(ms[done], me[done], self.edges)
            self.pending[d] = ms[~done], me[~done]

    def finish(self) -> dict[int, np.ndarray]:
        for d, (ms, me) in self.pending.items():
            self.busy[d] += covered(ms, me, self.edges)
        self.pending = {}
        return self.busy

    def timeline(self) -> dict[int, np.ndarray]:
        """Per device, the ns of each column inside its GPU timeline."""
        out = {}
        for d, (lo, hi) in self.bounds.items():
            out[d] = np.maximum(np.minimum(self.edges[1:], hi) - np.maximum(self.edges[:-1], lo), 0)
        return out


def covered(start: np.ndarray, end: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """ns of each [edges[i], edges[i+1]) covered by disjoint, sorted intervals [start, end)."""
    if not len(start):
        return np.zeros(len(edges) - 1, np.int64)
    before = np.concatenate([[0], np.cumsum(end - start)])  # length covered before interval i
    i = np.searchsorted(start, edges, side="right") - 1  # the interval starting at or before each edge
    j = np.maximum(i, 0)
    at = np.where(i >= 0, before[j] + np.minimum(edges, end[j]) - start[j], 0)
    out: np.ndarray = np.diff(at)
    return out


class _Longest:
    """The LABELS longest ops and GPU ops in the window (by the time they spend in it)."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self.found: list[Label] = []

    def add(self, chunk: pa.Table, name: str, row: Sequence[np.ndarray], host: bool) -> None:
        s, e = np_col(chunk, "start_ns"), np_col(chunk, "end_ns")
        ns = np.minimum(e, self.hi) - np.maximum(s, self.lo)
        if len(ns) > LABELS:  # the LABELS longest, ties broken by start and row (the same whatever the parts)
            top = np.flatnonzero(ns >= np.partition(ns, len(ns) - LABELS)[len(ns) - LABELS])
            top = top[np.lexsort((*(r[top] for r in reversed(row)), s[top], -ns[top]))][:LABELS]
        else:
            top = np.arange(len(ns))
        names = chunk.column(name).take(pa.array(top)).cast(pa.string()).to_pylist()
        for i, text in zip(top.tolist(), names):
            where = (int(row[0][i]), int(row[1][i]), int(row[2][i]) if len(row) > 2 else 0)
            self.found.append(Label(int(ns[i]), int(s[i]), int(e[i]), text or "", host, where))
        self.found = sorted(self.found, key=lambda lab: (-lab.ns, lab.start_ns, not lab.host, lab.row, lab.name))
        del self.found[LABELS:]


def decimate(
    report: DatasetTables, start_ns: int, end_ns: int, width: int, gpu_bounds: Mapping[int, tuple[int, int]]
) -> Pixels:
    """The rows of ``report`` overlapping [start_ns, end_ns] (ends included) merged to ``width``
    pixel columns, the GPU busy time per column of every device in ``gpu_bounds`` (its GPU
    timeline, nvbridge.dataset.timeline), and the longest ops."""
    win = (start_ns, end_ns)
    edges = start_ns + np.round(np.linspace(0, end_ns - start_ns, width + 1)).astype(np.int64)
    scale = width / max(end_ns - start_ns, 1)

    def px(chunk: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        x0 = (np_col(chunk, "start_ns") - start_ns) * scale
        x1 = (np_col(chunk, "end_ns") - start_ns) * scale
        return np.clip(x0, 0, width), np.clip(x1, 0, width)

    ops, api, gpu = _Layer(width), _Layer(width), _Layer(width, timed=True)
    longest = _Longest(start_ns, end_ns)
    for chunk in _rows_in(report, "ops", win):
        pid, tid = np_col(chunk, "process_id", fill=-1), np_col(chunk, "thread_id", fill=0)
        depth = np.minimum(np_col(chunk, "depth", fill=0), MAX_DEPTH - 1)
        ops.add([pid, tid, depth], *px(chunk))
        longest.add(chunk, "op_name", [pid, tid, depth], host=True)
    for chunk in _rows_in(report, "api_calls", win):
        api.add([np_col(chunk, "process_id", fill=-1), np_col(chunk, "thread_id", fill=0)], *px(chunk))
    for chunk in _rows_in(report, "gpu_ops", win):
        dev, stream = np_col(chunk, "device_id", fill=-1), np_col(chunk, "stream_id", fill=0)
        kind = pc.fill_null(pc.index_in(chunk.column("kind").cast(pa.string()), pa.array(KINDS)), len(KINDS))
        gpu.add([dev, stream, np.asarray(kind.to_numpy(zero_copy_only=False), np.int64)], *px(chunk))
        longest.add(chunk, "name", [dev, stream], host=False)
    busy = _Busy(edges, gpu_bounds)
    if gpu_bounds:
        later = report.later_starts("gpu_ops")
        for i, chunk in enumerate(report.chunks("gpu_ops", BUSY_COLUMNS)):
            busy.add(chunk, later[i] if i < len(later) else None)
    return Pixels(
        width, edges, ops.bars(), api.bars(), by_kind(gpu), busy.finish(), busy.timeline(), tuple(longest.found)
    )


def _rows_in(report: DatasetTables, name: str, win: tuple[int, int]) -> Iterator[pa.Table]:
    """Parts of table ``name`` holding the rows that overlap the window (row groups outside it
    are skipped by their statistics)."""
    for chunk in report.chunks(name, COLUMNS[name], win):
        keep = (np_col(chunk, "end_ns") >= win[0]) & (np_col(chunk, "start_ns") <= win[1])
        if keep.all():
            yield chunk
        elif keep.any():
            yield chunk.filter(pa.array(keep))
