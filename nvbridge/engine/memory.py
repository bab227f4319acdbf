"""Allocator events in the op tree: each event's op, the ops' memory columns, each block's lifetime.

Rules (docs/memory.md has the arithmetic):

- A memory event belongs to the innermost tree range open on its thread at its time: the API
  calls' rule (nvbridge.engine.window.build_tree places both in one pass), across window cuts.
- ``self_<cpu|cuda>_memory_usage``: the bytes of the op's own events (allocations minus frees),
  ``<cpu|cuda>_memory_usage`` with its subtree's; the CPU device is ``cpu``, CUDA every ``cuda:N``.
- ``<cpu|cuda>_memory_peak``: the highest the running sum of the subtree's events, in time order,
  reaches above the op's level at its start (>= 0). Within a window it is a range maximum of the
  thread's prefix sums (a subtree's events are contiguous in its thread's time order); a range
  carried across a cut composes: ``max(peak so far, usage so far + this window's peak)``.
- A block is its device and address in its process: a free takes the allocation of the same block
  before it (``alloc_ns``); the allocation learns its free (``free_ns``) in the same window, or,
  when the free comes in a later window, through :attr:`WindowRows.memory_frees
  <nvbridge.engine.model.WindowRows>` (its row and time), which the sinks apply as they finish.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import DICT_STR, dense_ids, levels_deepest_first, np_col
from nvbridge.engine import window as steps
from nvbridge.engine.keys import through
from nvbridge.errors import CorrelationError

# Per-op memory sums (additive across windows) and peaks (composed), as the correlator carries them.
USAGE = ("self_cpu_mem", "total_cpu_mem", "self_cuda_mem", "total_cuda_mem")
PEAKS = (("cpu_peak", "total_cpu_mem"), ("cuda_peak", "total_cuda_mem"))
# ops columns: (column, sum) in the dataset's order
OPS_COLUMNS = (
    ("self_cpu_memory_usage", "self_cpu_mem"),
    ("cpu_memory_usage", "total_cpu_mem"),
    ("self_cuda_memory_usage", "self_cuda_mem"),
    ("cuda_memory_usage", "total_cuda_mem"),
    ("cpu_memory_peak", "cpu_peak"),
    ("cuda_memory_peak", "cuda_peak"),
)
_EVENT_COLUMNS = ("ts_ns", "process_id", "thread_id", "device", "device_id", "address", "bytes")
_TOTALS = ("total_allocated", "total_reserved")
# The free of an allocation seen in an earlier window: the allocation's memory row and the time.
FREES = pa.schema([("row", pa.int64()), ("free_ns", pa.int64())])


def _device(events: pa.Table) -> pa.Array:
    return pc.fill_null(events.column("device").cast(pa.string()), "")


def is_cpu(events: pa.Table) -> np.ndarray:
    """The events on torch's CPU device (the cpu memory columns)."""
    return np.asarray(pc.equal(_device(events), "cpu").to_numpy(zero_copy_only=False)).astype(bool)


def is_cuda(events: pa.Table) -> np.ndarray:
    """The events on any CUDA device (the cuda memory columns sum them, as torch's do)."""
    return np.asarray(pc.starts_with(_device(events), "cuda").to_numpy(zero_copy_only=False)).astype(bool)


def window_sums(
    tree_parent: np.ndarray, depth: np.ndarray, local: np.ndarray, events: pa.Table, thread_key: np.ndarray
) -> dict[str, np.ndarray]:
    """This window's memory sums per row (USAGE and the raw peaks of PEAKS) from its events
    (``local``: each event's window row, -1 outside every range), carried ranges' earlier sums
    not yet added. ``tree_parent``: the tree parent's row (-1: a root or not in the tree)."""
    n = len(tree_parent)
    nbytes = np_col(events, "bytes")
    cpu, cuda = is_cpu(events), is_cuda(events)
    out: dict[str, np.ndarray] = {}
    kids = list(levels_deepest_first(tree_parent, depth))
    for label, mask in (("cpu", cpu), ("cuda", cuda)):
        has = mask & (local >= 0)
        own = np.bincount(local[has], weights=nbytes[has], minlength=n).astype(np.int64) if has.any() else None
        if own is None:
            out[f"self_{label}_mem"] = np.zeros(n, np.int64)
            out[f"total_{label}_mem"] = np.zeros(n, np.int64)
            out[f"{label}_peak"] = np.zeros(n, np.int64)
            continue
        # bincount's float weights are exact below 2^53 bytes per op and window
        out[f"self_{label}_mem"] = own
        total = own.copy()
        for level in kids:
            np.add.at(total, tree_parent[level], total[level])
        out[f"total_{label}_mem"] = total
        out[f"{label}_peak"] = _peaks(tree_parent, kids, local[has], nbytes[has], thread_key[has], n)
    return out


def _peaks(
    tree_parent: np.ndarray, kids: list[np.ndarray], local: np.ndarray, nbytes: np.ndarray, key: np.ndarray, n: int
) -> np.ndarray:
    """Each row's highest running sum of its subtree's events above its level before the first
    of them (may be negative; 0 for a row without events). Events come in time order."""
    order = np.argsort(key, kind="stable")  # by thread, time order kept within each
    b = nbytes[order]
    c = np.cumsum(b)  # one prefix sum: a subtree lies within one thread's run
    before = c - b
    pos = np.empty(len(order), np.int64)
    pos[order] = np.arange(len(order))
    lo = np.full(n, len(order), np.int64)
    hi = np.full(n, -1, np.int64)
    np.minimum.at(lo, local, pos)
    np.maximum.at(hi, local, pos)
    for level in kids:
        np.minimum.at(lo, tree_parent[level], lo[level])
        np.maximum.at(hi, tree_parent[level], hi[level])
    peak = np.zeros(n, np.int64)
    some = np.flatnonzero(hi >= 0)
    if len(some):
        peak[some] = _range_max(c, lo[some], hi[some]) - before[lo[some]]
    return peak


def _range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max(values[lo[i]..hi[i]]) for every i (inclusive): a sparse table, log2(len) levels."""
    table = [values]
    width = 1
    while 2 * width <= len(values):
        prev = table[-1]
        table.append(np.maximum(prev[:-width], prev[width:]))
        width *= 2
    span = hi - lo + 1
    level = np.floor(np.log2(span)).astype(np.int64)
    out = np.empty(len(lo), np.int64)
    for k in np.unique(level).tolist():
        sel = np.flatnonzero(level == k)
        row, w = table[k], 1 << k
        out[sel] = np.maximum(row[lo[sel]], row[hi[sel] - w + 1])
    return out


def compose(values: dict[str, np.ndarray], carried: dict[str, np.ndarray], k: int) -> None:
    """Add what ``k`` carried ranges had before this window to the window's first ``k`` rows (in
    place): peaks composed (before the usage they read is added to), usage summed."""
    for peak, usage in PEAKS:
        values[peak][:k] = np.maximum(carried[peak], carried[usage] + values[peak][:k])
    for name in USAGE:
        values[name][:k] += carried[name]


def ops_columns(values: dict[str, np.ndarray] | None, n: int) -> dict[str, pa.Array]:
    """The ops' memory columns (``values`` None: the report has no memory events: nulls)."""
    if values is None:
        return {column: pa.nulls(n, pa.int64()) for column, _ in OPS_COLUMNS}
    return {
        column: pa.array(np.maximum(values[name], 0) if name.endswith("peak") else values[name])
        for column, name in OPS_COLUMNS
    }


@dataclass(slots=True)
class Blocks:
    """The blocks allocated and not freed yet, across windows (key: process, device, address),
    with their allocation's time and memory row; and how many memory rows are out."""

    pid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    dev: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    addr: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    row: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rows_out: int = 0

    def match(self, events: pa.Table) -> tuple[np.ndarray, np.ndarray, pa.Table]:
        """(alloc_ns, free_ns with -1 for unknown, the frees of earlier windows' allocations) of a
        window's events, in time order. An allocation is bytes >= 0, a free bytes < 0; address 0
        (a zero-byte allocation) is no block."""
        pid, dev, addr = (np_col(events, c) for c in ("process_id", "device_id", "address"))
        ts, nbytes = np_col(events, "ts_ns"), np_col(events, "bytes")
        n, live = len(ts), len(self.pid)
        ids, count = dense_ids(
            *(np.concatenate([a, b]) for a, b in ((self.pid, pid), (self.dev, dev), (self.addr, addr)))
        )
        live_id, ev_id = ids[:live], ids[live:]
        alloc, tracked = nbytes >= 0, addr != 0
        alloc_ns = np.where(alloc, ts, -1)
        free_ns = np.where(alloc, -1, ts)
        order = np.lexsort((np.arange(n), ev_id))
        k, a = ev_id[order], alloc[order]
        f = ~a & tracked[order]
        same = np.r_[False, k[1:] == k[:-1]]
        paired = np.flatnonzero(f & np.r_[False, a[:-1]] & same)
        alloc_ns[order[paired]] = ts[order[paired - 1]]
        free_ns[order[paired - 1]] = ts[order[paired]]
        where = np.full(count, -1, np.int64)
        where[live_id] = np.arange(live)
        first = order[f & ~same]
        hit = where[ev_id[first]]
        ok = hit >= 0
        alloc_ns[first[ok]] = self.ts[hit[ok]]
        frees = pa.table({"row": pa.array(self.row[hit[ok]]), "free_ns": pa.array(ts[first[ok]])}, schema=FREES)
        seen = np.zeros(count, bool)
        seen[ev_id] = True
        keep = ~seen[live_id]
        last = order[np.r_[k[1:] != k[:-1], True] & a & tracked[order]] if n else np.zeros(0, np.int64)
        rows = self.rows_out + last
        self.pid, self.dev, self.addr = (
            np.concatenate([x[keep], y[last]]) for x, y in ((self.pid, pid), (self.dev, dev), (self.addr, addr))
        )
        self.ts, self.row = np.concatenate([self.ts[keep], ts[last]]), np.concatenate([self.row[keep], rows])
        self.rows_out += n
        return alloc_ns, free_ns, frees


def memory_rows(events: pa.Table, op_id: np.ndarray, step: pa.Array, blocks: Blocks) -> tuple[pa.Table, pa.Table]:
    """A window's memory rows (the dataset's memory table) and the frees of earlier windows'
    allocations (FREES). ``op_id`` -1 and ``step`` null: outside every range."""
    alloc_ns, free_ns, frees = blocks.match(events)
    table = pa.table(
        {
            **{c: events.column(c) for c in _EVENT_COLUMNS},
            **{c: events.column(c) for c in _TOTALS},
            "op_id": pa.array(op_id, mask=op_id < 0),
            "step": step,
            "alloc_ns": pa.array(alloc_ns, mask=alloc_ns < 0),
            "free_ns": pa.array(free_ns, mask=free_ns < 0),
            "source": events.column("source"),
        }
    )
    return table, frees


def no_rows() -> tuple[pa.Table, pa.Table]:
    """A window without memory events: the memory table and the frees without rows."""
    empty = pa.table(
        {
            **{c: pa.array([], DICT_STR if c == "device" else pa.int64()) for c in (*_EVENT_COLUMNS, *_TOTALS)},
            **{c: pa.array([], pa.int64()) for c in ("op_id", "step", "alloc_ns", "free_ns")},
            "source": pa.array([], DICT_STR),
        }
    )
    return empty, FREES.empty_table()


def build_tree(
    rows: steps.Rows,
    a_start: np.ndarray,
    a_end: np.ndarray,
    a_key: np.ndarray,
    events: pa.Table | None,
    capture_end: int,
) -> tuple[steps.Tree, np.ndarray]:
    """The window's forest with its API calls' innermost ranges (nvbridge.engine.window.build_tree),
    and its memory events' (-1: none), placed as zero-length calls in the same pass: the API
    calls' rule, one walk."""
    if events is None:
        return steps.build_tree(rows, a_start, a_end, a_key, capture_end), np.zeros(0, np.int64)
    ts, m = np_col(events, "ts_ns"), len(a_start)
    tree = steps.build_tree(
        rows,
        np.concatenate([a_start, ts]),
        np.concatenate([a_end, ts]),
        np.concatenate([a_key, np_col(events, "thread_key")]),
        capture_end,
    )
    local = tree.api_local[m:]
    tree.api_local = tree.api_local[:m]
    return tree, local


class Tracker:
    """The correlator's memory state between windows: the blocks still allocated, the step of
    the last window's rows, and the bytes the events counted minus the emitted ops' self sums
    (zero at the end: every event in one op's self, or outside every op)."""

    def __init__(self) -> None:
        self.blocks = Blocks()
        self._left = {"cpu": 0, "cuda": 0}
        self._step: pa.Array | None = None

    def sums(self, tree: steps.Tree, local: np.ndarray, events: pa.Table | None) -> dict[str, np.ndarray]:
        """The window's memory sums per row (:func:`window_sums`)."""
        n = len(tree.parent)
        if events is None:
            return {name: np.zeros(n, np.int64) for name in (*USAGE, *(p for p, _ in PEAKS))}
        tree_parent = np.where(tree.in_tree, tree.parent, -1)
        return window_sums(tree_parent, tree.depth, local, events, np_col(events, "thread_key"))

    def emitted(self, values: dict[str, np.ndarray], emit: np.ndarray, step: pa.Array) -> None:
        """The window's rows ``emit`` are out (their sums final); ``step``: every row's step."""
        self._left["cpu"] -= int(values["self_cpu_mem"][emit].sum())
        self._left["cuda"] -= int(values["self_cuda_mem"][emit].sum())
        self._step = step

    def rows(self, op_id: np.ndarray, local: np.ndarray, events: pa.Table | None) -> tuple[pa.Table, pa.Table]:
        """The window's memory rows with their op and step, and the frees of earlier blocks
        (after :meth:`emitted`, which gives the rows' steps)."""
        if events is None:
            return no_rows()
        nbytes, inside = np_col(events, "bytes"), local >= 0
        self._left["cpu"] += int(nbytes[is_cpu(events) & inside].sum())
        self._left["cuda"] += int(nbytes[is_cuda(events) & inside].sum())
        step = self._step if self._step is not None else pa.nulls(len(op_id), pa.int64())
        return memory_rows(events, through(op_id, local), step.take(pa.array(local, mask=~inside)), self.blocks)

    def check(self) -> None:
        if any(self._left.values()):
            raise CorrelationError(f"the ops' self memory does not add up to their events' bytes ({self._left} left)")
