"""The independent side of the wait and dominant-cost tests: blocking copies, host syncs and the
GPU timeline's categories recomputed from tests/raw_gpu.py's rows (raw SQL) with plain loops, as
docs/advise.md defines them."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from tests.raw_gpu import (
    SETUP,
    SLOW_LAUNCH_NS,
    Call,
    GpuOp,
    Range,
    Raw,
    base,
    blocks,
    busy,
    idle_end,
    innermost,
    intersect,
    is_copy,
    is_launch,
    is_sync,
    is_sync_copy,
    lanes,
    length,
    range_of,
    subtract,
    union,
)


@dataclass
class Wait:
    """One blocking copy (its copies) or host sync (no copies): where the host waited last."""

    call: Call
    lane: tuple[int, int]
    op: Range | None
    copies: list[GpuOp]
    wait_ns: int  # calls that block by name
    call_ns: int  # a blocking copy's async copy calls
    after: tuple[int, int]  # the GPU idle time after the wait, capped at the blocked time


def waits(raw: Raw) -> list[Wait]:
    """Blocking copies and host syncs, as docs/advise.md defines them."""
    by_thread: dict[tuple[int, int], list[Call]] = defaultdict(list)
    for c in raw.calls:
        by_thread[(c.pid, c.tid)].append(c)
    ranges = innermost(raw)
    lane_ops = lanes(raw)
    lane_busy = {k: busy(v) for k, v in lane_ops.items()}
    copies_of: dict[tuple[int, int], list[GpuOp]] = defaultdict(list)
    for g in raw.gpu:
        if g.copy_kind in (1, 2):
            copies_of[(g.pid, g.corr)].append(g)
    events: dict[int, tuple[Call, list[tuple[Call, GpuOp]]]] = {}
    used: set[int] = set()
    for calls in by_thread.values():
        calls.sort(key=lambda c: c.start)
        for i, c in enumerate(calls):
            for g in copies_of.get((c.pid, c.corr), []):
                nxt = next((d for d in calls[i + 1 :] if blocks(d.name) or is_launch(d.name)), None)
                is_async = is_copy(c.name) and not is_sync_copy(c.name)
                followed = (
                    is_async and nxt is not None and is_sync(nxt.name) and range_of(ranges, nxt) is range_of(ranges, c)
                )
                alone = is_sync_copy(c.name) or (is_async and not followed and g.copy_kind == 2 and g.host_pageable)
                if followed or alone:
                    ev = nxt if followed and nxt is not None else c
                    events.setdefault(id(ev), (ev, []))[1].append((c, g))
                    used.update((id(ev), id(c)))
    out = []
    for ev, parts in events.values():
        lane = (parts[0][1].pid, parts[0][1].device)
        async_ns = sum({id(c): c.dur for c, _ in parts if not is_sync_copy(c.name)}.values())
        by_name = ev.dur if blocks(ev.name) else 0
        end = idle_end(lane_busy.get(lane, []), ev.end, by_name + async_ns)
        op = range_of(ranges, parts[0][0])
        out.append(Wait(ev, lane, op, [g for _, g in parts], by_name, async_ns, (ev.end, end)))
    for c in raw.calls:
        if blocks(c.name) and id(c) not in used:
            at = _sync_lane(raw, c, lane_ops)
            if at is None:
                continue
            end = idle_end(lane_busy[at], c.end, c.dur)
            out.append(Wait(c, at, range_of(ranges, c), [], c.dur, 0, (c.end, end)))
    return out


def busiest_lane(lane_ops: dict[tuple[int, int], list[GpuOp]], pid: int) -> tuple[int, int] | None:
    mine = [k for k in lane_ops if k[0] == pid]
    return max(mine, key=lambda k: (len(lane_ops[k]), k[1])) if mine else None


def _sync_lane(raw: Raw, c: Call, lane_ops: dict[tuple[int, int], list[GpuOp]]) -> tuple[int, int] | None:
    """The lane of the stream the sync's record names, else the process's busiest lane."""
    stream = raw.sync_stream.get((c.pid, c.corr))
    if stream is not None:
        devices = {g.device for (p, _), ops in lane_ops.items() if p == c.pid for g in ops if g.stream == stream}
        if len(devices) == 1 and (c.pid, next(iter(devices))) in lane_ops:
            return (c.pid, next(iter(devices)))
    return busiest_lane(lane_ops, c.pid)


CATEGORIES = ("compute", "communication", "copies", "startup", "syncs", "idle")


def categories(raw: Raw) -> dict[str, int]:
    """The GPU timelines cut into categories (docs/advise.md), summed over lanes."""
    out = dict.fromkeys(CATEGORIES, 0)
    lane_ops = lanes(raw)
    ws = waits(raw)
    calls = raw.call_of()
    # start-up in the timeline: set-up calls by name, and each kernel's first slow launch
    first: dict[tuple[tuple[int, int], str], GpuOp] = {}
    for g in sorted(raw.gpu, key=lambda g: g.start):
        if g.kind == "kernel" and (g.pid, g.corr) in calls:
            first.setdefault(((g.pid, g.device), g.name), g)
    starting: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for (lane, _), g in first.items():
        c = calls[(g.pid, g.corr)]
        if c.dur > SLOW_LAUNCH_NS:
            starting[lane].append((c.start, c.end))
    for c in raw.calls:
        main = busiest_lane(lane_ops, c.pid)
        if SETUP.match(base(c.name)) and main is not None:
            starting[main].append((c.start, c.end))
    for lane, ops in lane_ops.items():
        t = [(min(g.start for g in ops), max(g.end for g in ops))]
        compute = intersect(union([(g.start, g.end) for g in ops if g.kind != "memcpy" and not g.nccl]), t)
        comm = subtract(intersect(union([(g.start, g.end) for g in ops if g.nccl]), t), compute)
        memcpy = intersect(union([(g.start, g.end) for g in ops if g.kind == "memcpy"]), t)
        copies = subtract(subtract(memcpy, compute), comm)
        idle = subtract(t, busy(ops))
        start = intersect(idle, starting[lane])
        waited = intersect(subtract(idle, start), [w.after for w in ws if w.lane == lane])
        rest = subtract(subtract(idle, start), waited)
        for name, part in zip(CATEGORIES, (compute, comm, copies, start, waited, rest)):
            out[name] += length(part)
    return out
