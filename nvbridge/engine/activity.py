"""API calls and GPU ops as they stream: correlation keys, GPU ops waiting for their launch,
and rows put back in table order.

A window brings the API calls that start before its cut, and every GPU op that starts before
the window's horizon (``readers.activity.LATE_NS`` past its cut and past the end of its last
API call). A
GPU op starts after the API call that launched it, so it is in the buffer when that call's
window runs: the GPU time is summed into the call's range there, while the range is still
held. A GPU op no call claims by the time the stream has passed its start has none
(NO_API_CALL), unless a call already gone may have had its key (its correlation id lies among
theirs): that op may have started more than LATE_NS after its launch, and the stream gives up
(:meth:`GpuBuffer.late`: the engine hands on a Restart) rather than count it wrong.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from nvbridge.columns import DICT_STR, np_col, take_batches
from nvbridge.engine.costs import kernel_dtypes
from nvbridge.engine.model import BY_TIME, NO_API_CALL
from nvbridge.errors import CorrelationError
from nvbridge.readers.raw import GPU_OPS_SCHEMA

_CORR_BITS = 40


class ProcessKeys:
    """One int64 per (process, correlation id), process numbers kept across windows."""

    def __init__(self) -> None:
        self._index: dict[int, int] = {}

    def of(self, process_key: np.ndarray, corr: np.ndarray) -> np.ndarray:
        """Keys of the rows (-1 where the correlation id is missing)."""
        procs = np.unique(process_key)
        for p in procs.tolist():
            self._index.setdefault(int(p), len(self._index))
        if len(corr) and (int(corr.max()) >= 1 << _CORR_BITS or len(self._index) >= 1 << (62 - _CORR_BITS)):
            raise CorrelationError("correlation ids too large to key; please report this file")
        table = np.array([self._index[int(p)] for p in procs.tolist()], np.int64)
        idx = table[np.searchsorted(procs, process_key)] if len(procs) else np.zeros(0, np.int64)
        return np.where(corr >= 0, (idx << _CORR_BITS) | np.maximum(corr, 0), -1)


class Correlated:
    """Per process, the span of correlation ids of the API calls correlated so far: a GPU op
    whose id falls in it may belong to one of them (its window gone), and is checked; one
    below it was launched before the capture (the FSDP export's 16 orphans are)."""

    def __init__(self) -> None:
        self._lo = np.zeros(0, np.int64)
        self._hi = np.zeros(0, np.int64)

    def add(self, keys: np.ndarray) -> None:
        keys = keys[keys >= 0]
        if not len(keys):
            return
        proc, corr = keys >> _CORR_BITS, keys & ((1 << _CORR_BITS) - 1)
        grow = int(proc.max()) + 1 - len(self._lo)
        if grow > 0:
            self._lo = np.concatenate([self._lo, np.full(grow, np.iinfo(np.int64).max)])
            self._hi = np.concatenate([self._hi, np.full(grow, -1)])
        np.minimum.at(self._lo, proc, corr)
        np.maximum.at(self._hi, proc, corr)

    def within(self, keys: np.ndarray) -> np.ndarray:
        proc, corr = keys >> _CORR_BITS, keys & ((1 << _CORR_BITS) - 1)
        known = (keys >= 0) & (proc < len(self._lo))
        p = np.where(known, proc, 0)
        if not len(self._lo):
            return np.zeros(len(keys), bool)
        return known & (self._lo[p] <= corr) & (corr <= self._hi[p])


class KeySet:
    """The keys of API calls already correlated, sorted runs merged as they grow."""

    def __init__(self) -> None:
        self._runs: list[np.ndarray] = []

    def add(self, keys: np.ndarray) -> None:
        self._runs.append(np.sort(keys[keys >= 0]))
        while len(self._runs) > 1 and len(self._runs[-2]) <= 2 * len(self._runs[-1]):
            last = self._runs.pop()
            self._runs[-1] = np.sort(np.concatenate([self._runs[-1], last]), kind="stable")

    def has(self, keys: np.ndarray) -> np.ndarray:
        found = np.zeros(len(keys), bool)
        for run in self._runs:
            if len(run):
                pos = np.minimum(np.searchsorted(run, keys), len(run) - 1)
                found |= run[pos] == keys
        return found


class GpuBuffer:
    """GPU ops read but not yet written: matched to their API call's window, then released in
    start order once the stream has passed their start, each given its gpu_op_id.

    Rows are kept in release order, (start, table, rowid): each read comes sorted so, and
    starts after every row read before it (slabs of starts), so a release is a prefix of the
    buffer, sliced rather than copied.
    """

    def __init__(self, nsys: bool) -> None:
        self._nsys = nsys
        self._parts: list[pa.Table] = []
        self._cols: dict[str, np.ndarray] = {name: np.zeros(0, bool if name == "late" else np.int64) for name in _STATE}
        self._next_id = 0
        self.devices: set[int] = set()
        # Keys of the ops released without a call: a call with one of them, coming later,
        # started after its GPU op (clock skew), which the stream cannot place.
        self.orphans = KeySet()

    @property
    def _n(self) -> int:
        return len(self._cols["start"])

    def add(self, gpu: pa.Table, keys: ProcessKeys, correlated: Correlated) -> None:
        """Buffer newly read GPU ops (GPU_OPS_SCHEMA plus ``table_index`` and ``rowid``)."""
        if not gpu.num_rows:
            return
        start, table_index, rowid = np_col(gpu, "start_ns"), np_col(gpu, "table_index"), np_col(gpu, "rowid")
        order = np.lexsort((rowid, table_index, start))
        if (order != np.arange(len(order))).any():
            gpu = take_batches(gpu, order)
            start, table_index, rowid = start[order], table_index[order], rowid[order]
        key = keys.of(np_col(gpu, "process_key", fill=0), np_col(gpu, "correlation_id", fill=-1))
        n = gpu.num_rows
        new = {
            "start": start,
            "end": np_col(gpu, "end_ns"),
            "key": key,
            "order_a": table_index,
            "order_b": rowid,
            "op": np.full(n, -1, np.int64),
            "time_op": np.full(n, -1, np.int64),  # nvbridge.engine.by_time
            "api": np.full(n, -1, np.int64),
            "pid": np.zeros(n, np.int64),
            "tid": np.zeros(n, np.int64),
            # A call already correlated may have this key: if none claims the op, it would be
            # counted nowhere (its launch's window is gone).
            "late": correlated.within(key),
            # The compute dtype the kernel's name carries (nvbridge.engine.costs.kernel_dtypes), for its op.
            "dtype": kernel_dtypes.gpu_codes(gpu.column("kind"), gpu.column("name")).astype(np.int64),
        }
        c = self._cols
        first, last = (start[0], table_index[0], rowid[0]), (c["start"][-1:], c["order_a"][-1:], c["order_b"][-1:])
        after = not self._n or first > tuple(int(v[0]) for v in last)
        self._cols = {name: np.concatenate([c[name], new[name]]) for name in _STATE}
        self._parts.append(gpu.drop_columns(["table_index", "rowid"]))
        if not after:  # rows before ones already held (not slabs of starts): sort them all again
            c = self._cols
            order = np.lexsort((c["order_b"], c["order_a"], c["start"]))
            self._parts = [take_batches(pa.concat_tables(self._parts).unify_dictionaries(), order)]
            self._cols = {name: c[name][order] for name in _STATE}

    def match(self, api_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Buffered, unmatched ops whose key is one of ``api_keys`` (a window's calls): their
        buffer rows, and the position in ``api_keys`` of their call (its first with the key)."""
        free = np.flatnonzero((self._cols["api"] < 0) & (self._cols["key"] >= 0))
        if not len(free) or not len(api_keys):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        order = np.argsort(api_keys, kind="stable")
        sorted_keys = api_keys[order]
        q = self._cols["key"][free]
        pos = np.minimum(np.searchsorted(sorted_keys, q), len(sorted_keys) - 1)
        hit = (sorted_keys[pos] == q) & (q >= 0)
        return free[hit], order[pos[hit]]

    def times(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._cols["start"][rows], self._cols["end"][rows]

    def dtype_codes(self, rows: np.ndarray) -> np.ndarray:
        """The kernel dtype codes (nvbridge.engine.costs.kernel_dtypes) of buffer rows."""
        out: np.ndarray = self._cols["dtype"][rows]
        return out

    def assign(self, rows: np.ndarray, op: np.ndarray, api: np.ndarray, pid: np.ndarray, tid: np.ndarray) -> None:
        for name, values in (("op", op), ("api", api), ("pid", pid), ("tid", tid)):
            self._cols[name][rows] = values

    def assign_time(self, rows: np.ndarray, op: np.ndarray) -> None:
        """The op each of ``rows`` is attributed to by time (nvbridge.engine.by_time)."""
        self._cols["time_op"][rows] = op

    def empty(self) -> pa.Table:
        """gpu_ops without rows."""
        state = {name: np.zeros(0, bool if name == "late" else np.int64) for name in _STATE}
        return _gpu_rows(GPU_OPS_SCHEMA.empty_table(), np.zeros(0, np.int64), state, self._nsys)

    def _done(self, cut: int | None) -> int:
        return self._n if cut is None else int(np.searchsorted(self._cols["start"], cut))

    def late(self, cut: int | None) -> bool:
        """Whether an op that starts before ``cut`` has no call now, but a call with its key may
        have been correlated in an earlier window (it started more than LATE_NS after its launch)."""
        done, c = self._done(cut), self._cols
        return bool((c["late"][:done] & (c["api"][:done] < 0)).any())

    def release(self, cut: int | None) -> pa.Table | None:
        """The ops that start before ``cut`` (None: all), final now, in gpu_op_id order (check
        :meth:`late` first)."""
        c = self._cols
        done = self._done(cut)
        if not done:
            return None
        taken, rest, left = [], [], done
        for part in self._parts:
            if left >= part.num_rows:
                taken.append(part)
            elif left > 0:
                taken.append(part.slice(0, left))
                rest.append(part.slice(left))
            else:
                rest.append(part)
            left -= part.num_rows
        table = pa.concat_tables(taken)
        out = _gpu_rows(
            table.unify_dictionaries() if len(taken) > 1 else table,
            np.arange(self._next_id, self._next_id + done, dtype=np.int64),
            {name: c[name][:done] for name in _STATE},
            self._nsys,
        )
        self._next_id += done
        self.orphans.add(c["key"][:done][c["api"][:done] < 0])
        self.devices.update(np.unique(np_col(out, "device_id", fill=-1)).tolist())
        self._cols = {name: c[name][done:] for name in _STATE}
        self._parts = rest
        return out


_STATE = ("start", "end", "key", "order_a", "order_b", "op", "api", "pid", "tid", "late", "dtype", "time_op")

# gpu_ops columns copied from the reader's table as they are.
_GPU_PASSED = (
    "bytes",
    "copy_kind",
    "src_kind",
    "dst_kind",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "registers_per_thread",
    "static_shared_bytes",
    "dynamic_shared_bytes",
    "short_name",
    "mangled_name",
    "graph_node_id",
)


def _gpu_rows(gpu: pa.Table, ids: np.ndarray, c: dict[str, np.ndarray], nsys: bool) -> pa.Table:
    """gpu_ops rows from the reader's rows and their correlation (``c``: _STATE columns)."""
    g_api, g_op, g_time = c["api"], c["op"], c["time_op"]
    g_pkey = np_col(gpu, "process_key", fill=0)
    # Without an API row, nsys still knows the process from globalPid; nvprof does not.
    g_pid = np.where(g_api >= 0, c["pid"], (g_pkey >> 24) & 0xFFFFFF)
    cols = {
        "gpu_op_id": pa.array(ids),
        "op_id": pa.array(g_op, mask=g_op < 0),
        "time_op_id": pa.array(g_time, mask=g_time < 0),
        "api_call_id": pa.array(g_api, mask=g_api < 0),
        "kind": gpu.column("kind"),
        "name": gpu.column("name"),
        "device_id": gpu.column("device_id"),
        "stream_id": gpu.column("stream_id"),
        "context_id": gpu.column("context_id"),
        "process_id": pa.array(g_pid, mask=~((g_api >= 0) | nsys)),
        "thread_id": pa.array(c["tid"], mask=g_api < 0),
        "correlation_id": gpu.column("correlation_id"),
        "start_ns": pa.array(c["start"]),
        "end_ns": pa.array(c["end"]),
    }
    for name in _GPU_PASSED:
        cols[name] = gpu.column(name)
    cols["flags"] = pa.array((np.where(g_api < 0, NO_API_CALL, 0) | np.where(g_time >= 0, BY_TIME, 0)).astype(np.int64))
    return pa.table(cols)


class Reorder:
    """Rows finished out of order, handed on in id order (``id_column`` counts from 0)."""

    def __init__(self, id_column: str) -> None:
        self._column = id_column
        self._held: list[pa.Table] = []
        self._next = 0

    def put(self, table: pa.Table) -> None:
        if table.num_rows:
            self._held.append(table)

    def ready(self) -> pa.Table | None:
        """The held rows that continue the ids handed on so far, in id order."""
        if not self._held:
            return None
        held = pa.concat_tables(self._held)
        ids = np_col(held, self._column)
        order = np.argsort(ids, kind="stable")
        run = int(np.searchsorted(ids[order] - np.arange(self._next, self._next + len(ids)), 0, "right"))
        if not run:
            self._held = [held]
            return None
        out = take_batches(held, order[:run])
        rest = order[run:]
        self._held = [take_batches(held, np.sort(rest))] if len(rest) else []
        self._next += run
        return out

    def check_empty(self) -> None:
        if self._held:
            raise CorrelationError("API calls were left out of every window")


def api_rows(api: pa.Table, op: np.ndarray, gpu_count: np.ndarray) -> pa.Table:
    """api_calls rows for a window's calls (``api``: the reader's columns plus api_call_id)."""
    return pa.table(
        {
            "api_call_id": api.column("api_call_id"),
            "op_id": pa.array(op, mask=op < 0),
            "name": api.column("name").cast(DICT_STR),
            "kind": api.column("kind"),
            "process_id": api.column("process_id"),
            "thread_id": api.column("thread_id"),
            "correlation_id": api.column("correlation_id"),
            "start_ns": api.column("start_ns"),
            "end_ns": api.column("end_ns"),
            "gpu_op_count": pa.array(gpu_count.astype(np.int64)),
            "return_value": api.column("return_value"),
        }
    )


class ActivityTally:
    """What the conversion's summary needs of the API calls and GPU ops, counted as they go."""

    def __init__(self) -> None:
        self.api_calls = 0
        self.api_outside = 0
        self.kinds: dict[str, int] = {}
        self.gpu_without_api = 0
        self.gpu_unattributed = 0
        self.gpu_ns = 0
        self.gpu_unattributed_ns = 0
        self.gpu_attributed_ns = 0
        self.gpu_by_time = 0  # GPU ops attributed by time (nvbridge.engine.by_time), and their ns
        self.gpu_by_time_ns = 0
        self.thread_keys: list[np.ndarray] = []

    def api(self, api: pa.Table, op: np.ndarray) -> None:
        self.api_calls += api.num_rows
        self.api_outside += int((op < 0).sum())
        self.thread_keys.append(np.unique(np_col(api, "thread_key")))

    def gpu(self, gpu: pa.Table) -> None:
        for v in gpu.column("kind").value_counts().to_pylist():
            self.kinds[str(v["values"])] = self.kinds.get(str(v["values"]), 0) + int(v["counts"])
        dur = np_col(gpu, "end_ns") - np_col(gpu, "start_ns")
        lost = np_col(gpu, "op_id", fill=-1) < 0
        self.gpu_without_api += int(np_col(gpu, "api_call_id", fill=-1).__lt__(0).sum())
        self.gpu_unattributed += int(lost.sum())
        self.gpu_ns += int(dur.sum())
        self.gpu_unattributed_ns += int(dur[lost].sum())
        self.gpu_attributed_ns += int(dur[~lost].sum())
        by_time = np_col(gpu, "time_op_id", fill=-1) >= 0
        self.gpu_by_time += int(by_time.sum())
        self.gpu_by_time_ns += int(dur[by_time].sum())

    def figures(self) -> dict[str, int]:
        """The summary's GPU counts and times."""
        return {
            "kernels": self.kinds.get("kernel", 0),
            "memcpys": self.kinds.get("memcpy", 0),
            "memsets": self.kinds.get("memset", 0),
            "graph_launches": self.kinds.get("graph", 0),
            "gpu_ops_without_api_call": self.gpu_without_api,
            "gpu_ops_unattributed": self.gpu_unattributed,
            "gpu_ns_total": self.gpu_ns,
            "gpu_ns_unattributed": self.gpu_unattributed_ns,
        }
