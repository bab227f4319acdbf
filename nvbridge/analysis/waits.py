"""The host waiting for the GPU: host syncs and blocking copies, told apart by their API calls.

Whether a call blocked the host is read from its name (nvbridge.gpu.cuda_api), never from the sync
codes exports store (they drift across Nsight Systems versions), and the host's blocked time is
the call's own duration: what the thread waited, not the span a SYNCHRONIZATION record claims.

A **blocking copy** is torch's own ``.cuda()``/``.cpu()``/``.item()``/``.to()``: a host<->device
copy the host waited for. Three shapes, per thread in call order:

- an async copy (``cudaMemcpyAsync``) followed by a host sync (``cudaStreamSynchronize``, ...)
  in the same op with no launch in between (what ``copy_`` does without ``non_blocking``);
  several copies before one sync are one blocking copy;
- a synchronous copy (``cudaMemcpy``, ``cuMemcpyDtoH_v2``) of host memory;
- an async copy from the device into pageable memory, which returns only when it is done.

Every other sync call (by name) is a **host sync**. Both carry ``wait_ns``, the summed duration
of the calls that block by name (syncs and synchronous copies), so that over all findings it
equals those calls' time per API name; a blocking copy also carries ``call_ns``, the time in its
async copy calls (the whole copy for pageable memory). The time at stake is the GPU idle time
after each wait, capped at the wait (docs/advise.md), plus a blocking copy's own GPU time.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from nvbridge.analysis.context import DTOH, HTOD, Context
from nvbridge.analysis.findings import Evidence, copy_figures, gpu_time, idle_after, memory_kind
from nvbridge.columns import np_col
from nvbridge.gpu import cuda_api

BLOCKING_COPY = "blocking_copy_sync"


def _next_barrier(ctx: Context, cls: np.ndarray) -> np.ndarray:
    """Per API call, the next call on its thread that launches GPU work or blocks the host
    (-1: none): what a copy is followed by."""
    api = ctx.report.api_calls
    proc, thread = np_col(api, "process_id", fill=-1), np_col(api, "thread_id", fill=-1)
    order = np.lexsort((np_col(api, "start_ns"), thread, proc))
    barrier = np.isin(cls[order], (cuda_api.SYNC, cuda_api.SYNC_COPY, cuda_api.LAUNCH))
    at = np.flatnonzero(barrier)
    j = np.searchsorted(at, np.arange(len(order)), "right")
    nxt = np.where(j < len(at), order[at[np.minimum(j, max(len(at) - 1, 0))]] if len(at) else -1, -1)
    same = (nxt >= 0) & (proc[np.maximum(nxt, 0)] == proc[order]) & (thread[np.maximum(nxt, 0)] == thread[order])
    out = np.full(len(order), -1, np.int64)
    out[order] = np.where(same, nxt, -1)
    return out


def _stream_device(ctx: Context, process: np.ndarray, stream: np.ndarray, device: np.ndarray) -> np.ndarray:
    """The device whose GPU ops ran on a synced stream of a process: a sync record's own device
    id can be the process's CUDA ordinal, not the global id its kernels carry (real FSDP export)."""
    g = ctx.report.gpu_ops
    key = np_col(g, "process_id", fill=-1) * (1 << 32) + np_col(g, "stream_id", fill=-1)
    uniq, first = np.unique(key, return_index=True)
    if not len(uniq):
        return device
    want = process * (1 << 32) + stream
    pos = np.clip(np.searchsorted(uniq, want), 0, len(uniq) - 1)
    out: np.ndarray = np.where(uniq[pos] == want, np_col(g, "device_id", fill=-1)[first[pos]], device)
    return out


def _sync_lanes(ctx: Context, call: np.ndarray) -> np.ndarray:
    """The lane each sync call waited on: the stream of its SYNCHRONIZATION record where one is
    joined to it, else its process's busiest lane."""
    api, sy = ctx.report.api_calls, ctx.report.syncs
    proc = np_col(api, "process_id", fill=-1)
    device = np.full(api.num_rows, -1, np.int64)
    s_call = np_col(sy, "api_call_id", fill=-1)
    ok = s_call >= 0
    device[s_call[ok]] = _stream_device(
        ctx, proc[s_call[ok]], np_col(sy, "stream_id", fill=-1)[ok], np_col(sy, "device_id", fill=-1)[ok]
    )
    lane = ctx.lane_of(proc[call], device[call])
    out: np.ndarray = np.where(lane >= 0, lane, ctx.main_lane(proc[call]))
    return out


def _capped(ctx: Context, lane: np.ndarray, w_end: np.ndarray, blocked: np.ndarray) -> np.ndarray:
    """End of the GPU idle time after each wait, at most as long as the wait itself (without
    the wait the host would have gone on that much earlier: no more can be won back)."""
    out: np.ndarray = np.minimum(idle_after(ctx, lane, w_end), w_end + blocked)
    return out


def waits(ctx: Context) -> tuple[list[Evidence], np.ndarray]:
    """Blocking copies and host syncs (see the module docstring), and the GPU op rows of the
    blocking copies (the copy findings leave them out)."""
    r = ctx.report
    api, g = r.api_calls, r.gpu_ops
    cls = cuda_api.classes(api.column("name"))
    a_e = np_col(api, "end_ns")
    dur = a_e - np_col(api, "start_ns")
    api_op = np_col(api, "op_id", fill=-1)
    gcall = np_col(g, "api_call_id", fill=-1)
    way = ctx.direction
    copy = np.flatnonzero(((way == HTOD) | (way == DTOH)) & (gcall >= 0))  # host-side copies
    c = gcall[copy]
    after = _next_barrier(ctx, cls)[c]
    followed = (cls[c] == cuda_api.ASYNC_COPY) & (after >= 0)
    followed[followed] = (cls[after[followed]] == cuda_api.SYNC) & (api_op[after[followed]] == api_op[c[followed]])
    # a copy from the device into pageable memory returns only when it is done
    pageable_dtoh = (way[copy] == DTOH) & (memory_kind(g, "dst_kind")[copy] == "pageable")
    alone = (cls[c] == cuda_api.SYNC_COPY) | ((cls[c] == cuda_api.ASYNC_COPY) & ~followed & pageable_dtoh)
    blocking = followed | alone
    rows = copy[blocking]
    event = np.where(followed[blocking], after[blocking], c[blocking])  # the call the host waited in last
    out = [_blocking_copies(ctx, rows, event, cls, dur)]
    # every other call that blocks by name is a host sync (a sync copy of device memory too)
    used = np.zeros(len(cls), bool)
    used[event] = True
    used[c[blocking]] = True
    call = np.flatnonzero(cuda_api.blocks_host(cls) & ~used)
    lane = _sync_lanes(ctx, call)
    end = _capped(ctx, lane, a_e[call], dur[call])
    out.append(Evidence("host_sync", api_op[call], lane, a_e[call], end, {"wait_ns": dur[call]}))
    return out, rows


def _blocking_copies(ctx: Context, rows: np.ndarray, event: np.ndarray, cls: np.ndarray, dur: np.ndarray) -> Evidence:
    """Evidence of blocking copies: each copy's GPU time that no kernel hides, and per wait
    (``event``, the call the host waited in last) the GPU idle time after it, capped at the
    time the host was blocked: that call and the async copy calls before it."""
    g, api = ctx.report.gpu_ops, ctx.report.api_calls
    order = np.argsort(rows, kind="stable")
    rows, event = rows[order], event[order]
    gcall = np_col(g, "api_call_id", fill=-1)[rows]
    way = ctx.direction[rows]
    parts = gpu_time(ctx, BLOCKING_COPY, rows, ctx.compute | ctx.nccl, copy_figures(ctx, rows), event, way)
    ev, first = np.unique(event, return_index=True)
    calls, at = np.unique(gcall, return_index=True)
    is_async = cls[calls] == cuda_api.ASYNC_COPY  # pageable copies block in these calls
    async_ns = np.zeros(len(ev), np.int64)
    np.add.at(async_ns, np.searchsorted(ev, event[at][is_async]), dur[calls][is_async])
    by_name = np.where(cuda_api.blocks_host(cls[ev]), dur[ev], 0)
    lane = ctx.gpu_lane[rows[first]]
    w_end = np_col(api, "end_ns")[ev]
    idle_end = _capped(ctx, lane, w_end, by_name + async_ns)
    zero = np.zeros(len(ev), np.int64)
    figures = {k: np.concatenate([v, zero]) for k, v in parts.figures.items()}
    n = len(parts.op_row)
    figures["wait_ns"] = np.concatenate([np.zeros(n, np.int64), by_name])
    figures["call_ns"] = np.concatenate([np.zeros(n, np.int64), async_ns])
    return Evidence(
        BLOCKING_COPY,
        np.concatenate([parts.op_row, np_col(api, "op_id", fill=-1)[gcall[first]]]),
        np.concatenate([parts.lane, lane]),
        np.concatenate([parts.start_ns, w_end]),
        np.concatenate([parts.end_ns, idle_end]),
        figures,
        event=np.concatenate([cast(np.ndarray, parts.event), ev]),  # gpu_time sets both
        group=np.concatenate([cast(np.ndarray, parts.group), way[first]]),
    )


def by_api(ctx: Context) -> tuple[tuple[str, int, int], ...]:
    """(API name without its version suffix, calls, ns) of the calls that block the host by
    name, in processes that ran GPU work: what the findings' ``wait_ns`` add up to."""
    api = ctx.report.api_calls
    cls = cuda_api.classes(api.column("name"))
    keep = cuda_api.blocks_host(cls) & (ctx.main_lane(np_col(api, "process_id", fill=-1)) >= 0)
    names = cuda_api.base_names(api.column("name"))[keep]
    dur = (np_col(api, "end_ns") - np_col(api, "start_ns"))[keep]
    out = []
    for name in sorted(set(names.tolist())):
        mine = names == name
        out.append((str(name), int(mine.sum()), int(dur[mine].sum())))
    return tuple(out)
