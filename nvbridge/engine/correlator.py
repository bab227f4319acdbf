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
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col, take_sorted
from nvbridge.engine import by_time, invariants, names, semantics, window
from nvbridge.engine.activity import ActivityTally, Correlated, GpuBuffer, ProcessKeys, Reorder, api_rows
from nvbridge.engine.costs import kernel_dtypes
from nvbridge.engine.keys import through
from nvbridge.engine.model import CROSS_THREAD, OPEN_AT_END
from nvbridge.errors import CorrelationError, NotStreamable
from nvbridge.readers.raw import RANGES_SCHEMA, SourceInfo

PARSED_NAMES = names.PARSED_SCHEMA.names


def with_parsed_names(ranges: pa.Table) -> pa.Table:
    """``ranges`` with their names parsed (names.PARSED_SCHEMA columns appended), which
    :meth:`Correlator.add` then uses: a streamed reader calls it on its own threads."""
    parsed = names.parse(ranges.column("name"))
    for field, column in zip(parsed.schema, parsed.columns):
        ranges = ranges.append_column(field, column)
    return ranges


def capture_end(info: SourceInfo, hi: int) -> int:
    """Where ranges never closed are clamped: the capture's end, or the latest time seen
    (``hi``: range starts, API call starts and ends), whichever is later."""
    return max(info.capture_end_ns if info.capture_end_ns is not None else hi, hi)


@dataclass(slots=True)
class _Carried:
    """Tree ranges still open at a window's end, carried into the next window."""

    raw: pa.Table
    op_id: np.ndarray
    sums: dict[str, np.ndarray]
    gpu_first: np.ndarray
    gpu_last: np.ndarray
    parsed: pa.Table
    links: semantics.Links
    kernel_dtype: np.ndarray  # nvbridge.engine.costs.kernel_dtypes codes of the kernels in each subtree so far


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

    def __init__(self, info: SourceInfo, capture_end: int, syncs: pa.Table, horizons: int = 1) -> None:
        self.info = info
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
        self._gpu_out: list[pa.Table] = []
        self._api_columns: pa.Table | None = None
        self._next_id = 0
        self._emitted = invariants.EmittedIds()
        self._self_gpu_sum = 0
        self._time_gpu_sum = 0
        self._forward_horizon = semantics.FORWARD_HORIZON_ROWS * horizons
        self._forward = semantics.ForwardIndex(self._forward_horizon)
        self._open: _Carried | None = None
        self._last_cut: int | None = None
        self._done = False
        self._pool = ThreadPoolExecutor(max_workers=1)

    def add(self, ranges: pa.Table, cut: int | None, api: pa.Table, gpu: pa.Table) -> pa.Table:
        """Correlate ``ranges`` (every range starting before ``cut``; None: the rest of the
        report) with ``api`` (every API call starting before ``cut`` not given before, with
        its ``api_call_id``) and ``gpu`` (GPU ops read since the last window, with their
        ``table_index`` and ``rowid``); returns the finished ops rows.

        Raises:
            NotStreamable: a range starts before the previous cut, or after the capture end,
                or a GPU op started long after its API call's window (the caller converts the
                report another way).
            CorrelationError: an invariant is broken.
        """
        new, parsed_new = self._accept(ranges, cut)
        # Name parsing (Arrow string work, GIL released) runs beside the forest below.
        parsing = (
            self._pool.submit(names.parse, new.column("name"))
            if parsed_new is None
            else parsed_new.cast(names.PARSED_SCHEMA)
        )
        rows = self._rows(new)
        self._api_columns = api.slice(0, 0)
        # The calls in start order (ties in table order), as index arrays: the table itself
        # stays as it came, its rows put back in id order on the way out.
        order = _start_order(np_col(api, "start_ns"), np_col(api, "api_call_id"))

        def by_start(name: str, fill: int | None = None) -> np.ndarray:
            values = np_col(api, name, fill)
            return values if order is None else values[order]

        a_start = by_start("start_ns")
        a_end = np.maximum(by_start("end_ns"), a_start)
        tree = window.build_tree(rows, a_start, a_end, by_start("thread_key"), self.capture_end)
        a_op = through(rows.op_id, tree.api_local)
        a_key = self._keys.of(by_start("process_key", 0), by_start("correlation_id", -1))
        a_id = by_start("api_call_id")
        if self._gpu.orphans.has(a_key).any():
            raise NotStreamable("an API call starts after the GPU op it launched")
        # GPU ops -> the range of their API call: this window's calls claim theirs from the buffer.
        self._gpu.add(gpu, self._keys, self._correlated)
        g_rows, g_call = self._gpu.match(a_key)
        g_local = tree.api_local[g_call]
        g_start, g_end = self._gpu.times(g_rows)
        self._gpu.assign(
            g_rows,
            through(rows.op_id, g_local),
            a_id[g_call],
            by_start("process_id", 0)[g_call],
            by_start("thread_id", 0)[g_call],
        )
        self._correlated.add(a_key)
        self._match_syncs(a_key, a_id)
        count = np.bincount(g_call, minlength=len(a_id))
        if order is not None:  # back to the table's row order
            a_op[order], count[order] = a_op.copy(), count.copy()
        self._api_out.put(api_rows(api, a_op, count))
        self.tally.api(api, a_op)
        sums = window.roll_up(rows, tree, g_local, g_start, g_end)
        own = np.full(rows.n, kernel_dtypes.NONE, np.uint8)
        has = g_local >= 0
        np.minimum.at(own, g_local[has], self._gpu.dtype_codes(g_rows)[has].astype(np.uint8))
        codes = kernel_dtypes.subtree_min(np.where(tree.in_tree, tree.parent, -1), own)
        calls = (by_start("thread_key"), a_start, a_end)
        sums.values.update(by_time.attribute(rows, tree, self._end_thread_mask, self._gpu, g_rows, g_call, calls))
        parsed = parsing.result() if isinstance(parsing, Future) else parsing
        out = self._emit(rows, tree, sums, parsed, cut, codes)
        released = self._gpu.release(cut)
        if released is not None:
            self.tally.gpu(released)
            self._gpu_out.append(released)
        return out

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

    def _accept(self, ranges: pa.Table, cut: int | None) -> tuple[pa.Table, pa.Table | None]:
        """The window's ranges in output order, with their parsed names if they came with them."""
        new = ranges.select(RANGES_SCHEMA.names).cast(RANGES_SCHEMA)
        # Names parsed already (with_parsed_names, on a reader thread) travel with their rows.
        parsed_new = ranges.select(PARSED_NAMES) if PARSED_NAMES[0] in ranges.column_names else None
        start = np_col(new, "start_ns")
        if self._last_cut is not None and len(start) and int(start.min()) < self._last_cut:
            raise NotStreamable("ranges are not in start order across windows")
        if cut is not None and len(start) and int(start.max()) >= cut:
            raise CorrelationError("a window holds a range starting at or after its cut")
        if len(start) and int(start.max()) > self.capture_end:
            raise NotStreamable("a range starts after the capture end the stream assumed")
        end, _ = window.ends(new, start, self.capture_end, self._open_marker)
        # Output order: by start, thread, longer first, push order. Exports list NVTX rows in
        # that order already, so the reorder (a copy of every name) is usually skipped.
        if not window.in_output_order(start, end, np_col(new, "thread_key")):
            order = pa.array(np.lexsort((np.arange(len(start)), -end, np_col(new, "thread_key"), start)))
            new = new.take(order)
            parsed_new = None if parsed_new is None else parsed_new.take(order)
        return new, parsed_new

    def _rows(self, new: pa.Table) -> window.Rows:
        """The carried ranges, then ``new`` with fresh op ids, with their ends and flags."""
        start = np_col(new, "start_ns")
        end, open_end = window.ends(new, start, self.capture_end, self._open_marker)
        m = new.num_rows
        op_id = np.arange(self._next_id, self._next_id + m, dtype=np.int64)
        self._next_id += m
        flags = np.where(open_end, OPEN_AT_END, 0).astype(np.int64)
        cross = np.asarray(new.column("end_thread_key").is_valid().to_numpy(zero_copy_only=False))
        flags[cross] |= CROSS_THREAD
        key = np_col(new, "thread_key")
        prev = self._open
        if prev is None:
            return window.Rows(_one_chunk_each(new), op_id, start, end, flags, cross, key, 0)
        k = len(prev.op_id)
        p_start = np_col(prev.raw, "start_ns")
        # Carried ranges are tree ranges: only OPEN_AT_END can be set on them.
        p_end, p_open = window.ends(prev.raw, p_start, self.capture_end, self._open_marker)
        return window.Rows(
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
        rows: window.Rows,
        tree: window.Tree,
        sums: window.Sums,
        parsed: pa.Table,
        cut: int | None,
        codes: np.ndarray,
    ) -> pa.Table:
        """Add what carried ranges had, attach the PyTorch columns, check, and emit the rows
        that have closed; carry the tree ranges that may still contain later work. ``codes``:
        the kernel dtype code (nvbridge.engine.costs.kernel_dtypes) of each row's subtree in this window."""
        prev, k, n = self._open, rows.carried, rows.n
        s = sums.values
        if prev is not None:
            for name in window.SUMS:
                s[name][:k] += prev.sums[name]
            sums.gpu_first[:k] = np.minimum(sums.gpu_first[:k], prev.gpu_first)
            sums.gpu_last[:k] = np.maximum(sums.gpu_last[:k], prev.gpu_last)
            codes[:k] = np.minimum(codes[:k], prev.kernel_dtype)
            parsed = pa.concat_tables([prev.parsed, parsed]).combine_chunks()
        else:
            parsed = _one_chunk_each(parsed)
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
        out = window.ops_table(rows, tree, sums, self_cpu, parent_id, pid, self._end_thread_mask, torch_cols)
        if len(emit) < n:
            out = take_sorted(out, emit)
        self._self_gpu_sum += int(s["self_gpu"][emit].sum())
        self._time_gpu_sum += int(s["time_gpu"][emit].sum())
        if len(carry):
            # Compact copies: slices would keep this window's buffers alive.
            self._open = _Carried(
                take_sorted(rows.raw, carry).combine_chunks(),
                rows.op_id[carry],
                {name: s[name][carry] for name in window.SUMS},
                sums.gpu_first[carry],
                sums.gpu_last[carry],
                take_sorted(state, carry).combine_chunks(),
                links.take(carry),
                codes[carry],
            )
        else:
            self._open = None
        self._last_cut = cut
        self._done = cut is None
        return out

    def finish(self) -> None:
        """Check what needs the whole report, once the last window (``cut`` None) is in."""
        self._pool.shutdown()
        if not self._done:
            raise CorrelationError("the last window never came")
        self._emitted.check_complete(self._next_id)
        invariants.check_sums(self._self_gpu_sum, self._time_gpu_sum, self.tally)
        self._forward = semantics.ForwardIndex(self._forward_horizon)
        self._emitted = invariants.EmittedIds()

    def close(self) -> None:
        """Stop the name-parsing worker (also when a window raised)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def finished(self) -> tuple[pa.Table | None, list[pa.Table]]:
        """The api_calls rows that continue those handed on so far (None: none yet), and the
        gpu_ops rows released since the last call, all in id order."""
        gpu, self._gpu_out = self._gpu_out, []
        api = self._api_out.ready()
        if self._done:
            self._api_out.check_empty()  # every id handed on: none missing
        return api, gpu

    def no_api_calls(self) -> pa.Table:
        """An api_calls table without rows (its file still holds the columns)."""
        assert self._api_columns is not None, "no window was added"
        empty = np.zeros(0, np.int64)
        return api_rows(self._api_columns, empty, empty)

    def no_gpu_ops(self) -> pa.Table:
        """A gpu_ops table without rows."""
        return self._gpu.empty()

    @property
    def gpu_devices(self) -> set[int]:
        """Devices the GPU ops handed on so far ran on."""
        return self._gpu.devices


def _one_chunk_each(table: pa.Table) -> pa.Table:
    """``table`` with one chunk per column (a window's held-back rows and the rest come as two),
    copied only if it has more."""
    return table.combine_chunks() if any(c.num_chunks > 1 for c in table.columns) else table


def _start_order(start: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
    """The order of API calls by start, ties by id; None when they are in it already (exports
    list them so, mostly)."""
    if len(start) < 2 or ((np.diff(start) > 0) | ((np.diff(start) == 0) & (np.diff(ids) > 0))).all():
        return None
    return np.lexsort((ids, start))
