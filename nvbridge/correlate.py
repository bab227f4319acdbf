"""The correlation engine: NVTX ranges -> CUDA API calls -> GPU ops, as one columnar pass.

Pure: no I/O, no SQLAlchemy, no torch. Rules (DESIGN.md, "Attribution rules"):

- Ranges on one thread nest into a tree. A range never closed is clamped to the capture end
  and flagged OPEN_AT_END; one ended on another thread is flagged CROSS_THREAD and one that
  overlaps a sibling without nesting is flagged CROSSING: both are kept, never parents.
- A CUDA API call belongs to the innermost tree range on its thread that contains it.
- A GPU op belongs to the API call with the same correlation id in the same process; one
  without (the capture window cut its launch off) is kept and flagged NO_API_CALL.
- Self GPU time of a range = summed durations of the GPU ops launched directly inside it;
  total = self + children's totals. Each GPU op is counted in exactly one ``self``.

:class:`Correlator` applies them one window of ranges at a time (a streamed conversion);
:func:`correlate` is the same engine with the whole report as one window.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge import names, semantics
from nvbridge.errors import CorrelationError, NotStreamable
from nvbridge.intervals import Forest, stable_order
from nvbridge.profile import RawProfile, SourceInfo
from nvbridge.readers._arrow import DICT_STR, np_col, one_chunk, take_batches, take_sorted

# ops.flags bits
OPEN_AT_END = 1
CROSS_THREAD = 2
CROSSING = 4
# gpu_ops.flags bits
NO_API_CALL = 1


@dataclass(frozen=True, slots=True)
class Model:
    """The correlated profile: Arrow tables keyed by op_id / api_call_id / gpu_op_id."""

    info: SourceInfo
    ops: pa.Table
    api_calls: pa.Table
    gpu_ops: pa.Table
    marks: pa.Table
    syncs: pa.Table
    threads: pa.Table
    devices: pa.Table


def sum_by(index: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 group sums (index -1 is dropped).

    bincount sums in float64, exact while every partial sum stays below 2**53 (104 days of
    nanoseconds); beyond that, the slower integer path.
    """
    keep = index >= 0
    idx, vals = index[keep], values[keep]
    if len(vals) == 0 or (vals.min() >= 0 and int(vals.sum()) < 2**53):
        return np.rint(np.bincount(idx, weights=vals, minlength=n)).astype(np.int64)
    out = np.zeros(n, np.int64)
    np.add.at(out, idx, vals)
    return out


def _in_output_order(start: np.ndarray, end: np.ndarray, thread: np.ndarray) -> bool:
    """Already sorted by (start, thread, -end)? One pass, no sort."""
    if len(start) < 2:
        return True
    ds = np.diff(start)
    if (ds < 0).any():
        return False
    tie = np.flatnonzero(ds == 0)
    if not len(tie):
        return True
    t0, t1 = thread[tie], thread[tie + 1]
    return bool(((t0 < t1) | ((t0 == t1) & (end[tie] >= end[tie + 1]))).all())


def _through(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``values[index]`` where index >= 0, else -1 (works when ``values`` is empty)."""
    if len(values) == 0:
        return np.full(len(index), -1, np.int64)
    return np.where(index >= 0, values[np.maximum(index, 0)], -1)


# _lookup_keys indexes a table when the key range is at most this many times the rows.
_DENSE_KEYS = 4


def _lookup_keys(keys: np.ndarray, queries: np.ndarray, size: int | None = None) -> np.ndarray:
    """Position of each query in ``keys`` (first occurrence), or -1; keys below 0 match nothing.

    With every key and query in ``range(size)`` and ``size`` small next to the rows (dense
    correlation ids), one table indexed by key answers each query without a sort: at 10M NVTX
    rows 0.1 s instead of 0.4 s.
    """
    if size is not None and size <= _DENSE_KEYS * (len(keys) + len(queries)):
        first = np.full(size, _BIG, np.int64)
        valid = np.flatnonzero(keys >= 0)
        np.minimum.at(first, keys[valid], valid)
        found = first[queries]
        return np.where(found == _BIG, -1, found)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    pos = np.clip(np.searchsorted(sorted_keys, queries, "left"), 0, max(len(keys) - 1, 0))
    if len(keys) == 0:
        return np.full(len(queries), -1, np.int64)
    return np.where(sorted_keys[pos] == queries, order[pos], -1)


def _correlation_keys(api_proc: np.ndarray, api_corr: np.ndarray, gpu_proc: np.ndarray,
                      gpu_corr: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """One int64 key per (process, correlation id), ids repeating across processes; and the
    bound of the keys (every key is below it)."""
    # Dense process indices by hashing (a handful of processes over millions of rows); the two
    # chunks share one dictionary, so nothing is concatenated.
    enc = pa.chunked_array([pa.array(api_proc, pa.int64()), pa.array(gpu_proc, pa.int64())]).dictionary_encode()
    inverse = np.concatenate([np.asarray(c.indices.to_numpy(zero_copy_only=False), np.int64) for c in enc.chunks]
                             or [np.zeros(0, np.int64)])
    api_inv, gpu_inv = inverse[: len(api_proc)], inverse[len(api_proc):]
    processes = len(enc.chunk(0).dictionary) if enc.num_chunks else 0
    width = int(max(api_corr.max(initial=0), gpu_corr.max(initial=0))) + 2
    if processes * width >= 2**62:
        raise CorrelationError("correlation ids too large to key; please report this file")
    return api_inv * width + api_corr + 1, gpu_inv * width + gpu_corr + 1, processes * width


def _api_by_correlation(api: pa.Table, procs: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """Position of the API call with each row's (process, correlation id), or -1. The API keys
    and the rows' keys come from one call, so they share one process numbering and width."""
    a_corr = np_col(api, "correlation_id", fill=-1)
    a_key, key, size = _correlation_keys(np_col(api, "process_key", fill=0), a_corr, procs, corr)
    found = _lookup_keys(np.where(a_corr >= 0, a_key, -1), key, size)
    return np.where(corr >= 0, found, -1)


def _match_gpu_ops(api: pa.Table, gpu: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """GPU ops -> API call by (process, correlation id).

    Returns the start order of the GPU ops (their gpu_op_id order), and in that order their
    start, end and API call position (-1 without one).
    """
    g_start, g_end = np_col(gpu, "start_ns"), np_col(gpu, "end_ns")
    g_order = np.argsort(g_start, kind="stable")
    g_api = _api_by_correlation(api, np_col(gpu, "process_key", fill=0)[g_order],
                                np_col(gpu, "correlation_id", fill=-1)[g_order])
    return g_order, g_start[g_order], g_end[g_order], g_api


def with_parsed_names(ranges: pa.Table) -> pa.Table:
    """``ranges`` with their names parsed (names.PARSED_SCHEMA columns appended), which
    :meth:`Correlator.add` then uses: a streamed reader calls it on its own threads."""
    parsed = names.parse(ranges.column("name"))
    for field, column in zip(parsed.schema, parsed.columns):
        ranges = ranges.append_column(field, column)
    return ranges


PARSED_NAMES = names.PARSED_SCHEMA.names
RANGES_SCHEMA = pa.schema([
    ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("name", pa.string()), ("domain", DICT_STR),
    ("domain_id", pa.int64()), ("process_id", pa.int64()), ("thread_id", pa.int64()),
    ("thread_key", pa.int64()), ("end_thread_key", pa.int64()), ("style", DICT_STR),
])
# Per-op sums a range still open at a window's end carries into the next window.
_SUMS = ("self_gpu", "self_count", "api_count", "child_cpu", "total_gpu", "total_count")
_BIG = np.iinfo(np.int64).max


def capture_end(info: SourceInfo, hi: int) -> int:
    """Where ranges never closed are clamped: the capture's end, or the latest time seen
    (``hi``: range starts, API call starts and ends), whichever is later."""
    return max(info.capture_end_ns if info.capture_end_ns is not None else hi, hi)


@dataclass(slots=True)
class _Open:
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
        self._g_order, self._g_start, self._g_end, self._g_api = _match_gpu_ops(api, gpu)
        self.syncs = syncs
        # Position of each sync's API call (-1 none).
        self.sync_api = _api_by_correlation(api, np_col(syncs, "process_key", fill=0),
                                            np_col(syncs, "correlation_id", fill=-1))
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
        self._emitted = np.zeros(0, bool)
        self._self_gpu_sum = 0
        self._forward = semantics.ForwardIndex()
        self._open: _Open | None = None
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
        info = self.info
        cap = self.capture_end
        new = ranges.select(RANGES_SCHEMA.names).cast(RANGES_SCHEMA)
        # Names parsed already (with_parsed_names, on a reader thread) travel with their rows.
        parsed_new = ranges.select(PARSED_NAMES) if PARSED_NAMES[0] in ranges.column_names else None
        m = new.num_rows
        s_new = np_col(new, "start_ns")
        if self._last_cut is not None and m and int(s_new.min()) < self._last_cut:
            raise NotStreamable("ranges are not in start order across windows")
        if cut is not None and m and int(s_new.max()) >= cut:
            raise CorrelationError("a window holds a range starting at or after its cut")
        if m and int(s_new.max()) > cap:
            raise NotStreamable("a range starts after the capture end the stream assumed")
        e_new, open_end = self._ends(new, s_new)
        # Output order: by start, thread, longer first, push order. Exports list NVTX rows in
        # that order already, so the reorder (a copy of every name) is usually skipped.
        new_key = np_col(new, "thread_key")
        if not _in_output_order(s_new, e_new, new_key):
            order = np.lexsort((np.arange(m), -e_new, new_key, s_new))
            new = new.take(pa.array(order))
            parsed_new = None if parsed_new is None else parsed_new.take(pa.array(order))
            s_new, e_new, open_end, new_key = s_new[order], e_new[order], open_end[order], new_key[order]
        # Name parsing (Arrow string work, GIL released) runs beside the forest below.
        parsing = (self._pool.submit(names.parse, new.column("name")) if parsed_new is None
                   else parsed_new.cast(names.PARSED_SCHEMA))

        prev = self._open
        k = 0 if prev is None else len(prev.op_id)
        n = k + m
        raw = new if prev is None else pa.concat_tables([prev.raw, new])
        op_id = np.arange(self._next_id, self._next_id + m, dtype=np.int64)
        self._next_id += m
        flags = np.where(open_end, OPEN_AT_END, 0).astype(np.int64)
        cross_new = np.asarray(new.column("end_thread_key").is_valid().to_numpy(zero_copy_only=False))
        flags[cross_new] |= CROSS_THREAD
        if prev is not None:
            op_id = np.concatenate([prev.op_id, op_id])
            r_start = np.concatenate([np_col(prev.raw, "start_ns"), s_new])
            # Carried ranges are tree ranges: only OPEN_AT_END can be set on them.
            p_e, p_open = self._ends(prev.raw, r_start[:k])
            r_end = np.concatenate([p_e, e_new])
            flags = np.concatenate([np.where(p_open, OPEN_AT_END, 0).astype(np.int64), flags])
            cross = np.concatenate([np.zeros(k, bool), cross_new])
            r_key = np.concatenate([np_col(prev.raw, "thread_key"), new_key])
        else:
            r_start, r_end, cross, r_key = s_new, e_new, cross_new, new_key
        del s_new, e_new, open_end, cross_new, new_key

        # This window's API calls: those starting before the cut, in start order.
        a0 = self._api_done
        a1 = len(self._a_start) if cut is None else int(np.searchsorted(self._a_start, cut, "left"))
        self._api_done = a1
        api_rows = self._a_order[a0:a1]
        a_start = self._a_start[a0:a1]
        a_end = np.maximum(self._a_end[api_rows], a_start)
        a_key = self._a_key[a0:a1]

        # Dense thread indices by hashing (no sort): any order serves the per-thread keys.
        keys = np.concatenate([r_key, a_key])
        tinv = np.asarray(pa.array(keys).dictionary_encode().indices.to_numpy(zero_copy_only=False)).astype(np.int64)
        r_thread, api_thread = tinv[:n], tinv[n:]
        del keys, tinv

        times = [t for t in (r_start, a_start, a_end) if len(t)]
        lo = int(min((int(t.min()) for t in times), default=0))
        hi = max(cap, int(r_end.max(initial=0)), int(a_end.max(initial=0)))
        # The forest wants (thread, start, -end) order; tree_idx maps its rows to window rows.
        candidates = np.flatnonzero(~cross)
        tree_idx = candidates[stable_order(r_thread[candidates])]
        forest = Forest(r_thread[tree_idx], r_start[tree_idx], r_end[tree_idx], lo, hi)
        flags[tree_idx[forest.crossing]] |= CROSSING
        in_tree = np.zeros(n, bool)
        in_tree[tree_idx[~forest.crossing]] = True
        if k and not in_tree[:k].all():
            raise CorrelationError("a range carried between windows left the tree")

        parent = np.full(n, -1, np.int64)
        depth = np.zeros(n, np.int64)
        parent[tree_idx] = _through(tree_idx, forest.parent)
        depth[tree_idx] = forest.depth
        # Ranges outside the tree hang under the innermost tree range containing them.
        outside = np.flatnonzero(~in_tree)
        if len(outside):
            host = forest.innermost(r_thread[outside], r_start[outside], r_end[outside])
            parent[outside] = _through(tree_idx, host)
            depth[outside] = np.where(host >= 0, _through(forest.depth, host) + 1, 0)

        # --- API calls -> innermost range on their thread; GPU ops -> their API call's range ---
        host = forest.innermost(api_thread, a_start, a_end)
        api_local = _through(tree_idx, host)
        self.api_op[api_rows] = _through(op_id, api_local)
        del forest, host, tree_idx, candidates, r_thread, api_thread, outside
        g0, g1 = np.searchsorted(self._g_rank_sorted, [a0, a1], "left")
        g_rows = self._g_by_rank[g0:g1]
        g_local = api_local[self._g_rank_sorted[g0:g1] - a0]
        self.g_op[g_rows] = _through(op_id, g_local)
        g_start, g_end = self._g_start[g_rows], self._g_end[g_rows]

        # --- this window's sums, rolled up its tree; carried ranges add what they had -------
        dur = r_end - r_start
        tree_parent = np.where(in_tree, parent, -1)
        sums = {
            "self_gpu": sum_by(g_local, g_end - g_start, n),
            "self_count": np.bincount(g_local[g_local >= 0], minlength=n).astype(np.int64),
            "api_count": np.bincount(api_local[api_local >= 0], minlength=n).astype(np.int64),
            # A carried range's duration already counted in its parent's when it was new.
            "child_cpu": sum_by(np.where(np.arange(n) >= k, tree_parent, -1), dur, n),
        }
        g_first = np.full(n, _BIG, np.int64)
        g_last = np.full(n, -_BIG, np.int64)
        has = g_local >= 0
        np.minimum.at(g_first, g_local[has], g_start[has])
        np.maximum.at(g_last, g_local[has], g_end[has])
        total_gpu, total_count = sums["self_gpu"].copy(), sums["self_count"].copy()
        # Roll subtree totals up one level at a time, deepest first. One stable sort by depth
        # (a radix sort on int16) groups every level; only ops with GPU work below them move.
        tree_kids = np.flatnonzero(tree_parent >= 0)
        by_depth = tree_kids[stable_order(depth[tree_kids])]
        bounds = np.searchsorted(depth[by_depth], np.arange(int(depth.max(initial=0)) + 2))
        for d in range(int(depth.max(initial=0)), 0, -1):
            level = by_depth[bounds[d]:bounds[d + 1]]
            kids = level[total_count[level] > 0]
            up = tree_parent[kids]
            np.add.at(total_gpu, up, total_gpu[kids])
            np.add.at(total_count, up, total_count[kids])
            np.minimum.at(g_first, up, g_first[kids])
            np.maximum.at(g_last, up, g_last[kids])
        sums["total_gpu"], sums["total_count"] = total_gpu, total_count
        if prev is not None:
            for name in _SUMS:
                sums[name][:k] += prev.sums[name]
            g_first[:k] = np.minimum(g_first[:k], prev.gpu_first)
            g_last[:k] = np.maximum(g_last[:k], prev.gpu_last)

        # --- PyTorch columns ------------------------------------------------------------
        pid = np_col(raw, "process_id", fill=0)
        tid = np_col(raw, "thread_id", fill=-1)
        parsed = parsing.result() if isinstance(parsing, Future) else parsing
        if prev is not None:
            parsed = pa.concat_tables([prev.parsed, parsed])
        torch_cols, state, links = semantics.annotate(
            parent, depth, pid, tid, r_start, op_id, parsed, self._forward, None if prev is None else prev.links)

        # --- emit what has closed; carry the tree ranges that may still contain later work --
        keep = in_tree & (r_end >= cut) if cut is not None else np.zeros(n, bool)
        emit = np.flatnonzero(~keep)
        carry = np.flatnonzero(keep)
        parent_id = _through(op_id, parent)
        self_cpu = np.where(in_tree, dur - sums["child_cpu"], dur)
        self._check(op_id, parent_id, in_tree & ~keep, r_start, r_end, parent, self_cpu, sums, emit)
        has_gpu = total_count > 0
        # Every column over the whole window (zero-copy from NumPy), then the emitted rows as
        # slices of their runs: no column is copied.
        out = pa.table({
            "op_id": pa.array(op_id),
            "parent_id": pa.array(parent_id, mask=parent_id < 0),
            "depth": pa.array(depth),
            "name": raw.column("name"),
            "domain": raw.column("domain"),
            "domain_id": raw.column("domain_id"),
            "process_id": pa.array(pid),
            "thread_id": raw.column("thread_id"),
            "start_ns": pa.array(r_start),
            "end_ns": pa.array(r_end),
            "self_cpu_ns": pa.array(self_cpu),
            "total_cpu_ns": pa.array(dur),
            "self_gpu_ns": pa.array(sums["self_gpu"]),
            "total_gpu_ns": pa.array(total_gpu),
            "gpu_op_count": pa.array(sums["self_count"]),
            "total_gpu_op_count": pa.array(total_count),
            "api_call_count": pa.array(sums["api_count"]),
            "gpu_start_ns": pa.array(g_first, mask=~has_gpu),
            "gpu_end_ns": pa.array(g_last, mask=~has_gpu),
            "style": raw.column("style"),
            "end_thread_id": pc.bit_wise_and(raw.column("end_thread_key"),
                                             pa.scalar(0xFFFFFF if info.kind == "nsys" else 0xFFFFFFFF)),
            "flags": pa.array(flags),
            **torch_cols,
        })
        if len(emit) < n:
            out = take_sorted(out, emit)
        self._self_gpu_sum += int(sums["self_gpu"][emit].sum())
        if len(carry):
            # Compact copies: slices would keep this window's buffers alive.
            self._open = _Open(take_sorted(raw, carry).combine_chunks(), op_id[carry],
                               {name: sums[name][carry] for name in _SUMS}, g_first[carry], g_last[carry],
                               take_sorted(state, carry).combine_chunks(), links.take(carry))
        else:
            self._open = None
        self._last_cut = cut
        self._done = cut is None
        return out

    def _ends(self, ranges: pa.Table, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each range's end, a never-closed one clamped to the capture end, and which were."""
        raw_end = one_chunk(ranges.column("end_ns"))
        end = np.maximum(np.asarray(raw_end.fill_null(self.capture_end).to_numpy(zero_copy_only=False)), start)
        open_end = np.asarray(raw_end.is_null().to_numpy(zero_copy_only=False))
        if self.info.kind == "nsys" and self.info.capture_end_ns is not None:
            # Some exporters store a never-closed range's end as the capture end itself.
            open_end |= np.asarray(raw_end.fill_null(0).to_numpy(zero_copy_only=False)) == self.info.capture_end_ns
        return end, open_end

    def _check(self, op_id: np.ndarray, parent_id: np.ndarray, emitted_tree: np.ndarray, start: np.ndarray,
               end: np.ndarray, parent: np.ndarray, self_cpu: np.ndarray, sums: dict[str, np.ndarray],
               emit: np.ndarray) -> None:
        """The invariants on the rows a window emits (``emit``; ``emitted_tree`` marks the tree
        ranges among them; GPU time and op ids are checked in :meth:`finish`): parents precede
        children, a tree child lies inside its parent, self times are never negative, totals
        are at least self."""
        tree = emitted_tree & (parent >= 0)
        if (parent_id[tree] >= op_id[tree]).any():
            raise CorrelationError("a parent does not precede its child")
        p = parent[tree]
        if ((start[p] > start[tree]) | (end[tree] > end[p])).any():
            raise CorrelationError("a child range is not inside its parent")
        if (self_cpu[tree] < 0).any():
            raise CorrelationError("negative self CPU time")
        below = emit[sums["total_gpu"][emit] < sums["self_gpu"][emit]]
        if len(below):
            i = int(below[0])
            raise CorrelationError(
                f"total GPU time below self GPU time (op {int(op_id[i])}: self {int(sums['self_gpu'][i])} ns, "
                f"total {int(sums['total_gpu'][i])} ns, after the window starting at {self._last_cut}); "
                "please report this file")
        ids = op_id[emit]
        if len(ids) and int(ids.max()) >= len(self._emitted):
            self._emitted = np.concatenate([self._emitted, np.zeros(max(len(self._emitted), int(ids.max()) + 1), bool)])
        if self._emitted[ids].any():
            raise CorrelationError("an op was emitted twice")
        self._emitted[ids] = True

    def finish(self) -> None:
        """Check what needs the whole report, once the last window (``cut`` None) is in."""
        self._pool.shutdown()
        if not self._done or self._api_done != len(self._a_start):
            raise CorrelationError("API calls were left out of every window")
        if not self._emitted[: self._next_id].all() or len(self._emitted[self._next_id:].nonzero()[0]):
            raise CorrelationError("op ids are not 0..n-1")
        g_dur = self._g_end - self._g_start
        if self._self_gpu_sum + int(g_dur[self.g_op < 0].sum()) != int(g_dur.sum()):
            raise CorrelationError("GPU time is double counted or lost")
        # What only the windows needed: at 10M NVTX rows 200 MB, freed before the output is built.
        del self._a_order, self._a_start, self._a_key, self._g_by_rank, self._g_rank_sorted
        del self._api_ready, self._g_ready
        self._forward = semantics.ForwardIndex()
        self._emitted = np.zeros(0, bool)

    def final_rows(self) -> tuple[int, int]:
        """How many leading rows of api_calls and of gpu_ops are final (their op can no longer
        change): those rows may be built and written while later windows are correlated."""
        if self._done:
            return self.api.num_rows, len(self._g_start)
        return (int(np.searchsorted(self._api_ready, self._api_done, "left")),
                int(np.searchsorted(self._g_ready, self._api_done, "left")))

    def api_calls(self, first: int = 0, stop: int | None = None) -> pa.Table:
        """The api_calls table, or its rows ``first:stop`` (final rows: :meth:`final_rows`)."""
        stop = self.api.num_rows if stop is None else min(stop, self.api.num_rows)
        api, api_op = self.api.slice(first, stop - first), self.api_op[first:stop]
        return pa.table({
            "api_call_id": pa.array(np.arange(first, stop, dtype=np.int64)),
            "op_id": pa.array(api_op, mask=api_op < 0),
            "name": api.column("name").cast(DICT_STR),
            "kind": api.column("kind"),
            "process_id": api.column("process_id"),
            "thread_id": api.column("thread_id"),
            "correlation_id": api.column("correlation_id"),
            "start_ns": api.column("start_ns"),
            "end_ns": api.column("end_ns"),
            "gpu_op_count": pa.array(self._api_gpu_count[first:stop].astype(np.int64)),
            "return_value": api.column("return_value"),
        })

    def gpu_ops(self, first: int = 0, stop: int | None = None) -> pa.Table:
        """The gpu_ops table, or its rows ``first:stop`` (final rows: :meth:`final_rows`)."""
        stop = len(self._g_start) if stop is None else min(stop, len(self._g_start))
        api, g_api, g_op = self.api, self._g_api[first:stop], self.g_op[first:stop]
        gpu = take_batches(self.gpu, self._g_order[first:stop])
        g_pid_from_api = _through(np_col(api, "process_id", fill=0), g_api)
        g_tid_from_api = _through(np_col(api, "thread_id", fill=0), g_api)
        g_pkey = np_col(gpu, "process_key", fill=0)
        # Without an API row, nsys still knows the process from globalPid; nvprof does not.
        g_pid = np.where(g_api >= 0, g_pid_from_api, (g_pkey >> 24) & 0xFFFFFF)
        g_pid_known = (g_api >= 0) | (self.info.kind == "nsys")
        cols = {
            "gpu_op_id": pa.array(np.arange(first, stop, dtype=np.int64)),
            "op_id": pa.array(g_op, mask=g_op < 0),
            "api_call_id": pa.array(g_api, mask=g_api < 0),
            "kind": gpu.column("kind"),
            "name": gpu.column("name"),
            "device_id": gpu.column("device_id"),
            "stream_id": gpu.column("stream_id"),
            "context_id": gpu.column("context_id"),
            "process_id": pa.array(g_pid, mask=~g_pid_known),
            "thread_id": pa.array(g_tid_from_api, mask=g_api < 0),
            "correlation_id": gpu.column("correlation_id"),
            "start_ns": pa.array(self._g_start[first:stop]),
            "end_ns": pa.array(self._g_end[first:stop]),
        }
        for name in ("bytes", "copy_kind", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                     "registers_per_thread", "static_shared_bytes", "dynamic_shared_bytes",
                     "short_name", "mangled_name", "graph_node_id"):
            cols[name] = gpu.column(name)
        cols["flags"] = pa.array(np.where(g_api < 0, NO_API_CALL, 0).astype(np.int64))
        return pa.table(cols)

    def gpu_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """start_ns, end_ns, op_id and api_call_id of the GPU ops in gpu_op_id order (-1 = none)."""
        return self._g_start, self._g_end, self.g_op, self._g_api

    def device_ids(self) -> np.ndarray:
        return np.unique(np_col(self.gpu, "device_id", fill=-1))


def stream(engine: Correlator, windows: Iterable[pa.Table]) -> Iterator[pa.Table]:
    """Feed windows of ranges read in export order to ``engine``; yields finished ops rows.

    Each window is cut at its latest start: the ranges starting there wait for the next
    window, so equal starts are never split (ties order by thread, which the engine sorts).

    Raises:
        NotStreamable: a window holds a range that starts before an earlier window's cut.
    """
    held: pa.Table | None = None
    for window in windows:
        if held is not None and held.num_rows:
            window = pa.concat_tables([held.cast(window.schema), window])
        if window.num_rows == 0:
            continue
        start = np_col(window, "start_ns")
        cut = int(start.max())
        later = start == cut
        tail = int(later.sum())
        if tail == len(start):
            held = window
            continue
        if later[-tail:].all():  # the usual case, sorted rows: slices, no copies
            now, held = window.slice(0, len(start) - tail), window.slice(len(start) - tail)
        else:
            now, held = window.filter(pa.array(~later)), window.filter(pa.array(later))
        yield engine.add(now, cut)
    yield engine.add(held if held is not None else RANGES_SCHEMA.empty_table(), None)
    engine.finish()


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
    ops = engine.add(r, None)
    engine.finish()
    return Model(profile.info, ops, gpu_ops=engine.gpu_ops(), api_calls=engine.api_calls(),
                 **other_tables(engine, profile.marks, profile.threads, profile.devices))


def other_tables(engine: Correlator, marks: pa.Table, threads: pa.Table, devices: pa.Table) -> dict[str, pa.Table]:
    """Every output table but ops, api_calls and gpu_ops (:meth:`Correlator.api_calls`,
    :meth:`Correlator.gpu_ops`), once the engine has seen the last window."""
    syncs, s_api = engine.syncs, engine.sync_api
    seen = set(np_col(devices, "device_id", fill=-1).tolist())
    extra = sorted({int(d) for d in engine.device_ids() if d >= 0} - seen)
    # Devices the report names, plus any device a GPU op ran on that it does not name.
    extra_t = pa.table({"device_id": pa.array(extra, pa.int64()), "name": pa.nulls(len(extra), pa.string())})
    return {
        "marks": marks.sort_by([("ts_ns", "ascending")]),
        "syncs": syncs.append_column("api_call_id", pa.array(s_api, mask=s_api < 0)).sort_by(
            [("start_ns", "ascending")]),
        "threads": threads.drop_columns(["thread_key"]).sort_by([("process_id", "ascending"),
                                                                   ("thread_id", "ascending")]),
        "devices": pa.concat_tables([devices.cast(extra_t.schema), extra_t]).sort_by([("device_id", "ascending")]),
    }


def check(model: Model) -> None:
    """Verify the model's invariants; raises CorrelationError naming the first broken one.

    - op ids are 0..n-1, parents precede children, a tree child lies inside its parent;
    - every GPU op is counted in exactly one op's self time or is unattributed;
    - self times are never negative and totals are at least self.
    """
    ops = model.ops
    n = ops.num_rows
    if not np.array_equal(np_col(ops, "op_id"), np.arange(n)):
        raise CorrelationError("op ids are not 0..n-1 in order")
    parent = np_col(ops, "parent_id", fill=-1)
    flags = np_col(ops, "flags")
    s, e = np_col(ops, "start_ns"), np_col(ops, "end_ns")
    tree = (parent >= 0) & ((flags & (CROSS_THREAD | CROSSING)) == 0)
    p = parent[tree]
    if (p >= np.flatnonzero(tree)).any():
        raise CorrelationError("a parent does not precede its child")
    if ((s[p] > s[tree]) | (e[tree] > e[p])).any():
        raise CorrelationError("a child range is not inside its parent")
    g = model.gpu_ops
    g_dur = np_col(g, "end_ns") - np_col(g, "start_ns")
    g_op = np_col(g, "op_id", fill=-1)
    if int(np_col(ops, "self_gpu_ns").sum()) + int(g_dur[g_op < 0].sum()) != int(g_dur.sum()):
        raise CorrelationError("GPU time is double counted or lost")
    if (np_col(ops, "self_cpu_ns")[tree] < 0).any():
        raise CorrelationError("negative self CPU time")
    if (np_col(ops, "total_gpu_ns") < np_col(ops, "self_gpu_ns")).any():
        raise CorrelationError("total GPU time below self GPU time")
