"""advise's detectors: each turns a report's rows into evidence, one interval per row.

An interval is the wall time at stake on a lane (a rank's GPU timeline) for one row: the GPU
idling after a host sync, a gap in GPU work, a pageable copy, a launch call longer than its
kernel, an NCCL kernel not hidden behind compute, a slow rank's extra step time. Rows carry the
op they belong to; advise groups them into findings and counts overlapping time once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.analysis import spans
from nvbridge.analysis.context import Context, codes
from nvbridge.columns import np_col

# Host syncs that block the calling thread (``Stream wait`` makes a stream wait, not the host;
# cudaEventQuery only polls).
BLOCKING_SYNCS = ("Event sync", "Stream sync", "Context sync")
SMALL_COPY_BYTES = 64 << 10
SMALL_COPIES_MIN = 10  # copies of one op before "small copies in a loop" is worth a finding
LAUNCH_BOUND_MIN = 10  # launch-bound kernels of one op (name and module) before it is a finding
TINY_KERNELS_MIN, TINY_KERNEL_NS = 8, 10_000  # "many tiny kernels" from one op call
LAUNCH_SLOW_NS = 1_000_000


@dataclass(frozen=True)
class Evidence:
    """Rows of one finding kind: op row (-1 none), lane, absolute [start, end), per-row figures."""

    kind: str
    op_row: np.ndarray
    lane: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    figures: dict[str, np.ndarray] = field(default_factory=dict)
    per_lane: bool = False  # one finding per lane (per rank) rather than per op across ranks
    event: np.ndarray | None = None  # rows with one id are one occurrence (pieces of one gap)
    group: np.ndarray | None = None  # a further grouping key (below_roofline: shapes and dtype)


def _strings(column: pa.ChunkedArray) -> np.ndarray:
    """A string column as a NumPy object array (built from its few distinct values)."""
    idx, values = codes(column)
    out: np.ndarray = np.asarray(values, dtype=object)[idx]
    return out


def _memory_kind(gpu_ops: pa.Table, side: str) -> np.ndarray:
    """``src_kind``/``dst_kind`` as strings; all None for a dataset written before they existed
    (its copies are then never called pageable)."""
    if side not in gpu_ops.column_names:
        return np.full(gpu_ops.num_rows, None, dtype=object)
    return _strings(gpu_ops.column(side))


def _idle_after(ctx: Context, lane: np.ndarray, t: np.ndarray) -> np.ndarray:
    """End of the GPU idle time that starts at t on each lane (t itself where the lane is busy
    at t, or where no GPU work follows)."""
    enc = ctx.enc(lane, t)
    s, e = ctx.busy
    i = np.searchsorted(s, enc, "right") - 1
    busy_now = (i >= 0) & (e[np.maximum(i, 0)] > enc)
    nxt = np.minimum(i + 1, len(s) - 1)
    has_next = (i + 1 < len(s)) & (s[nxt] // spans.LANE_NS == lane)
    return np.where(busy_now | ~has_next | (lane < 0), t, t + (s[nxt] - enc))


def _sync_device(ctx: Context, process: np.ndarray, stream: np.ndarray, device: np.ndarray) -> np.ndarray:
    """The device whose GPU ops ran on the synced stream of that process: a sync's own device id
    can be the process's CUDA ordinal, not the global id its kernels carry (real FSDP export)."""
    g = ctx.report.gpu_ops
    key = np_col(g, "process_id", fill=-1) * (1 << 32) + np_col(g, "stream_id", fill=-1)
    uniq, first = np.unique(key, return_index=True)
    if not len(uniq):
        return device
    want = process * (1 << 32) + stream
    pos = np.clip(np.searchsorted(uniq, want), 0, len(uniq) - 1)
    dev = np_col(g, "device_id", fill=-1)[first[pos]]
    return np.where(uniq[pos] == want, dev, device)


def host_syncs(ctx: Context) -> Evidence:
    """Blocking syncs and blocking device-to-host copies: the GPU idle time after each wait, up
    to the length of the wait."""
    r = ctx.report
    sy, api = r.syncs, r.api_calls
    api_op = np_col(api, "op_id", fill=-1)
    api_proc = np_col(api, "process_id", fill=-1)
    api_name = _strings(api.column("name"))
    call = np_col(sy, "api_call_id", fill=-1)
    kind = _strings(sy.column("sync_type"))
    ok = np.isin(kind, BLOCKING_SYNCS) & (call >= 0)
    ok[ok] = np.char.find(api_name[call[ok]].astype(str), "Query") < 0
    call = call[ok]
    w_start, w_end = np_col(sy, "start_ns")[ok], np_col(sy, "end_ns")[ok]
    lane = ctx.lane_of(
        api_proc[call],
        _sync_device(ctx, api_proc[call], np_col(sy, "stream_id", fill=-1)[ok], np_col(sy, "device_id", fill=-1)[ok]),
    )
    # A device-to-host copy into pageable memory, or by a synchronous cudaMemcpy, returns only
    # when the copy is done: the host waited for the GPU through the whole call.
    g = r.gpu_ops
    gcall = np_col(g, "api_call_id", fill=-1)
    copy_kind = _strings(g.column("copy_kind"))
    dst = _memory_kind(g, "dst_kind")
    d2h = (copy_kind == "DtoH") & (gcall >= 0) & ~np.isin(gcall, call)
    d2h[d2h] = (dst[d2h] == "pageable") | (np.char.find(api_name[gcall[d2h]].astype(str), "Async") < 0)
    c = gcall[d2h]
    lane = np.concatenate([lane, ctx.gpu_lane[d2h]])
    call = np.concatenate([call, c])
    w_start = np.concatenate([w_start, np_col(api, "start_ns")[c]])
    w_end = np.concatenate([w_end, np_col(api, "end_ns")[c]])
    # Without the wait the host would have gone on that much earlier, so at most the wait of
    # the GPU's idle time after it can be won back.
    idle_end = np.minimum(_idle_after(ctx, lane, w_end), w_end + (w_end - w_start))
    return Evidence("host_sync", api_op[call], lane, w_end, idle_end, {"wait_ns": w_end - w_start})


def _innermost_at(ctx: Context, thread: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Innermost op row on each thread containing time t (-1 none): the last op starting at
    or before t on the thread, or its nearest ancestor that is still open at t."""
    if not len(ctx.op_start):
        return np.full(len(t), -1, np.int64)
    threads = np.unique(ctx.op_thread)
    ti = np.searchsorted(threads, ctx.op_thread)
    key = ti * spans.LANE_NS + (ctx.op_start - ctx.t0)  # (thread, start) as one sortable number
    order = np.argsort(key, kind="stable")
    qi = np.clip(np.searchsorted(threads, thread), 0, max(len(threads) - 1, 0))
    known = (len(threads) > 0) & (threads[qi] == thread) if len(threads) else np.zeros(len(t), bool)
    j = np.searchsorted(key[order], qi * spans.LANE_NS + (t - ctx.t0), "right") - 1
    same = (j >= 0) & known
    same[same] = ti[order[j[same]]] == qi[same]
    pos = np.where(same, order[np.maximum(j, 0)], -1).astype(np.int64)
    todo = np.flatnonzero(pos >= 0)
    while len(todo):
        closed = ctx.op_end[pos[todo]] <= t[todo]
        todo = todo[closed]
        pos[todo] = ctx.op_parent[pos[todo]]
        todo = todo[pos[todo] >= 0]
    return pos


def gpu_idle(ctx: Context) -> Evidence:
    """GPU idle gaps per lane, inside each step (or between a lane's first and last GPU op),
    cut where ops on the lane's launching thread begin or end, so each piece goes to the
    innermost host op running through it (counted once per gap it appears in)."""
    n = len(ctx.lane_process)
    first = np.full(n, np.iinfo(np.int64).max)
    last = np.full(n, np.iinfo(np.int64).min)
    s, e = ctx.busy
    lane_of_busy = s // spans.LANE_NS
    np.minimum.at(first, lane_of_busy, s)
    np.maximum.at(last, lane_of_busy, e)
    plain = ~np.isin(np.arange(n), ctx.step_lane) & (first <= last)
    win_s = np.concatenate([ctx.step_start, first[plain]])
    win_e = np.concatenate([ctx.step_end, last[plain]])
    gaps = spans.minus(spans.union(win_s, win_e), ctx.busy)
    main = _launch_threads(ctx)
    cuts = [gaps[0], gaps[1]]
    for k in range(n):  # op boundaries on each lane's launching thread, on the lane's time axis
        mine = ctx.op_thread == main[k]
        for t in (ctx.op_start[mine], ctx.op_end[mine]):
            cuts.append(ctx.enc(np.full(len(t), k), t))
    points = spans.distinct(np.sort(np.concatenate(cuts)))
    lo, hi = points[:-1], points[1:]
    keep = spans.inside(gaps, lo)
    lo, hi = lo[keep], hi[keep]
    lane = lo // spans.LANE_NS
    start, end = lo - lane * spans.LANE_NS + ctx.t0, hi - lane * spans.LANE_NS + ctx.t0
    row = _innermost_at(ctx, main[lane], start + (end - start) // 2) if len(lane) else np.zeros(0, np.int64)
    gap = np.searchsorted(gaps[0], lo, "right") - 1
    return Evidence("gpu_idle", row, lane, start, end, event=gap)


def _launch_threads(ctx: Context) -> np.ndarray:
    """Per lane, the thread that launched most of its GPU work (-1: none known)."""
    threads = np_col(ctx.report.gpu_ops, "thread_id", fill=-1)
    main = np.full(len(ctx.lane_process), -1, np.int64)
    for k in range(len(main)):  # a few lanes
        t = threads[(ctx.gpu_lane == k) & (threads >= 0)]
        if len(t):
            vals, cnt = np.unique(t, return_counts=True)
            main[k] = vals[np.argmax(cnt)]
    return main


def copies(ctx: Context) -> list[Evidence]:
    """Pageable host<->device copies (their GPU time), and many small copies from one op (the
    time of their API calls)."""
    g, api = ctx.report.gpu_ops, ctx.report.api_calls
    kind = _strings(g.column("kind"))
    src, dst = _memory_kind(g, "src_kind"), _memory_kind(g, "dst_kind")
    copy_kind = _strings(g.column("copy_kind"))
    nbytes = np_col(g, "bytes", fill=0)
    op = np_col(g, "op_id", fill=-1)
    s, e = np_col(g, "start_ns"), np_col(g, "end_ns")
    memcpy = kind == "memcpy"
    blocking = (copy_kind == "DtoH") & (dst == "pageable")  # a host sync: host_syncs has it
    pageable = memcpy & ((src == "pageable") | (dst == "pageable")) & ~blocking
    out = [
        Evidence(
            "pageable_copy", op[pageable], ctx.gpu_lane[pageable], s[pageable], e[pageable], {"bytes": nbytes[pageable]}
        )
    ]
    call = np_col(g, "api_call_id", fill=-1)
    small = memcpy & ~pageable & ~blocking & (nbytes < SMALL_COPY_BYTES) & (call >= 0) & (op >= 0)
    if small.any():
        per_op = np.bincount(op[small], minlength=len(ctx.op_name))
        small &= per_op[np.maximum(op, 0)] >= SMALL_COPIES_MIN
    c = call[small]
    out.append(
        Evidence(
            "small_copies",
            op[small],
            ctx.gpu_lane[small],
            np_col(api, "start_ns")[c],
            np_col(api, "end_ns")[c],
            {"bytes": nbytes[small]},
        )
    )
    return out


def launch_bound(ctx: Context) -> Evidence:
    """Kernels that ran shorter than the API call that launched them, and kernels of op calls
    that launched many tiny ones: launching is the bottleneck (fewer, larger kernels:
    torch.compile, CUDA graphs). Only ops (by name and module) with LAUNCH_BOUND_MIN of them."""
    g, api = ctx.report.gpu_ops, ctx.report.api_calls
    kernel = _strings(g.column("kind")) == "kernel"
    call = np_col(g, "api_call_id", fill=-1)
    op = np_col(g, "op_id", fill=-1)
    k_ns = np_col(g, "end_ns") - np_col(g, "start_ns")
    a_s, a_e = np_col(api, "start_ns"), np_col(api, "end_ns")
    ok = kernel & (call >= 0) & (op >= 0)
    if not ok.any():
        none = np.zeros(0, np.int64)
        return Evidence("launch_bound", none, none, none, none, {"kernel_ns": none, "launch_ns": none})
    # a launch call over LAUNCH_SLOW_NS is one-time set-up (lazy module loading), not overhead
    launch = (a_e - a_s)[np.maximum(call, 0)]
    ok &= launch <= LAUNCH_SLOW_NS
    short = ok & (k_ns < launch)
    # many tiny kernels from one op call: TINY_KERNELS_MIN or more, averaging under TINY_KERNEL_NS
    n_calls = len(ctx.op_name)
    per_call = np.bincount(op[ok], minlength=n_calls)
    ns_call = np.bincount(op[ok], weights=k_ns[ok], minlength=n_calls)
    tiny_call = (per_call >= TINY_KERNELS_MIN) & (ns_call < TINY_KERNEL_NS * np.maximum(per_call, 1))
    ok &= short | tiny_call[np.maximum(op, 0)]
    if ok.any():  # enough of them in one op (name and module) across its calls
        group = ctx.op_name[op[ok]] * (len(ctx.modules) + 1) + ctx.module[op[ok]]
        _, inverse, counts = np.unique(group, return_inverse=True, return_counts=True)
        ok[ok] = counts[inverse.ravel()] >= LAUNCH_BOUND_MIN
    c = call[ok]
    return Evidence(
        "launch_bound", op[ok], ctx.gpu_lane[ok], a_s[c], a_e[c], {"kernel_ns": k_ns[ok], "launch_ns": a_e[c] - a_s[c]}
    )


def nccl_exposed(ctx: Context) -> Evidence:
    """NCCL kernel time on a lane not overlapped by any other kernel of that lane."""
    g = ctx.report.gpu_ops
    kernel = _strings(g.column("kind")) == "kernel"
    nccl = kernel & np.asarray(
        pc.match_substring(g.column("name").cast("string"), "nccl", ignore_case=True)
        .fill_null(False)
        .to_numpy(zero_copy_only=False)
    )
    s, e = ctx.enc(ctx.gpu_lane, np_col(g, "start_ns")), ctx.enc(ctx.gpu_lane, np_col(g, "end_ns"))
    exposed = spans.minus(spans.union(s[nccl], e[nccl]), spans.union(s[kernel & ~nccl], e[kernel & ~nccl]))
    rows = np.flatnonzero(nccl)
    rows = rows[np.argsort(s[rows], kind="stable")]
    # each exposed piece lies inside the NCCL kernels' union: name it after the kernel that
    # started last before the piece (the one running at its start)
    k = rows[np.maximum(np.searchsorted(s[rows], exposed[0], "right") - 1, 0)] if len(rows) else rows
    lane = exposed[0] // spans.LANE_NS
    op = np_col(g, "op_id", fill=-1)[k] if len(k) else np.zeros(0, np.int64)
    return Evidence(
        "nccl_exposed",
        op,
        lane,
        exposed[0] - lane * spans.LANE_NS + ctx.t0,
        exposed[1] - lane * spans.LANE_NS + ctx.t0,
        per_lane=True,
    )


def rank_skew(ctx: Context) -> Evidence:
    """Per step, the slowest rank's extra time over the fastest (processes of one report), as
    the last part of the slowest rank's step."""
    lane, start, end, row = [], [], [], []
    steps = np.unique(ctx.step_number)
    for n in steps.tolist():  # a few steps
        m = np.flatnonzero(ctx.step_number == n)
        procs = ctx.lane_process[ctx.step_lane[m]]
        if len(np.unique(procs)) < 2:
            continue
        dur = ctx.step_end[m] - ctx.step_start[m]
        slow = m[np.argmax(dur)]
        skew = int(dur.max() - dur.min())
        lane.append(ctx.step_lane[slow])
        end.append(ctx.step_end[slow] - ctx.step_lane[slow] * spans.LANE_NS + ctx.t0)
        start.append(end[-1] - skew)
        row.append(-1)
    a = [np.asarray(x, np.int64) for x in (row, lane, start, end)]
    return Evidence("rank_skew", a[0], a[1], a[2], a[3], per_lane=True)


def report_skew(ctx: Context, skew_by_step: Mapping[int, int]) -> Evidence:
    """Skew across the reports of a partitioned dataset, for the report that was slowest in
    those steps: the last ``skew`` ns of each such step, on the report's lanes."""
    want = np.array([skew_by_step.get(int(n), 0) for n in ctx.step_number], np.int64)
    m = want > 0
    lane = ctx.step_lane[m]
    end = ctx.step_end[m] - lane * spans.LANE_NS + ctx.t0
    start = np.maximum(end - want[m], ctx.step_start[m] - lane * spans.LANE_NS + ctx.t0)
    return Evidence("rank_skew", np.full(len(lane), -1, np.int64), lane, start, end, per_lane=True)


DETECTORS: tuple[Callable[[Context], Evidence | list[Evidence]], ...] = (
    host_syncs,
    copies,
    launch_bound,
    nccl_exposed,
    rank_skew,
    gpu_idle,
)
