"""Hand-built profiles for the engine's tests: ranges, API calls and kernels as a reader hands
them (``profile``), and the same profile run through the engine in windows as a streamed
conversion runs it (``streamed``). tests/test_correlate.py and the FLOP, semantics and
annotation tests build their cases with them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from nvbridge.engine import (
    Correlator,
    parse_names,
)
from nvbridge.readers.raw import GPU_OPS_SCHEMA, RawProfile, Restart, SourceInfo, Tail, capture_end
from nvbridge.readers.whole import whole_activity
from nvbridge.readers.windows import cut_windows


class WholeActivity:
    """A profile's API calls and GPU ops handed on as a streamed reader hands them: the calls
    starting before each cut, the GPU ops starting before ``horizon`` ns past it (None: every GPU
    op with the first window; the engine holds each until its launch's window)."""

    def __init__(self, p: RawProfile, horizon: int | None) -> None:
        self.api, self.gpu = whole_activity(p.api_calls, p.gpu_ops)
        self.a_order = np.argsort(np.asarray(self.api.column("start_ns")), kind="stable")
        self.g_order = np.argsort(np.asarray(self.gpu.column("start_ns")), kind="stable")
        self.given = {"api": 0, "gpu": 0}
        self.horizon = horizon

    def take(self, cut: int | None) -> tuple[pa.Table, pa.Table]:
        a_start = np.asarray(self.api.column("start_ns"))[self.a_order]
        g_start = np.asarray(self.gpu.column("start_ns"))[self.g_order]
        a_stop = len(self.a_order) if cut is None else int(np.searchsorted(a_start, cut, "left"))
        if cut is None or self.horizon is None:
            g_stop = len(self.g_order)
        else:
            g_stop = int(np.searchsorted(g_start, cut + self.horizon, "left"))
        api = self.api.take(pa.array(self.a_order[self.given["api"] : a_stop]))
        gpu = self.gpu.take(pa.array(self.g_order[self.given["gpu"] : g_stop]))
        self.given.update(api=a_stop, gpu=max(g_stop, self.given["gpu"]))
        return api, gpu

    def bounds(self) -> list[int]:
        return []


def streamed(
    p: RawProfile, parts: list[pa.Table], horizon: int | None, parse_ahead: bool = False
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """ops (in op_id order), api_calls and gpu_ops of ``p`` run through the engine in windows cut
    from ``parts`` of its ranges, as a streamed conversion runs it."""
    times = [np.asarray(p.ranges.column("start_ns")), np.asarray(p.api_calls.column("start_ns"))]
    times.append(np.asarray(p.api_calls.column("end_ns")))
    end = capture_end(p.info, int(max((int(t.max()) for t in times if len(t)), default=0)))
    engine = Correlator(p.info, end, p.syncs)
    out: dict[str, list[pa.Table]] = {"ops": [], "api_calls": [], "gpu_ops": []}
    try:
        for window in cut_windows(parts, WholeActivity(p, horizon), end, lambda: 0):
            assert not isinstance(window, Restart), window
            rows = engine.add(window, parse_names(window.ranges) if parse_ahead else None)
            assert not isinstance(rows, Restart), rows
            for name in out:
                out[name].append(getattr(rows, name))
        engine.finish(Tail(p.marks, p.threads, p.devices))
    finally:
        engine.close()
    ops, api, gpu = (pa.concat_tables(out[name]) for name in ("ops", "api_calls", "gpu_ops"))
    return ops.sort_by("op_id"), api, gpu


def _range(
    start: int, end: int | None, name: str, tid: int = 1, pid: int = 10, end_tid: int | None = None
) -> dict[str, Any]:
    return {
        "start_ns": start,
        "end_ns": end,
        "name": name,
        "domain": None,
        "domain_id": 0,
        "process_id": pid,
        "thread_id": tid,
        "thread_key": pid << 32 | tid,
        "end_thread_key": None if end_tid is None else pid << 32 | end_tid,
        "style": "push_pop",
    }


def _api(start: int, end: int, corr: int, tid: int = 1, pid: int = 10) -> dict[str, Any]:
    return {
        "start_ns": start,
        "end_ns": end,
        "name": "cudaLaunchKernel",
        "kind": "runtime",
        "process_id": pid,
        "thread_id": tid,
        "thread_key": pid << 32 | tid,
        "process_key": pid,
        "correlation_id": corr,
        "return_value": 0,
    }


def _kernel(start: int, end: int, corr: int, pid: int = 10) -> dict[str, Any]:
    row: dict[str, Any] = {f.name: None for f in GPU_OPS_SCHEMA}
    row.update(
        start_ns=start,
        end_ns=end,
        kind="kernel",
        name=f"k{corr}",
        device_id=0,
        stream_id=7,
        process_key=pid,
        correlation_id=corr,
    )
    return row


def profile(
    ranges: list[dict[str, Any]], api: list[dict[str, Any]], gpu: list[dict[str, Any]], capture_end: int | None = None
) -> RawProfile:
    range_schema = pa.schema(
        [
            ("start_ns", pa.int64()),
            ("end_ns", pa.int64()),
            ("name", pa.string()),
            ("domain", pa.string()),
            ("domain_id", pa.int64()),
            ("process_id", pa.int64()),
            ("thread_id", pa.int64()),
            ("thread_key", pa.int64()),
            ("end_thread_key", pa.int64()),
            ("style", pa.string()),
        ]
    )
    api_schema = pa.schema(
        [
            ("start_ns", pa.int64()),
            ("end_ns", pa.int64()),
            ("name", pa.string()),
            ("kind", pa.string()),
            ("process_id", pa.int64()),
            ("thread_id", pa.int64()),
            ("thread_key", pa.int64()),
            ("process_key", pa.int64()),
            ("correlation_id", pa.int64()),
            ("return_value", pa.int64()),
        ]
    )
    empty = pa.table({"ts_ns": pa.array([], pa.int64())})
    syncs = pa.table(
        {
            n: pa.array([], pa.int64())
            for n in ("start_ns", "end_ns", "device_id", "stream_id", "process_key", "correlation_id")
        }
    )
    threads = pa.table(
        {
            "process_id": pa.array([], pa.int64()),
            "thread_id": pa.array([], pa.int64()),
            "thread_key": pa.array([], pa.int64()),
        }
    )
    devices = pa.table({"device_id": pa.array([], pa.int64()), "name": pa.array([], pa.string())})
    info = SourceInfo(source="synthetic", kind="nsys", producer="test", capture_end_ns=capture_end)
    return RawProfile(
        info,
        pa.Table.from_pylist(ranges, range_schema),
        empty,
        pa.Table.from_pylist(api, api_schema),
        pa.Table.from_pylist(gpu, GPU_OPS_SCHEMA),
        syncs,
        threads,
        devices,
    )


def by_name(table: pa.Table) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in table.to_pylist()}
