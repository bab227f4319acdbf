"""The stateful engine: windows of ranges in, ops rows out, every rule holding across cuts.

Rules (docs/architecture.md, "Where each rule lives"):

- Ranges on one thread nest into a tree. A range never closed is clamped to the capture end
  and flagged OPEN_AT_END; one ended on another thread is flagged CROSS_THREAD and one that
  overlaps a sibling without nesting is flagged CROSSING: both are kept, never parents.
- A CUDA API call belongs to the innermost tree range on its thread that contains it.
- A GPU op belongs to the API call with the same correlation id in the same process; one
  without (the capture window cut its launch off) is kept and flagged NO_API_CALL.
- Self GPU time of a range = summed durations of the GPU ops launched directly inside it;
  total = self + children's totals. Each GPU op is counted in exactly one ``self``.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeAlias

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col, take_sorted
from nvbridge.engine import by_time, invariants, names, semantics
from nvbridge.engine import memory as memory_steps
from nvbridge.engine import window as steps
from nvbridge.engine.activity import ActivityTally, Correlated, GpuBuffer, ProcessKeys, Reorder, api_rows
from nvbridge.engine.carry import Calls, Carried, one_chunk_each, start_order
from nvbridge.engine.costs import kernel_dtypes
from nvbridge.engine.keys import through
from nvbridge.engine.model import CROSS_THREAD, OPEN_AT_END, WindowRows
from nvbridge.engine.tables import other_tables
from nvbridge.errors import CorrelationError
from nvbridge.readers.raw import RANGES_SCHEMA, Restart, SourceInfo, Tail, Window

# A window's parsed names (nvbridge.engine.names.parse of its ranges' names, in the window's row
# order), or the parse still running on the pipeline's worker.
Parsed: TypeAlias = "pa.Table | Future[pa.Table]"


def parse_names(ranges: pa.Table) -> pa.Table:
    """The parsed names of a window's ranges (names.PARSED_SCHEMA), as :meth:`Correlator.add`
    takes them: the pipeline runs it on a worker, a window ahead of the engine."""
    return names.parse(ranges.column("name"))


class Correlator:
    """The engine, fed one window of ranges, API calls and GPU ops at a time in start order.

    A window's ranges are those that start before its ``cut``; the ranges still open at the
    cut stay, as the innermost open ranges of their threads, for the next window, so every rule
    holds across windows exactly as in one pass. Those rows are emitted when they close, after
    rows of later ops: op ids follow (start, thread, -end) order, row order follows closing
    windows. API calls come with the window whose cut follows their start; GPU ops ahead of
    their launch's window (:mod:`nvbridge.engine.activity`). Finished API calls and GPU ops
    are handed on, in id order, by :meth:`finished`.

    Args:
        info: what the reader detected.
        capture_end: where never-closed ranges are clamped (:func:`capture_end`).
        syncs: the profile's synchronizations (whole: a few per step), matched to their API
            calls as the calls come.
        horizons: how many times the usual horizon the forward index keeps forward ops for
            backward links (:data:`nvbridge.engine.forward_links.FORWARD_HORIZON_ROWS`).
    """

    def __init__(
        self, info: SourceInfo, capture_end: int, syncs: pa.Table, horizons: int = 1, *, memory: bool = False
    ) -> None:
        self.info = info
        # None: the report has no memory events (the ops' memory columns are null).
        self._memory = memory_steps.Tracker() if memory else None
        self.capture_end = capture_end
        self.syncs = syncs
        self._keys = ProcessKeys()
        self._correlated = Correlated()
        self._gpu = GpuBuffer(info.kind == "nsys")
        self._api_out = Reorder("api_call_id")
        # Position of each sync's API call (-1 none).
        self.sync_api = np.full(syncs.num_rows, -1, np.int64)
        # The syncs with a key, in key order: a window looks its calls' keys up here (its calls
        # are few, the report's syncs many: looking every open sync up in every window grew as
        # windows x syncs).
        sync_key = self._keys.of(np_col(syncs, "process_key", fill=0), np_col(syncs, "correlation_id", fill=-1))
        keyed = np.flatnonzero(sync_key >= 0)
        self._sync_by_key = keyed[np.argsort(sync_key[keyed], kind="stable")]
        self._sync_keys_sorted = sync_key[self._sync_by_key]
        # Some Nsight Systems exporters store a never-closed range's end as the capture end.
        self._open_marker = info.capture_end_ns if info.kind == "nsys" else None
        self._end_thread_mask = 0xFFFFFF if info.kind == "nsys" else 0xFFFFFFFF
        self.tally = ActivityTally()
        self._api_columns: pa.Table | None = None
        self._next_id = 0
        self._emitted = invariants.EmittedIds()
        self._self_gpu_sum = 0
        self._time_gpu_sum = 0
        self._forward_horizon = semantics.FORWARD_HORIZON_ROWS * horizons
        self._forward = semantics.ForwardIndex(self._forward_horizon)
        self._open: Carried | None = None
        self._last_cut: int | None = None
        self._done = False
        self._pool = ThreadPoolExecutor(max_workers=1)

    def add(self, window: Window, parsed: Parsed | None = None) -> WindowRows | Restart:
        """Correlate a window (:class:`nvbridge.readers.raw.Window`): its ranges with its API
        calls and the GPU ops read so far. ``parsed``: its ranges' parsed names (:func:`parse_names`,
        or the parse still running); None: parsed here, beside the forest.

        Returns:
            The rows final now (ops, and the API calls and GPU ops that continue those handed on),
            or a Restart: a GPU op started later than the reader's horizon after its launch, or
            before its API call, or a backward node's forward op left the forward index; the
            report must be read another way, and this engine is done.

        Raises:
            CorrelationError: an invariant is broken (a window out of order, a sum that does
                not add up).
        """
        cut, api, gpu = window.cut, window.api_calls, window.gpu_ops
        new, order = self._accept(window.ranges, cut)
        if parsed is None:  # Arrow string work, GIL released: beside the forest below
            parsed = self._pool.submit(names.parse, new.column("name"))
            order = None
        rows = self._rows(new)
        self._api_columns = api.slice(0, 0)
        # The calls in start order (ties in table order), as index arrays: the table itself
        # stays as it came, its rows put back in id order on the way out.
        calls = Calls(api, start_order(np_col(api, "start_ns"), np_col(api, "api_call_id")), self._keys)
        events = window.memory if window.memory is not None and window.memory.num_rows else None
        a_key = calls.by_start("thread_key")
        tree, m_local = memory_steps.build_tree(rows, calls.start, calls.end, a_key, events, self.capture_end)
        if self._gpu.orphans.has(calls.key).any():
            return Restart("an API call starts after the GPU op it launched")
        a_op = through(rows.op_id, tree.api_local)
        # GPU ops -> the range of their API call: this window's calls claim theirs from the buffer.
        self._gpu.add(gpu, self._keys, self._correlated)
        g_rows, g_call = self._gpu.match(calls.key)
        g_local = tree.api_local[g_call]
        self._gpu.assign(
            g_rows,
            through(rows.op_id, g_local),
            calls.id[g_call],
            calls.by_start("process_id", 0)[g_call],
            calls.by_start("thread_id", 0)[g_call],
        )
        self._correlated.add(calls.key)
        self._match_syncs(calls.key, calls.id)
        self._put_api(api, calls, a_op, np.bincount(g_call, minlength=len(calls.id)))
        sums = self._sums(rows, tree, g_rows, g_call, calls)
        if self._memory is not None:
            sums.values.update(self._memory.sums(tree, m_local, events))
        codes = self._kernel_dtypes(rows, tree, g_rows, g_local)
        named = parsed.result() if isinstance(parsed, Future) else parsed
        named = named.cast(names.PARSED_SCHEMA) if order is None else named.take(order).cast(names.PARSED_SCHEMA)
        out = self._emit(rows, tree, sums, named, cut, codes)
        if out is None:
            return Restart("a backward node's forward op may have left the forward index", horizon=True)
        if self._gpu.late(cut):
            return Restart("a GPU op started long after its API call's window", horizon=True)
        released = self._gpu.release(cut)
        if released is not None:
            self.tally.gpu(released)
        memory, frees = (
            memory_steps.no_rows() if self._memory is None else self._memory.rows(rows.op_id, m_local, events)
        )
        api_ready = self._api_out.ready()
        if cut is None:
            self._api_out.check_empty()  # every id handed on: none missing
        return WindowRows(
            out,
            api_ready if api_ready is not None else self.no_api_calls(),
            released if released is not None else self.no_gpu_ops(),
            memory,
            frees,
        )

    def _put_api(self, api: pa.Table, calls: Calls, a_op: np.ndarray, count: np.ndarray) -> None:
        """The window's api_calls rows, held until the ids before theirs are out."""
        if calls.order is not None:  # back to the table's row order
            a_op[calls.order], count[calls.order] = a_op.copy(), count.copy()
        self._api_out.put(api_rows(api, a_op, count))
        self.tally.api(api, a_op)

    def _sums(
        self, rows: steps.Rows, tree: steps.Tree, g_rows: np.ndarray, g_call: np.ndarray, calls: Calls
    ) -> steps.Sums:
        """The window's CPU and GPU sums up its trees, the GPU ops attributed by time included."""
        g_local = tree.api_local[g_call]
        g_start, g_end = self._gpu.times(g_rows)
        sums = steps.roll_up(rows, tree, g_local, g_start, g_end)
        thread_calls = (calls.by_start("thread_key"), calls.start, calls.end)
        sums.values.update(
            by_time.attribute(rows, tree, self._end_thread_mask, self._gpu, g_rows, g_call, thread_calls)
        )
        return sums

    def _kernel_dtypes(self, rows: steps.Rows, tree: steps.Tree, g_rows: np.ndarray, g_local: np.ndarray) -> np.ndarray:
        """The kernel dtype code (nvbridge.engine.costs.kernel_dtypes) of each row's subtree in this window."""
        own = np.full(rows.n, kernel_dtypes.NONE, np.uint8)
        has = g_local >= 0
        np.minimum.at(own, g_local[has], self._gpu.dtype_codes(g_rows)[has].astype(np.uint8))
        return kernel_dtypes.subtree_min(np.where(tree.in_tree, tree.parent, -1), own)

    def _match_syncs(self, a_key: np.ndarray, a_id: np.ndarray) -> None:
        """Syncs whose API call is among this window's: a sync not matched yet takes the first
        call (lowest id) of the window with its key."""
        if not len(a_key) or not len(self._sync_keys_sorted):
            return
        order = np.lexsort((a_id, a_key))
        keys = a_key[order]
        first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]] & (keys >= 0))
        lo = np.searchsorted(self._sync_keys_sorted, keys[first], "left")
        count = np.searchsorted(self._sync_keys_sorted, keys[first], "right") - lo
        if not count.any():
            return
        call = np.repeat(a_id[order[first]], count)
        at = np.repeat(lo - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
        sync = self._sync_by_key[at]
        still = self.sync_api[sync] < 0
        self.sync_api[sync[still]] = call[still]

    def _accept(self, ranges: pa.Table, cut: int | None) -> tuple[pa.Table, pa.Array | None]:
        """The window's ranges in output order, and the order they were put in (None: as they
        came), which their parsed names follow. The reader's windows hold ranges in start order
        across cuts, and none after the capture end: a window that does not is a broken contract."""
        new = ranges.select(RANGES_SCHEMA.names).cast(RANGES_SCHEMA)
        start = np_col(new, "start_ns")
        if self._last_cut is not None and len(start) and int(start.min()) < self._last_cut:
            raise CorrelationError("a window holds a range starting before the previous window's cut")
        if cut is not None and len(start) and int(start.max()) >= cut:
            raise CorrelationError("a window holds a range starting at or after its cut")
        if len(start) and int(start.max()) > self.capture_end:
            raise CorrelationError("a window holds a range starting after the capture end")
        end, _ = steps.ends(new, start, self.capture_end, self._open_marker)
        # Output order: by start, thread, longer first, push order. Exports list NVTX rows in
        # that order already, so the reorder (a copy of every name) is usually skipped.
        if steps.in_output_order(start, end, np_col(new, "thread_key")):
            return new, None
        order = pa.array(np.lexsort((np.arange(len(start)), -end, np_col(new, "thread_key"), start)))
        return new.take(order), order

    def _rows(self, new: pa.Table) -> steps.Rows:
        """The carried ranges, then ``new`` with fresh op ids, with their ends and flags."""
        start = np_col(new, "start_ns")
        end, open_end = steps.ends(new, start, self.capture_end, self._open_marker)
        m = new.num_rows
        op_id = np.arange(self._next_id, self._next_id + m, dtype=np.int64)
        self._next_id += m
        flags = np.where(open_end, OPEN_AT_END, 0).astype(np.int64)
        cross = np.asarray(new.column("end_thread_key").is_valid().to_numpy(zero_copy_only=False))
        flags[cross] |= CROSS_THREAD
        key = np_col(new, "thread_key")
        prev = self._open
        if prev is None:
            return steps.Rows(one_chunk_each(new), op_id, start, end, flags, cross, key, 0)
        k = len(prev.op_id)
        p_start = np_col(prev.raw, "start_ns")
        # Carried ranges are tree ranges: only OPEN_AT_END can be set on them.
        p_end, p_open = steps.ends(prev.raw, p_start, self.capture_end, self._open_marker)
        return steps.Rows(
            pa.concat_tables([prev.raw, new]).combine_chunks(),  # one copy, not one per column read
            np.concatenate([prev.op_id, op_id]),
            np.concatenate([p_start, start]),
            np.concatenate([p_end, end]),
            np.concatenate([np.where(p_open, OPEN_AT_END, 0).astype(np.int64), flags]),
            np.concatenate([np.zeros(k, bool), cross]),
            np.concatenate([np_col(prev.raw, "thread_key"), key]),
            k,
        )

    def _emit(
        self,
        rows: steps.Rows,
        tree: steps.Tree,
        sums: steps.Sums,
        parsed: pa.Table,
        cut: int | None,
        codes: np.ndarray,
    ) -> pa.Table | None:
        """Add what carried ranges had, attach the PyTorch columns, check, and emit the rows
        that have closed; carry the tree ranges that may still contain later work. ``codes``:
        the kernel dtype code (nvbridge.engine.costs.kernel_dtypes) of each row's subtree in this window.
        None: a backward node's forward op may have left the forward index."""
        prev, n = self._open, rows.n
        s = sums.values
        parsed = one_chunk_each(parsed) if prev is None else prev.add_to(sums, codes, parsed)
        pid = np_col(rows.raw, "process_id", fill=0)
        tid = np_col(rows.raw, "thread_id", fill=-1)
        torch_cols, state, links = semantics.annotate(
            tree.parent,
            tree.depth,
            pid,
            tid,
            rows.start,
            rows.op_id,
            parsed,
            self._forward,
            None if prev is None else prev.links,
            kernel_dtypes.dtype_names(codes),
        )
        if self._forward.late:
            return None
        keep = tree.in_tree & (rows.end >= cut) if cut is not None else np.zeros(n, bool)
        emit = np.flatnonzero(~keep)
        carry = np.flatnonzero(keep)
        parent_id = through(rows.op_id, tree.parent)
        dur = rows.end - rows.start
        self_cpu = np.where(tree.in_tree, dur - s["child_cpu"], dur)
        invariants.check_window(
            rows.op_id,
            parent_id,
            tree.in_tree & ~keep,
            rows.start,
            rows.end,
            tree.parent,
            self_cpu,
            s,
            emit,
            self._last_cut,
        )
        self._emitted.add(rows.op_id[emit])
        # Every column over the whole window, then the emitted rows as slices of their runs:
        # no column is copied.
        out = steps.ops_table(rows, tree, sums, self_cpu, parent_id, pid, self._end_thread_mask, torch_cols)
        for column, values in memory_steps.ops_columns(s if self._memory is not None else None, n).items():
            out = out.append_column(column, values)
        if self._memory is not None:
            self._memory.emitted(s, emit, torch_cols["step"])
        if len(emit) < n:
            out = take_sorted(out, emit)
        self._self_gpu_sum += int(s["self_gpu"][emit].sum())
        self._time_gpu_sum += int(s["time_gpu"][emit].sum())
        self._open = Carried.of(rows, sums, state, links, codes, carry) if len(carry) else None
        self._last_cut = cut
        self._done = cut is None
        return out

    def finish(self, tail: Tail) -> dict[str, pa.Table]:
        """Check what needs the whole report, once the last window (``cut`` None) is in, and
        make the small tables from the reader's ``tail``: marks, syncs, threads, devices."""
        self._pool.shutdown()
        if not self._done:
            raise CorrelationError("the last window never came")
        self._emitted.check_complete(self._next_id)
        invariants.check_sums(self._self_gpu_sum, self._time_gpu_sum, self.tally)
        if self._memory is not None:
            self._memory.check()
        self._forward = semantics.ForwardIndex(self._forward_horizon)
        self._emitted = invariants.EmittedIds()
        return other_tables(self.syncs, self.sync_api, self._gpu.devices, tail)

    def close(self) -> None:
        """Stop the name-parsing worker (also when a window raised)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def no_api_calls(self) -> pa.Table:
        """An api_calls table without rows (its file still holds the columns)."""
        assert self._api_columns is not None, "no window was added"
        empty = np.zeros(0, np.int64)
        return api_rows(self._api_columns, empty, empty)

    def no_gpu_ops(self) -> pa.Table:
        """A gpu_ops table without rows."""
        return self._gpu.empty()
