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

from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from nvbridge import names, semantics
from nvbridge.columns import np_col, take_sorted
from nvbridge.engine import invariants, window
from nvbridge.engine.keys import api_by_correlation, match_gpu_ops, through
from nvbridge.engine.model import CROSS_THREAD, OPEN_AT_END, Model
from nvbridge.engine.tables import api_calls_table, gpu_ops_table, other_tables
from nvbridge.errors import CorrelationError, NotStreamable
from nvbridge.profile import RANGES_SCHEMA, RawProfile, SourceInfo

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


class Correlator:
    """The engine, fed one window of ranges at a time in start order.

    API calls and GPU ops are whole-report tables (numbers and dictionary-encoded names, so
    compact); ranges, which carry every op name, stream through in windows. A window's ranges
    are those that start before its ``cut``; the ranges still open at the cut stay, as the
    innermost open ranges of their threads, for the next window, so every rule holds across
    windows exactly as in one pass. Those rows are emitted when they close, after rows of
    later ops: op ids follow (start, thread, -end) order, row order follows closing windows.

    Args:
        info: what the reader detected.
        api, gpu: the profile's API calls and GPU ops (RawProfile columns).
        capture_end: where never-closed ranges are clamped (:func:`capture_end`).
        syncs: the profile's synchronizations, matched to their API calls now, with the GPU
            ops, rather than after the last window (0.25 s at 10M NVTX rows).
    """

    def __init__(self, info: SourceInfo, api: pa.Table, gpu: pa.Table, capture_end: int, syncs: pa.Table) -> None:
        self.info = info
        self.capture_end = capture_end
        self.api = api
        self.gpu = gpu
        self.gpu_order, self._g_start, self._g_end, self._g_api = match_gpu_ops(api, gpu)
        self.syncs = syncs
        # Position of each sync's API call (-1 none).
        self.sync_api = api_by_correlation(
            api, np_col(syncs, "process_key", fill=0), np_col(syncs, "correlation_id", fill=-1)
        )
        # Some Nsight Systems exporters store a never-closed range's end as the capture end.
        self._open_marker = info.capture_end_ns if info.kind == "nsys" else None
        self._end_thread_mask = 0xFFFFFF if info.kind == "nsys" else 0xFFFFFFFF
        a_start = np_col(api, "start_ns")
        self._a_end = np_col(api, "end_ns")
        # API calls are taken in start order (exports are nearly sorted; the sort is stable).
        self._a_order = np.argsort(a_start, kind="stable")
        self._a_start = a_start[self._a_order]
        self._a_key = np_col(api, "thread_key")[self._a_order]
        rank = np.empty(len(a_start), np.int64)
        rank[self._a_order] = np.arange(len(a_start))
        # GPU ops grouped by their API call's rank: a window's API calls own one slice of them.
        g_rank = np.where(self._g_api >= 0, rank[np.maximum(self._g_api, 0)] if len(rank) else -1, -1)
        has_api = np.flatnonzero(g_rank >= 0)
        self._g_by_rank = has_api[np.argsort(g_rank[has_api], kind="stable")]
        # A row's op is final once its API call's rank is below _api_done; the prefix maxima of
        # the ranks (API calls in table order, GPU ops in start order) say how many leading rows
        # are, so the output can be written while later windows are correlated.
        self._api_ready = np.maximum.accumulate(rank).astype(np.int32) if len(rank) else rank
        self._g_ready = np.maximum.accumulate(g_rank).astype(np.int32) if len(g_rank) else g_rank
        self._api_gpu_count = np.bincount(self._g_api[self._g_api >= 0], minlength=len(rank)).astype(np.int32)
        self._g_rank_sorted = g_rank[self._g_by_rank]
        self._api_done = 0
        self.api_op = np.full(api.num_rows, -1, np.int64)
        self.g_op = np.full(gpu.num_rows, -1, np.int64)
        self._next_id = 0
        self._emitted = invariants.EmittedIds()
        self._self_gpu_sum = 0
        self._forward = semantics.ForwardIndex()
        self._open: _Carried | None = None
        self._last_cut: int | None = None
        self._done = False
        self._pool = ThreadPoolExecutor(max_workers=1)

    def add(self, ranges: pa.Table, cut: int | None) -> pa.Table:
        """Correlate ``ranges`` (every range starting before ``cut``; None: the rest of the
        report) with the API calls that start before ``cut``; returns the finished ops rows.

        Raises:
            NotStreamable: a range starts before the previous cut, or after the capture end
                (the caller converts the report in one window instead).
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
        api_rows, a_start, a_end, a_key, a0, a1 = self._api_window(cut)
        tree = window.build_tree(rows, a_start, a_end, a_key, self.capture_end)
        self.api_op[api_rows] = through(rows.op_id, tree.api_local)
        # GPU ops -> the range of their API call: this window's calls own one slice of them.
        g0, g1 = np.searchsorted(self._g_rank_sorted, [a0, a1], "left")
        g_rows = self._g_by_rank[g0:g1]
        g_local = tree.api_local[self._g_rank_sorted[g0:g1] - a0]
        self.g_op[g_rows] = through(rows.op_id, g_local)
        sums = window.roll_up(rows, tree, g_local, self._g_start[g_rows], self._g_end[g_rows])
        parsed = parsing.result() if isinstance(parsing, Future) else parsing
        return self._emit(rows, tree, sums, parsed, cut)

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
            return window.Rows(new, op_id, start, end, flags, cross, key, 0)
        k = len(prev.op_id)
        p_start = np_col(prev.raw, "start_ns")
        # Carried ranges are tree ranges: only OPEN_AT_END can be set on them.
        p_end, p_open = window.ends(prev.raw, p_start, self.capture_end, self._open_marker)
        return window.Rows(
            pa.concat_tables([prev.raw, new]),
            np.concatenate([prev.op_id, op_id]),
            np.concatenate([p_start, start]),
            np.concatenate([p_end, end]),
            np.concatenate([np.where(p_open, OPEN_AT_END, 0).astype(np.int64), flags]),
            np.concatenate([np.zeros(k, bool), cross]),
            np.concatenate([np_col(prev.raw, "thread_key"), key]),
            k,
        )

    def _api_window(self, cut: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int]:
        """This window's API calls (those starting before the cut, in start order): their rows,
        start, end, thread key, and their rank range."""
        a0 = self._api_done
        a1 = len(self._a_start) if cut is None else int(np.searchsorted(self._a_start, cut, "left"))
        self._api_done = a1
        api_rows = self._a_order[a0:a1]
        a_start = self._a_start[a0:a1]
        return api_rows, a_start, np.maximum(self._a_end[api_rows], a_start), self._a_key[a0:a1], a0, a1

    def _emit(
        self, rows: window.Rows, tree: window.Tree, sums: window.Sums, parsed: pa.Table, cut: int | None
    ) -> pa.Table:
        """Add what carried ranges had, attach the PyTorch columns, check, and emit the rows
        that have closed; carry the tree ranges that may still contain later work."""
        prev, k, n = self._open, rows.carried, rows.n
        s = sums.values
        if prev is not None:
            for name in window.SUMS:
                s[name][:k] += prev.sums[name]
            sums.gpu_first[:k] = np.minimum(sums.gpu_first[:k], prev.gpu_first)
            sums.gpu_last[:k] = np.maximum(sums.gpu_last[:k], prev.gpu_last)
            parsed = pa.concat_tables([prev.parsed, parsed])
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
            )
        else:
            self._open = None
        self._last_cut = cut
        self._done = cut is None
        return out

    def finish(self) -> None:
        """Check what needs the whole report, once the last window (``cut`` None) is in."""
        self._pool.shutdown()
        if not self._done or self._api_done != len(self._a_start):
            raise CorrelationError("API calls were left out of every window")
        self._emitted.check_complete(self._next_id)
        invariants.check_gpu_time(self._self_gpu_sum, self._g_start, self._g_end, self.g_op)
        # What only the windows needed: at 10M NVTX rows 200 MB, freed before the output is built.
        del self._a_order, self._a_start, self._a_key, self._g_by_rank, self._g_rank_sorted
        del self._api_ready, self._g_ready
        self._forward = semantics.ForwardIndex()
        self._emitted = invariants.EmittedIds()

    def close(self) -> None:
        """Stop the name-parsing worker (also when a window raised)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def final_rows(self) -> tuple[int, int]:
        """How many leading rows of api_calls and of gpu_ops are final (their op can no longer
        change): those rows may be built and written while later windows are correlated."""
        if self._done:
            return self.api.num_rows, len(self._g_start)
        return (
            int(np.searchsorted(self._api_ready, self._api_done, "left")),
            int(np.searchsorted(self._g_ready, self._api_done, "left")),
        )

    def api_calls(self, first: int = 0, stop: int | None = None) -> pa.Table:
        """The api_calls table, or its rows ``first:stop`` (final rows: :meth:`final_rows`)."""
        stop = self.api.num_rows if stop is None else min(stop, self.api.num_rows)
        return api_calls_table(self.api, self.api_op, self._api_gpu_count, first, stop)

    def gpu_ops(self, first: int = 0, stop: int | None = None) -> pa.Table:
        """The gpu_ops table, or its rows ``first:stop`` (final rows: :meth:`final_rows`)."""
        stop = len(self._g_start) if stop is None else min(stop, len(self._g_start))
        return gpu_ops_table(self, first, stop)

    def gpu_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """start_ns, end_ns, op_id and api_call_id of the GPU ops in gpu_op_id order (-1 = none)."""
        return self._g_start, self._g_end, self.g_op, self._g_api


def stream(engine: Correlator, windows: Iterable[pa.Table]) -> Iterator[pa.Table]:
    """Feed windows of ranges read in export order to ``engine``; yields finished ops rows.

    Each window is cut at its latest start: the ranges starting there wait for the next
    window, so equal starts are never split (ties order by thread, which the engine sorts).
    The engine's worker stops however the stream ends.

    Raises:
        NotStreamable: a window holds a range that starts before an earlier window's cut.
    """
    try:
        held: pa.Table | None = None
        for part in windows:
            if held is not None and held.num_rows:
                part = pa.concat_tables([held.cast(part.schema), part])
            if part.num_rows == 0:
                continue
            start = np_col(part, "start_ns")
            cut = int(start.max())
            later = start == cut
            tail = int(later.sum())
            if tail == len(start):
                held = part
                continue
            if later[-tail:].all():  # the usual case, sorted rows: slices, no copies
                now, held = part.slice(0, len(start) - tail), part.slice(len(start) - tail)
            else:
                now, held = part.filter(pa.array(~later)), part.filter(pa.array(later))
            yield engine.add(now, cut)
        yield engine.add(held if held is not None else RANGES_SCHEMA.empty_table(), None)
        engine.finish()
    finally:
        engine.close()


def correlate(profile: RawProfile) -> Model:
    """Build the op tree and attribute API calls and GPU ops to it, in one window.

    Args:
        profile: the normalized tables a reader produced.

    Returns:
        The model whose tables become the Parquet dataset.
    """
    r, api = profile.ranges, profile.api_calls
    times = [np_col(r, "start_ns"), np_col(api, "start_ns"), np_col(api, "end_ns")]
    hi = int(max((int(t.max()) for t in times if len(t)), default=0))
    engine = Correlator(profile.info, api, profile.gpu_ops, capture_end(profile.info, hi), profile.syncs)
    try:
        ops = engine.add(r, None)
        engine.finish()
    finally:
        engine.close()
    return Model(
        profile.info,
        ops,
        gpu_ops=engine.gpu_ops(),
        api_calls=engine.api_calls(),
        **other_tables(engine, profile.marks, profile.threads, profile.devices),
    )
