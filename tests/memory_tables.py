"""A memory table made up for a recorded report, in the spec's columns (docs/memory.md), for the
answers' tests while no conversion of ours writes one from these samples: each op allocates one
block when it starts, freed when it ends (a temporary) or, every third op, never (held to the
end). Plain Python, row by row: the tests' oracle arithmetic is of the same kind, and neither
uses nvbridge's reader for the rows it checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

import nvbridge
from nvbridge.dataset.report import DatasetTables

MEMORY_FIELDS = [
    ("ts_ns", pa.int64()),
    ("process_id", pa.int64()),
    ("thread_id", pa.int64()),
    ("device", pa.dictionary(pa.int32(), pa.string())),
    ("device_id", pa.int64()),
    ("address", pa.int64()),
    ("bytes", pa.int64()),
    ("total_allocated", pa.int64()),
    ("total_reserved", pa.int64()),
    ("op_id", pa.int64()),
    ("step", pa.int64()),
    ("alloc_ns", pa.int64()),
    ("free_ns", pa.int64()),
    ("source", pa.dictionary(pa.int32(), pa.string())),
]


def memory_table(events: list[dict[str, Any]]) -> pa.Table:
    """Rows (dicts with at least ts_ns, bytes, address, op_id, step, device, thread_id) in time
    order, with the running total and the block lifetimes filled in as the spec says."""
    events = sorted(events, key=lambda e: (e["ts_ns"], e["bytes"] > 0))
    total: dict[str, int] = {}
    born: dict[tuple[str, int], int] = {}
    died: dict[tuple[str, int, int], int] = {}
    rows = []
    for e in events:
        device = e.get("device", "cpu")
        total[device] = total.get(device, 0) + e["bytes"]
        key = (device, e["address"])
        if e["bytes"] > 0:
            born[key] = e["ts_ns"]
        else:
            died[(device, e["address"], born[key])] = e["ts_ns"]
        rows.append(dict(e, device=device, total_allocated=total[device], alloc_ns=born[key]))
    for r in rows:
        r["free_ns"] = died.get((r["device"], r["address"], r["alloc_ns"]))
        r.setdefault("process_id", 1)
        r.setdefault("device_id", -1 if r["device"] == "cpu" else int(r["device"].split(":")[1]))
        r.setdefault("total_reserved", 0)
        r.setdefault("source", "nvbridge")
    return pa.Table.from_pylist(rows, schema=pa.schema(MEMORY_FIELDS))


def made_up_events(ops: pa.Table) -> list[dict[str, Any]]:
    """One block per op: allocated at its start, freed at its end unless the op's id is a
    multiple of 3 (then held to the end of the capture)."""
    events: list[dict[str, Any]] = []
    columns = ["op_id", "start_ns", "end_ns", "process_id", "thread_id", "step"]
    for i, op in enumerate(ops.select(columns).to_pylist()):
        size = 256 * (1 + op["op_id"] % 7)
        where = {"address": 4096 * (i + 1), "process_id": op["process_id"], "thread_id": op["thread_id"]}
        where["step"] = op["step"]
        events.append({"ts_ns": op["start_ns"], "bytes": size, "op_id": op["op_id"], **where})
        if op["op_id"] % 3:
            events.append({"ts_ns": op["end_ns"], "bytes": -size, "op_id": op["op_id"], **where})
    return events


def innermost(ops: list[dict[str, Any]], thread_id: int, ts: int) -> int | None:
    """The innermost op open on ``thread_id`` at ``ts`` (the latest-starting one that holds it)."""
    best = None
    for op in ops:
        if op["thread_id"] == thread_id and op["start_ns"] <= ts <= op["end_ns"]:
            if best is None or (op["start_ns"], op["depth"]) > (best["start_ns"], best["depth"]):
                best = op
    return None if best is None else int(best["op_id"])


def with_memory(path: Path, events: list[dict[str, Any]] | None = None) -> DatasetTables:
    """The report at ``path`` with a memory table (``events``, or :func:`made_up_events`), and
    the ops' four memory columns summed from it the way torch defines them: self = the op's own
    events, total = events while it was open on its thread."""
    report = nvbridge.load(path)
    ops = report.ops
    events = made_up_events(ops) if events is None else events
    memory = memory_table(events)
    plain = ops.select(["op_id", "thread_id", "start_ns", "end_ns", "depth"]).to_pylist()
    cpu_self = dict.fromkeys(range(ops.num_rows), 0)
    cpu_total = dict.fromkeys(range(ops.num_rows), 0)
    for e in memory.select(["ts_ns", "thread_id", "bytes", "op_id"]).to_pylist():
        if e["op_id"] is not None:
            cpu_self[e["op_id"]] += e["bytes"]
        for op in plain:
            if op["thread_id"] == e["thread_id"] and op["start_ns"] <= e["ts_ns"] <= op["end_ns"]:
                cpu_total[op["op_id"]] += e["bytes"]
    ids = ops.column("op_id").to_pylist()
    columns = {
        "self_cpu_memory_usage": [cpu_self[i] for i in ids],
        "cpu_memory_usage": [cpu_total[i] for i in ids],
        "self_cuda_memory_usage": [0] * len(ids),
        "cuda_memory_usage": [0] * len(ids),
    }
    for name, values in columns.items():
        if name in ops.column_names:
            ops = ops.drop_columns([name])
        ops = ops.append_column(name, pa.array(values, pa.int64()))
    tables = {name: report.table(name) for name in ("gpu_ops", "api_calls", "marks", "syncs", "threads", "devices")}
    return DatasetTables(dict(report.meta), {**tables, "ops": ops, "memory": memory})
