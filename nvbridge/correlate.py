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
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge import names, semantics
from nvbridge.errors import CorrelationError
from nvbridge.intervals import Forest
from nvbridge.profile import RawProfile, SourceInfo
from nvbridge.readers._arrow import DICT_STR, np_col

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


def _lookup_keys(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Position of each query in ``keys`` (first occurrence), or -1."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    pos = np.clip(np.searchsorted(sorted_keys, queries, "left"), 0, max(len(keys) - 1, 0))
    if len(keys) == 0:
        return np.full(len(queries), -1, np.int64)
    return np.where(sorted_keys[pos] == queries, order[pos], -1)


def _correlation_keys(api_proc: np.ndarray, api_corr: np.ndarray, gpu_proc: np.ndarray,
                      gpu_corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One int64 key per (process, correlation id); ids repeat across processes."""
    # Dense process indices by hashing: a handful of processes over millions of rows.
    enc = pa.array(np.concatenate([api_proc, gpu_proc])).dictionary_encode()
    inverse = np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64)
    width = int(max(api_corr.max(initial=0), gpu_corr.max(initial=0))) + 2
    if len(enc.dictionary) * width >= 2**62:
        raise CorrelationError("correlation ids too large to key; please report this file")
    a = inverse[: len(api_proc)] * width + api_corr + 1
    g = inverse[len(api_proc):] * width + gpu_corr + 1
    return a, g


def _api_by_correlation(api: pa.Table, procs: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """Position of the API call with each row's (process, correlation id), or -1. The API keys
    and the rows' keys come from one call, so they share one process numbering and width."""
    a_corr = np_col(api, "correlation_id", fill=-1)
    a_key, key = _correlation_keys(np_col(api, "process_key", fill=0), a_corr, procs, corr)
    found = _lookup_keys(np.where(a_corr >= 0, a_key, -1), key)
    return np.where(corr >= 0, found, -1)


def _match_gpu_ops(api: pa.Table, gpu: pa.Table) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray]:
    """GPU ops -> API call by (process, correlation id).

    Returns the GPU ops sorted by start, their start and end, and each GPU op's API call
    position (-1 without one).
    """
    g_start, g_end = np_col(gpu, "start_ns"), np_col(gpu, "end_ns")
    g_order = np.argsort(g_start, kind="stable")
    gpu = gpu.take(pa.array(g_order))
    g_api = _api_by_correlation(api, np_col(gpu, "process_key", fill=0), np_col(gpu, "correlation_id", fill=-1))
    return gpu, g_start[g_order], g_end[g_order], g_api


def correlate(profile: RawProfile) -> Model:
    """Build the op tree and attribute API calls and GPU ops to it.

    Args:
        profile: the normalized tables a reader produced.

    Returns:
        The model whose tables become the Parquet dataset.
    """
    info = profile.info
    r, api, gpu = profile.ranges, profile.api_calls, profile.gpu_ops

    # --- ranges: clamp open ends, index threads, sort into tree order ----------------
    r_start = np_col(r, "start_ns")
    raw_end = r.column("end_ns").combine_chunks()
    times = [r_start, np_col(api, "start_ns"), np_col(api, "end_ns")]
    hi_all = int(max((int(t.max()) for t in times if len(t)), default=0))
    capture_end = info.capture_end_ns if info.capture_end_ns is not None else hi_all
    capture_end = max(capture_end, hi_all)
    r_end = np.asarray(raw_end.fill_null(capture_end).to_numpy(zero_copy_only=False))
    r_end = np.maximum(r_end, r_start)
    flags = np.zeros(r.num_rows, np.int64)
    open_end = np.asarray(raw_end.is_null().to_numpy(zero_copy_only=False))
    if info.kind == "nsys" and info.capture_end_ns is not None:
        # Some exporters store a never-closed range's end as the capture end itself.
        open_end |= np.asarray(raw_end.fill_null(0).to_numpy(zero_copy_only=False)) == info.capture_end_ns
    flags[open_end] |= OPEN_AT_END
    cross = np.asarray(r.column("end_thread_key").combine_chunks().is_valid().to_numpy(zero_copy_only=False))
    flags[cross] |= CROSS_THREAD
    del open_end, raw_end

    # Dense thread indices by hashing (no sort): any order serves the per-thread keys.
    keys = np.concatenate([np_col(r, "thread_key"), np_col(api, "thread_key")]).astype(np.int64)
    tinv = np.asarray(pa.array(keys).dictionary_encode().indices.to_numpy(zero_copy_only=False)).astype(np.int64)
    r_thread, api_thread = tinv[: r.num_rows], tinv[r.num_rows:]
    del keys, tinv
    # Output order: by start, thread, longer first, push order. Exports list NVTX rows in
    # that order already, so the reorder (a copy of every name) is usually skipped.
    r_key = np_col(r, "thread_key")
    if not _in_output_order(r_start, r_end, r_key):
        order = np.lexsort((np.arange(r.num_rows), -r_end, r_key, r_start))
        r = r.take(pa.array(order))
        r_start, r_end, r_thread = r_start[order], r_end[order], r_thread[order]
        flags, cross = flags[order], cross[order]

    # Name parsing (Arrow string work) and the GPU-op matching (Arrow take, NumPy sorts) release
    # the GIL: run them beside the range forest below (two cores), and join when needed.
    pool = ThreadPoolExecutor(max_workers=2)
    parsing = pool.submit(names.parse, r.column("name"))
    matching = pool.submit(_match_gpu_ops, api, gpu)
    pool.shutdown(wait=False)  # the submitted work still runs; nothing is left behind on errors

    lo = int(min((int(t.min()) for t in times if len(t)), default=0))
    hi = max(capture_end, int(r_end.max(initial=0)))
    # The forest wants (thread, start, -end) order; tree_idx maps its rows to output rows.
    candidates = np.flatnonzero(~cross)
    # Rows are in (start, thread, -end) order, so a stable sort by thread alone gives it.
    tree_idx = candidates[np.argsort(r_thread[candidates], kind="stable")]
    forest = Forest(r_thread[tree_idx], r_start[tree_idx], r_end[tree_idx], lo, hi)
    flags[tree_idx[forest.crossing]] |= CROSSING
    in_tree = np.zeros(r.num_rows, bool)
    in_tree[tree_idx[~forest.crossing]] = True

    n = r.num_rows
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

    # --- API calls -> innermost range on their thread --------------------------------
    # Kept in the export's order (by start): the lookup needs no sorted queries.
    a_start, a_end = np_col(api, "start_ns"), np_col(api, "end_ns")
    host = forest.innermost(api_thread, a_start, np.maximum(a_end, a_start))
    api_op = _through(tree_idx, host)
    # 2M ranges make each of these 16 MB: drop what the rest does not need.
    del forest, host, tree_idx, candidates, r_thread, api_thread, cross, outside

    gpu, g_start, g_end, g_api = matching.result()
    g_op = _through(api_op, g_api)
    g_dur = g_end - g_start
    g_flags = np.where(g_api < 0, NO_API_CALL, 0).astype(np.int64)

    # --- self and total times ----------------------------------------------------------
    dur = r_end - r_start
    tree_parent_all = np.where(in_tree, parent, -1)
    self_gpu = sum_by(g_op, g_dur, n)
    self_count = np.bincount(g_op[g_op >= 0], minlength=n).astype(np.int64)
    api_count = np.bincount(api_op[api_op >= 0], minlength=n).astype(np.int64)
    child_cpu = sum_by(tree_parent_all, dur, n)
    big = np.iinfo(np.int64).max
    g_first = np.full(n, big, np.int64)
    g_last = np.full(n, -big, np.int64)
    has = g_op >= 0
    np.minimum.at(g_first, g_op[has], g_start[has])
    np.maximum.at(g_last, g_op[has], g_end[has])
    total_gpu, total_count = self_gpu.copy(), self_count.copy()
    # Roll subtree totals up one level at a time, deepest first. One stable sort by depth
    # (a radix sort on int16) groups every level; only ops with GPU work below them move.
    tree_kids = np.flatnonzero(tree_parent_all >= 0)
    by_depth = tree_kids[np.argsort(np.minimum(depth[tree_kids], 2**15 - 1).astype(np.int16), kind="stable")]
    bounds = np.searchsorted(depth[by_depth], np.arange(int(depth.max(initial=0)) + 2))
    for d in range(int(depth.max(initial=0)), 0, -1):
        level = by_depth[bounds[d]:bounds[d + 1]]
        kids = level[total_count[level] > 0]
        up = tree_parent_all[kids]
        np.add.at(total_gpu, up, total_gpu[kids])
        np.add.at(total_count, up, total_count[kids])
        np.minimum.at(g_first, up, g_first[kids])
        np.maximum.at(g_last, up, g_last[kids])
    has_gpu = total_count > 0

    r_pid = np_col(r, "process_id", fill=0)
    end_thread = r.column("end_thread_key").combine_chunks()
    ops = pa.table({
        "op_id": pa.array(np.arange(n, dtype=np.int64)),
        "parent_id": pa.array(parent, mask=parent < 0),
        "depth": pa.array(depth),
        "name": r.column("name").cast(pa.string()),
        "domain": r.column("domain").cast(DICT_STR),
        "domain_id": r.column("domain_id"),
        "process_id": pa.array(r_pid),
        "thread_id": r.column("thread_id"),
        "start_ns": pa.array(r_start),
        "end_ns": pa.array(r_end),
        "self_cpu_ns": pa.array(np.where(in_tree, dur - child_cpu, dur)),
        "total_cpu_ns": pa.array(dur),
        "self_gpu_ns": pa.array(self_gpu),
        "total_gpu_ns": pa.array(total_gpu),
        "gpu_op_count": pa.array(self_count),
        "total_gpu_op_count": pa.array(total_count),
        "api_call_count": pa.array(api_count),
        "gpu_start_ns": pa.array(g_first, mask=~has_gpu),
        "gpu_end_ns": pa.array(g_last, mask=~has_gpu),
        "style": r.column("style").cast(DICT_STR),
        "end_thread_id": pc.bit_wise_and(end_thread, pa.scalar(0xFFFFFF if info.kind == "nsys" else 0xFFFFFFFF)),
        "flags": pa.array(flags),
    })

    api_pos = np.arange(api.num_rows, dtype=np.int64)
    api_gpu_count = np.bincount(g_api[g_api >= 0], minlength=api.num_rows).astype(np.int64)
    api_calls = pa.table({
        "api_call_id": pa.array(api_pos),
        "op_id": pa.array(api_op, mask=api_op < 0),
        "name": api.column("name").cast(DICT_STR),
        "kind": api.column("kind"),
        "process_id": api.column("process_id"),
        "thread_id": api.column("thread_id"),
        "correlation_id": api.column("correlation_id"),
        "start_ns": pa.array(a_start),
        "end_ns": pa.array(a_end),
        "gpu_op_count": pa.array(api_gpu_count),
        "return_value": api.column("return_value"),
    })

    g_pid_from_api = _through(np_col(api, "process_id", fill=0), g_api)
    g_tid_from_api = _through(np_col(api, "thread_id", fill=0), g_api)
    g_pkey = np_col(gpu, "process_key", fill=0)
    # Without an API row, nsys still knows the process from globalPid; nvprof does not.
    g_pid = np.where(g_api >= 0, g_pid_from_api, (g_pkey >> 24) & 0xFFFFFF)
    g_pid_known = (g_api >= 0) | (info.kind == "nsys")
    gpu_cols = {
        "gpu_op_id": pa.array(np.arange(gpu.num_rows, dtype=np.int64)),
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
        "start_ns": pa.array(g_start),
        "end_ns": pa.array(g_end),
    }
    for name in ("bytes", "copy_kind", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                 "registers_per_thread", "static_shared_bytes", "dynamic_shared_bytes",
                 "short_name", "mangled_name", "graph_node_id"):
        gpu_cols[name] = gpu.column(name)
    gpu_cols["flags"] = pa.array(g_flags)
    gpu_ops = pa.table(gpu_cols)

    ops = semantics.annotate(ops, parsing.result())
    return Model(info, ops, api_calls, gpu_ops, _marks(profile), _syncs(profile, api),
                 _threads(profile), _devices(profile, gpu_ops))


def _marks(profile: RawProfile) -> pa.Table:
    m = profile.marks
    return m.sort_by([("ts_ns", "ascending")])


def _syncs(profile: RawProfile, api: pa.Table) -> pa.Table:
    s = profile.syncs
    s_api = _api_by_correlation(api, np_col(s, "process_key", fill=0), np_col(s, "correlation_id", fill=-1))
    out = s.append_column("api_call_id", pa.array(s_api, mask=s_api < 0))
    return out.sort_by([("start_ns", "ascending")])


def _threads(profile: RawProfile) -> pa.Table:
    return profile.threads.drop_columns(["thread_key"]).sort_by(
        [("process_id", "ascending"), ("thread_id", "ascending")])


def _devices(profile: RawProfile, gpu_ops: pa.Table) -> pa.Table:
    """Devices the report names, plus any device a GPU op ran on that it does not name."""
    known = profile.devices
    seen = set(np_col(known, "device_id", fill=-1).tolist())
    extra = sorted({int(d) for d in np.unique(np_col(gpu_ops, "device_id", fill=-1)) if d >= 0} - seen)
    extra_t = pa.table({"device_id": pa.array(extra, pa.int64()), "name": pa.nulls(len(extra), pa.string())})
    return pa.concat_tables([known.cast(extra_t.schema), extra_t]).sort_by([("device_id", "ascending")])


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
