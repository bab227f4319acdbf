"""The independent side of the timeline, wait and dominant-cost tests: a report's CUDA calls,
GPU ops and NVTX ranges read with Python's sqlite3 from the export itself (never through
nvbridge's readers), and the definitions of docs/advise.md recomputed on them with plain loops.

Both schemas: Nsight Systems (names from StringIds, pid/tid from globalTid) and nvprof (RUNTIME
and DRIVER by callback id, the GPU ops' process from their call's correlation id).
"""

from __future__ import annotations

import re
import sqlite3
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ALL_FILES, SAMPLE_DB, real_db

SAMPLES = sorted(p.name for p in SAMPLE_DB.glob("*.sqlite"))
EVERY = [*ALL_FILES, *(f"sample:{name}" for name in SAMPLES)]  # what the oracles run on


def path_of(name: str) -> Path:
    """A real export's path (skips where ../shared/real_db is absent), or ``sample:NAME``'s."""
    return SAMPLE_DB / name.removeprefix("sample:") if name.startswith("sample:") else real_db(name)


# What blocks the host, by name (CUDA runtime "API synchronization behavior"), written here again.
SYNC_NAMES = {
    "cudaDeviceSynchronize",
    "cudaThreadSynchronize",
    "cuCtxSynchronize",
    "cudaStreamSynchronize",
    "cuStreamSynchronize",
    "cudaEventSynchronize",
    "cuEventSynchronize",
}
# nvprof callback ids (cupti_runtime_cbid.h, cupti_driver_cbid.h) of the calls the tests classify.
RUNTIME_CBID = {
    31: "cudaMemcpy", 32: "cudaMemcpy2D", 39: "cudaMemcpyToSymbol", 40: "cudaMemcpyFromSymbol",
    41: "cudaMemcpyAsync", 44: "cudaMemcpy2DAsync", 49: "cudaMemset", 51: "cudaMemsetAsync",
    126: "cudaThreadSynchronize", 131: "cudaStreamSynchronize", 137: "cudaEventSynchronize",
    138: "cudaEventQuery", 147: "cudaStreamWaitEvent", 165: "cudaDeviceSynchronize", 13: "cudaLaunch",
    211: "cudaLaunchKernel", 214: "cudaLaunchKernel_ptsz", 239: "cudaStreamSynchronize_ptsz",
}  # fmt: skip
DRIVER_CBID = {
    17: "cuCtxSynchronize", 121: "cuEventSynchronize", 126: "cuStreamSynchronize", 276: "cuMemcpyHtoD_v2",
    277: "cuMemcpyHtoDAsync_v2", 278: "cuMemcpyDtoH_v2", 279: "cuMemcpyDtoHAsync_v2", 306: "cuMemcpyAsync",
    307: "cuLaunchKernel", 440: "cuStreamSynchronize_ptsz", 652: "cuLaunchKernelEx",
}  # fmt: skip
SLOW_LAUNCH_NS = 1_000_000  # a kernel's first launch over this is start-up (lazy module loading)
SETUP = re.compile(r"^cu(Init|CtxCreate|DevicePrimaryCtxRetain|ModuleLoad|LibraryLoad|Link(Create|Add|Complete))")


def base(name: str) -> str:
    return re.sub(r"(_v\d+|_ptsz|_ptds)+$", "", name)


def is_sync(name: str) -> bool:
    return base(name) in SYNC_NAMES


def is_copy(name: str) -> bool:
    return bool(re.match(r"cu(da)?Memcpy", base(name)))


def is_sync_copy(name: str) -> bool:
    return is_copy(name) and "Async" not in name and "Peer" not in name


def blocks(name: str) -> bool:
    """The host waited for the GPU in this call, by its name alone."""
    return is_sync(name) or is_sync_copy(name)


def is_launch(name: str) -> bool:
    return bool(re.match(r"cu(da)?(Launch|GraphLaunch|Memset)", base(name)))


@dataclass
class Call:
    name: str
    start: int
    end: int
    pid: int
    tid: int
    corr: int

    @property
    def dur(self) -> int:
        return self.end - self.start


@dataclass
class GpuOp:
    kind: str  # kernel, memcpy, memset
    start: int
    end: int
    device: int
    pid: int  # -1: no call found in the capture
    corr: int
    name: str
    copy_kind: int  # 1 HtoD, 2 DtoH, 8 DtoD (both schemas)
    host_pageable: bool  # the host side of an HtoD/DtoH copy is pageable memory
    nbytes: int
    stream: int = -1
    known_pid: bool = True  # the export names its process (nsys always; nvprof through its call)

    @property
    def nccl(self) -> bool:
        return self.kind == "kernel" and "nccl" in self.name.lower()


@dataclass
class Range:
    name: str
    start: int
    end: int
    pid: int
    tid: int


@dataclass
class Raw:
    calls: list[Call]
    gpu: list[GpuOp]
    ranges: list[Range]
    sync_stream: dict[tuple[int, int], int]  # (pid, correlation id) of a sync call -> its record's stream

    def call_of(self) -> dict[tuple[int, int], Call]:
        """(pid, correlation id) -> call."""
        return {(c.pid, c.corr): c for c in self.calls}


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def read(path: Path) -> Raw:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = _tables(con)
        return _read_nvprof(con, tables) if "StringTable" in tables else _read_nsys(con, tables)
    finally:
        con.close()


def _read_nsys(con: sqlite3.Connection, tables: set[str]) -> Raw:
    K = "CUPTI_ACTIVITY_KIND_"
    pid, tid = "((globalTid >> 24) & 16777215)", "(globalTid & 16777215)"
    calls = []
    if K + "RUNTIME" in tables:
        rows = con.execute(
            f"SELECT s.value, r.start, r.end, {pid}, {tid}, r.correlationId FROM {K}RUNTIME AS r "
            "JOIN StringIds AS s ON s.id = r.nameId"
        )
        calls = [Call(*r) for r in rows]
    gpu: list[GpuOp] = []
    gpid = "((globalPid >> 24) & 16777215)"
    if K + "KERNEL" in tables:
        rows = con.execute(
            f"SELECT k.start, k.end, k.deviceId, {gpid}, k.correlationId, s.value, k.streamId FROM {K}KERNEL AS k "
            "JOIN StringIds AS s ON s.id = k.demangledName"
        )
        gpu += [GpuOp("kernel", s, e, d, p, c, n, 0, False, 0, st) for s, e, d, p, c, n, st in rows]
    if K + "MEMCPY" in tables:
        rows = con.execute(
            f"SELECT start, end, deviceId, {gpid}, correlationId, copyKind, srcKind, dstKind, bytes, streamId "
            f"FROM {K}MEMCPY"
        )
        for s, e, d, p, c, ck, src, dst, b, st in rows:
            host = src if ck == 1 else dst if ck == 2 else None
            gpu.append(GpuOp("memcpy", s, e, d, p, c, "", ck, host == 0, b, st))  # ENUM_CUDA_MEM_KIND 0 pageable
    if K + "GRAPH_TRACE" in tables:  # graph launches traced as one row each (--cuda-graph-trace=graph)
        rows = con.execute(f"SELECT start, end, deviceId, {gpid}, correlationId, streamId FROM {K}GRAPH_TRACE")
        gpu += [GpuOp("graph", s, e, d, p, c, "", 0, False, 0, st) for s, e, d, p, c, st in rows]
    if K + "MEMSET" in tables:
        rows = con.execute(f"SELECT start, end, deviceId, {gpid}, correlationId, streamId FROM {K}MEMSET")
        gpu += [GpuOp("memset", s, e, d, p, c, "", 0, False, 0, st) for s, e, d, p, c, st in rows]
    ranges = []
    if "NVTX_EVENTS" in tables:
        rows = con.execute(
            f"SELECT coalesce(n.text, s.value), n.start, n.end, {pid}, {tid} FROM NVTX_EVENTS AS n "
            "LEFT JOIN StringIds AS s ON s.id = n.textId WHERE n.eventType IN (59, 60) AND n.end IS NOT NULL "
            "AND n.endGlobalTid IS NULL"
        )
        ranges = [Range(*r) for r in rows]
    syncs = {}
    if K + "SYNCHRONIZATION" in tables:
        rows = con.execute(f"SELECT {gpid}, correlationId, streamId FROM {K}SYNCHRONIZATION")
        syncs = {(p, c): st for p, c, st in rows}
    return Raw(calls, gpu, ranges, syncs)


def _read_nvprof(con: sqlite3.Connection, tables: set[str]) -> Raw:
    K = "CUPTI_ACTIVITY_KIND_"
    calls = []
    for table, names in (("RUNTIME", RUNTIME_CBID), ("DRIVER", DRIVER_CBID)):
        for cbid, s, e, p, t, c in con.execute(
            f"SELECT cbid, start, end, processId, threadId & 4294967295, correlationId FROM {K}{table}"
        ):
            calls.append(Call(names.get(cbid, f"{table} {cbid}"), s, e, p, t, c))
    pid_of = {c.corr: c.pid for c in calls}
    gpu: list[GpuOp] = []
    strings = dict(con.execute("SELECT _id_, value FROM StringTable"))
    for table in ("CONCURRENT_KERNEL", "KERNEL"):
        for s, e, d, c, n, st in con.execute(
            f"SELECT start, end, deviceId, correlationId, name, streamId FROM {K}{table}"
        ):
            gpu.append(GpuOp("kernel", s, e, d, pid_of.get(c, -1), c, strings[n], 0, False, 0, st))
    for s, e, d, c, ck, src, dst, b, st in con.execute(
        f"SELECT start, end, deviceId, correlationId, copyKind, srcKind, dstKind, bytes, streamId FROM {K}MEMCPY"
    ):
        host = src if ck == 1 else dst if ck == 2 else None
        gpu.append(GpuOp("memcpy", s, e, d, pid_of.get(c, -1), c, "", ck, host == 1, b, st))  # CUPTI 1 pageable
    for s, e, d, c, st in con.execute(f"SELECT start, end, deviceId, correlationId, streamId FROM {K}MEMSET"):
        gpu.append(GpuOp("memset", s, e, d, pid_of.get(c, -1), c, "", 0, False, 0, st))
    ranges = []
    starts: dict[int, tuple[int, bytes, int]] = {}
    for flags, ts, mid, obj, name in con.execute(f"SELECT flags, timestamp, id, objectId, name FROM {K}MARKER"):
        if flags & 2:
            starts[mid] = (ts, obj, name)
        elif flags & 4 and mid in starts:
            t0, blob, n = starts.pop(mid)
            p, t = int.from_bytes(blob[:4], "little"), int.from_bytes(blob[4:8], "little")
            ranges.append(Range(strings.get(n, ""), t0, ts, p, t))
    syncs = {
        (pid_of.get(c, -1), c): st for c, st in con.execute(f"SELECT correlationId, streamId FROM {K}SYNCHRONIZATION")
    }
    return Raw(calls, _own(gpu), ranges, syncs)


def _own(gpu: list[GpuOp]) -> list[GpuOp]:
    """A GPU op whose call is not in the capture belongs to its device's only process."""
    users: dict[int, set[int]] = defaultdict(set)
    for g in gpu:
        if g.pid >= 0:
            users[g.device].add(g.pid)
    for g in gpu:
        if g.pid < 0:
            g.known_pid = False
            if len(users[g.device]) == 1:
                g.pid = next(iter(users[g.device]))
    return gpu


def union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def length(intervals: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in union(intervals))


def intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for s, e in union(a):
        for t, f in union(b):
            lo, hi = max(s, t), min(e, f)
            if hi > lo:
                out.append((lo, hi))
    return union(out)


def subtract(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    bb = union(b)
    for s, e in union(a):
        cur = s
        for t, f in bb:
            if f <= cur or t >= e:
                continue
            if t > cur:
                out.append((cur, t))
            cur = max(cur, f)
        if cur < e:
            out.append((cur, e))
    return out


def lanes(raw: Raw) -> dict[tuple[int, int], list[GpuOp]]:
    """GPU ops by (process, device)."""
    out: dict[tuple[int, int], list[GpuOp]] = defaultdict(list)
    for g in raw.gpu:
        out[(g.pid, g.device)].append(g)
    return dict(out)


def first_launched(raw: Raw) -> dict[int, int]:
    """Per process, the start of its first GPU op (of those the export names a process for)."""
    out: dict[int, int] = {}
    for g in raw.gpu:
        if g.known_pid:
            out[g.pid] = min(out.get(g.pid, g.start), g.start)
    return out


def startup_before(raw: Raw) -> dict[int, int]:
    """Per process: its CUDA calls but syncs and copies, before its first GPU op, clipped there."""
    first = first_launched(raw)
    spans: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for c in raw.calls:
        if c.pid in first and c.start < first[c.pid] and not (is_sync(c.name) or is_copy(c.name)):
            spans[c.pid].append((c.start, min(c.end, first[c.pid])))
    return {p: length(spans[p]) for p in first}


def innermost(raw: Raw) -> dict[tuple[int, int], list[Range]]:
    """Ranges per (pid, tid), sorted by start."""
    out: dict[tuple[int, int], list[Range]] = defaultdict(list)
    for r in raw.ranges:
        out[(r.pid, r.tid)].append(r)
    for v in out.values():
        v.sort(key=lambda r: r.start)
    return out


def range_of(by_thread: dict[tuple[int, int], list[Range]], c: Call) -> Range | None:
    """The innermost range on the call's thread holding the whole call (the latest start)."""
    best = None
    for r in by_thread.get((c.pid, c.tid), []):
        if r.start > c.start:
            break
        if r.end >= c.end:
            best = r
    return best


def busy(ops: list[GpuOp]) -> list[tuple[int, int]]:
    return union([(g.start, g.end) for g in ops])


def idle_end(lane_busy: list[tuple[int, int]], t: int, cap: int) -> int:
    """End of the GPU idle time starting at t (t itself if busy at t or no op follows), capped."""
    if any(s <= t < e for s, e in lane_busy):
        return t
    nxt = min((s for s, _ in lane_busy if s > t), default=None)
    return t if nxt is None else min(nxt, t + cap)
