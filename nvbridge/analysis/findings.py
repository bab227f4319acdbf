"""advise's detectors: each turns a report's rows into evidence, one interval per row.

An interval is the wall time at stake on a lane (a rank's GPU timeline) for one row: the GPU
idling after a host sync, a gap in GPU work, a pageable copy, a launch call longer than its
kernel, an NCCL kernel not hidden behind compute, a slow rank's extra step time. Rows carry the
op they belong to; advise groups them into findings and counts overlapping time once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from nvbridge.analysis import spans
from nvbridge.analysis.context import DTOH, HTOD, Context, codes
from nvbridge.columns import np_col
from nvbridge.gpu import cuda_api

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


def strings(column: pa.ChunkedArray) -> np.ndarray:
    """A string column as a NumPy object array (built from its few distinct values)."""
    idx, values = codes(column)
    out: np.ndarray = np.asarray(values, dtype=object)[idx]
    return out


def memory_kind(gpu_ops: pa.Table, side: str) -> np.ndarray:
    """``src_kind``/``dst_kind`` as strings; all None for a dataset written before they existed
    (its copies are then never called pageable)."""
    if side not in gpu_ops.column_names:
        return np.full(gpu_ops.num_rows, None, dtype=object)
    return strings(gpu_ops.column(side))


def idle_after(ctx: Context, lane: np.ndarray, t: np.ndarray) -> np.ndarray:
    """End of the GPU idle time that starts at t on each lane (t itself where the lane is busy
    at t, or where no GPU work follows)."""
    enc = ctx.enc(lane, t)
    s, e = ctx.busy
    if not len(s):  # no GPU work at all (API calls traced without their GPU activity)
        return t
    i = np.searchsorted(s, enc, "right") - 1
    busy_now = (i >= 0) & (e[np.maximum(i, 0)] > enc)
    nxt = np.minimum(i + 1, len(s) - 1)
    has_next = (i + 1 < len(s)) & (s[nxt] // spans.LANE_NS == lane)
    return np.where(busy_now | ~has_next | (lane < 0), t, t + (s[nxt] - enc))


BLOCK = 1 << 20  # queries of _innermost_at handled at once: its temporaries stay tens of MB


def _innermost_at(ctx: Context, thread: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Innermost op row on each thread containing time t (-1 none): the last op starting at
    or before t on the thread, or its nearest ancestor that is still open at t."""
    pos = np.full(len(t), -1, np.int64)
    # one queried thread at a time (the lanes' launching threads: a few), sorted by start: a
    # sort of every op by (thread, start) took 0.8 GB at 10M ops
    for q in np.unique(thread).tolist():
        rows = np.flatnonzero(ctx.op_thread == q)
        if not len(rows):
            continue
        rows = rows[np.argsort(ctx.op_start[rows], kind="stable")]
        starts = ctx.op_start[rows]
        asked = np.flatnonzero(thread == q)
        for at in range(0, len(asked), BLOCK):
            some = asked[at : at + BLOCK]
            j = np.searchsorted(starts, t[some], "right") - 1
            pos[some] = np.where(j >= 0, rows[np.maximum(j, 0)], -1)
    for at in range(0, len(t), BLOCK):  # up the parents, a block of queries at a time
        mine, when = pos[at : at + BLOCK], t[at : at + BLOCK]  # views: pos is updated in place
        todo = np.flatnonzero(mine >= 0)
        while len(todo):
            closed = ctx.op_end[mine[todo]] <= when[todo]
            todo = todo[closed]
            mine[todo] = ctx.op_parent[mine[todo]]
            todo = todo[mine[todo] >= 0]
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
            # only those inside a gap can start a piece, and a piece ends at the latest at its
            # gap's end (a cut point too): the others are dropped before the sort
            at = ctx.enc(np.full(len(t), k), t)
            cuts.append(at[spans.inside(gaps, at)])
    points = np.concatenate(cuts)
    del cuts  # the arrays no longer needed go as soon as they can: 10M ops give 8M pieces
    points.sort()
    points = spans.distinct(points)
    keep = spans.inside(gaps, points[:-1])
    lo, hi = points[:-1][keep], points[1:][keep]
    del points, keep
    lane = lo // spans.LANE_NS
    gap = np.searchsorted(gaps[0], lo, "right") - 1
    start, end = lo - lane * spans.LANE_NS + ctx.t0, hi - lane * spans.LANE_NS + ctx.t0
    del lo, hi
    row = _innermost_at(ctx, main[lane], start + (end - start) // 2) if len(lane) else np.zeros(0, np.int64)
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


def uncovered(ctx: Context, rows: np.ndarray, cover: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The time of GPU op ``rows`` on their lanes that no GPU op of ``cover`` (a mask) runs in:
    (owner row, start, end) of each piece, absolute times. A piece belongs to the op of
    ``rows`` that started last before it (the one running at its start)."""
    g = ctx.report.gpu_ops
    s, e = ctx.enc(ctx.gpu_lane, np_col(g, "start_ns")), ctx.enc(ctx.gpu_lane, np_col(g, "end_ns"))
    pieces = spans.minus(spans.union(s[rows], e[rows]), spans.union(s[cover], e[cover]))
    order = rows[np.argsort(s[rows], kind="stable")]
    owner = order[np.maximum(np.searchsorted(s[order], pieces[0], "right") - 1, 0)] if len(order) else order
    lane = pieces[0] // spans.LANE_NS
    return owner, pieces[0] - lane * spans.LANE_NS + ctx.t0, pieces[1] - lane * spans.LANE_NS + ctx.t0


def gpu_time(
    ctx: Context,
    kind: str,
    rows: np.ndarray,
    cover: np.ndarray,
    figures: Mapping[str, np.ndarray],
    event: np.ndarray | None = None,
    group: np.ndarray | None = None,
) -> Evidence:
    """Evidence of GPU op ``rows`` for their time that no op of ``cover`` hides (pieces, see
    :func:`uncovered`), with each row's ``figures`` on a row of its own that holds no time (so
    a copy hidden under kernels still counts its bytes). ``event``/``group`` per row: what
    the pieces of a row inherit (default: one occurrence per row)."""
    order = np.argsort(rows, kind="stable")  # by row, to find each piece's row by a search
    rows = rows[order]
    event = rows if event is None else event[order]
    group = None if group is None else group[order]
    figures = {k: v[order] for k, v in figures.items()}
    owner, start, end = uncovered(ctx, rows, cover)
    at = np.searchsorted(rows, owner)
    g = ctx.report.gpu_ops
    op = np_col(g, "op_id", fill=-1)
    s0 = np_col(g, "start_ns")[rows]
    return Evidence(
        kind,
        np.concatenate([op[rows], op[owner]]),
        np.concatenate([ctx.gpu_lane[rows], ctx.gpu_lane[owner]]),
        np.concatenate([s0, start]),
        np.concatenate([s0, end]),
        {k: np.concatenate([v, np.zeros(len(owner), np.int64)]) for k, v in figures.items()},
        event=np.concatenate([event, event[at]]),
        group=None if group is None else np.concatenate([group, group[at]]),
    )


def copies(ctx: Context, blocking: np.ndarray) -> list[Evidence]:
    """Host<->device copies whose host side is pageable memory, then every other copy, each
    for its GPU time that no kernel hides, and many small copies from one op (the time of
    their API calls). ``blocking``: GPU op rows of blocking copies, counted elsewhere."""
    g, api = ctx.report.gpu_ops, ctx.report.api_calls
    src, dst = memory_kind(g, "src_kind"), memory_kind(g, "dst_kind")
    nbytes = np_col(g, "bytes", fill=0)
    op = np_col(g, "op_id", fill=-1)
    memcpy = ctx.gpu_kind == "memcpy"
    memcpy[blocking] = False
    hide = ctx.compute | ctx.nccl
    pageable = memcpy & ((src == "pageable") | (dst == "pageable"))
    out = []
    for name, rows in (
        ("pageable_copy", np.flatnonzero(pageable)),
        ("exposed_copies", np.flatnonzero(memcpy & ~pageable)),
    ):
        out.append(gpu_time(ctx, name, rows, hide, copy_figures(ctx, rows), group=ctx.direction[rows]))
    call = np_col(g, "api_call_id", fill=-1)
    small = memcpy & ~pageable & (nbytes < SMALL_COPY_BYTES) & (call >= 0) & (op >= 0)
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


def copy_figures(ctx: Context, rows: np.ndarray) -> dict[str, np.ndarray]:
    """Per copy: bytes (and by direction), one copy, its GPU time, whether host memory was pageable."""
    gpu_ops = ctx.report.gpu_ops
    nbytes = np_col(gpu_ops, "bytes", fill=0)[rows]
    way = ctx.direction[rows]
    src, dst = memory_kind(gpu_ops, "src_kind")[rows], memory_kind(gpu_ops, "dst_kind")[rows]
    host = np.where(way == HTOD, src, np.where(way == DTOH, dst, None))
    return {
        "bytes": nbytes,
        "htod_bytes": np.where(way == HTOD, nbytes, 0),
        "dtoh_bytes": np.where(way == DTOH, nbytes, 0),
        "copies": np.ones(len(rows), np.int64),
        "pageable": (host == "pageable").astype(np.int64),
        "copy_ns": (np_col(gpu_ops, "end_ns") - np_col(gpu_ops, "start_ns"))[rows],
    }


def startup(ctx: Context) -> Evidence:
    """Start-up inside the GPU timeline: calls that create a context or load code (by name),
    and a kernel's first launch in its process when it takes over LAUNCH_SLOW_NS (lazy module
    loading), for the GPU idle time they cover. Start-up before a lane's first GPU op is the
    timeline's ``startup_ns`` (nvbridge.dataset.timeline), outside every finding."""
    g, api = ctx.report.gpu_ops, ctx.report.api_calls
    cls = cuda_api.classes(api.column("name"))
    a_s, a_e = np_col(api, "start_ns"), np_col(api, "end_ns")
    call = np_col(g, "api_call_id", fill=-1)
    kernel = (ctx.gpu_kind == "kernel") & (call >= 0)
    name_code, _ = codes(g.column("name"))
    rows = np.flatnonzero(kernel)
    rows = rows[np.lexsort((np_col(g, "start_ns")[rows], name_code[rows], ctx.gpu_lane[rows]))]
    first = np.ones(len(rows), bool)  # the first launch of each kernel name on each lane
    first[1:] = (name_code[rows][1:] != name_code[rows][:-1]) | (ctx.gpu_lane[rows][1:] != ctx.gpu_lane[rows][:-1])
    rows = rows[first]
    rows = rows[(a_e - a_s)[call[rows]] > LAUNCH_SLOW_NS]
    setup = np.flatnonzero(cls == cuda_api.SETUP)
    lane = np.concatenate([ctx.gpu_lane[rows], ctx.main_lane(np_col(api, "process_id", fill=-1)[setup])])
    calls = np.concatenate([call[rows], setup])
    keep = lane >= 0
    lane, calls = lane[keep], calls[keep]
    s, e = ctx.enc(lane, a_s[calls]), ctx.enc(lane, a_e[calls])
    pieces = spans.minus(spans.union(s, e), ctx.busy)  # only the time the GPU waited
    order = np.argsort(s, kind="stable")
    at = order[np.maximum(np.searchsorted(s[order], pieces[0], "right") - 1, 0)] if len(order) else order
    p_lane = pieces[0] // spans.LANE_NS
    start, end = pieces[0] - p_lane * spans.LANE_NS + ctx.t0, pieces[1] - p_lane * spans.LANE_NS + ctx.t0
    op = np_col(api, "op_id", fill=-1)[calls[at]] if len(at) else np.zeros(0, np.int64)
    return Evidence("startup", op, p_lane, start, end, {"call_ns": end - start}, event=calls[at] if len(at) else at)


def launch_bound(ctx: Context) -> Evidence:
    """Kernels that ran shorter than the API call that launched them, and kernels of op calls
    that launched many tiny ones: launching is the bottleneck (fewer, larger kernels:
    torch.compile, CUDA graphs). Only ops (by name and module) with LAUNCH_BOUND_MIN of them."""
    g, api = ctx.report.gpu_ops, ctx.report.api_calls
    kernel = ctx.gpu_kind == "kernel"
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
    """NCCL kernel time on a lane not overlapped by any compute (kernels, memsets, graph launches) of that lane;
    each exposed piece belongs to the NCCL kernel running at its start."""
    g = ctx.report.gpu_ops
    owner, start, end = uncovered(ctx, np.flatnonzero(ctx.nccl), ctx.compute)
    return Evidence("nccl_exposed", np_col(g, "op_id", fill=-1)[owner], ctx.gpu_lane[owner], start, end, per_lane=True)


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
