"""Nsight Systems' own device-memory events -> memory events (``source`` "nsys").

``nsys profile --cuda-memory-usage=true`` records CUPTI's memory activity (every allocation and
free the CUDA driver made, ``cudaMalloc``/``cudaFree``/``cudaMallocAsync``/``cudaFreeAsync`` and
the driver's ``cuMem*``) in ``CUDA_GPU_MEMORY_USAGE_EVENTS``. Columns used (the 2022.4 exporter's,
as NVIDIA's documentation lists them): ``start``, ``globalPid``, ``deviceId``, ``address``,
``bytes``, ``memKind`` (-> ``ENUM_CUDA_MEM_KIND``), ``memoryOperationType`` (->
``ENUM_CUDA_DEV_MEM_EVENT_OPER``) and, where the export has it, ``correlationId``, which names the
runtime call that made the event and so its thread (the table has no thread column). Codes are
read through the file's own ENUM tables, by label: ``Allocation``/``Deallocation``, and device
memory kinds (labels naming ``Device``, ``Managed`` or ``Array``; pinned and pageable host memory
is not device memory and is left out).

These are the driver's allocations: for torch, the caching allocator's segments (its reserved
memory), not its tensors. ``total_allocated`` and ``total_reserved`` are therefore both the
running sum of the process's events on the device since the capture began. nvbridge's own
allocator marks, where a report has them, win (nvbridge.readers.nsys_source): they are the
tensor-level events torch's columns count, and counting both would count a block twice.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from nvbridge.columns import dense_ids
from nvbridge.readers._db import Database
from nvbridge.readers.memory_marks import MEMORY_EVENTS, no_events
from nvbridge.readers.nsys_tables import TID_BITS, process_ids

TABLE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
SOURCE = "nsys"
_NEEDED = {"start", "globalPid", "deviceId", "address", "bytes", "memKind", "memoryOperationType"}


def _labels(db: Database, table: str) -> dict[int, str]:
    if not db.has(table):
        return {}
    return {int(i): str(label) for i, label in db.scalar_rows(f"SELECT id, label FROM {table}")}


def has_events(db: Database) -> bool:
    """Whether the export has device-memory events nvbridge reads."""
    return (
        db.has(TABLE) and _NEEDED <= set(db.columns(TABLE)) and bool(db.scalar_rows(f"SELECT 1 FROM {TABLE} LIMIT 1"))
    )


def read_events(db: Database) -> pa.Table:
    """The export's device-memory events (MEMORY_EVENTS), in time order; none where it has none."""
    if not has_events(db):
        return no_events()
    kinds = _labels(db, "ENUM_CUDA_MEM_KIND")
    opers = _labels(db, "ENUM_CUDA_DEV_MEM_EVENT_OPER")
    device_kinds = [k for k, label in kinds.items() if any(w in label for w in ("Device", "Managed", "Array"))]
    alloc = [k for k, label in opers.items() if label.lower() == "allocation"]
    free = [k for k, label in opers.items() if label.lower() == "deallocation"]
    if not device_kinds or not (alloc or free):
        return no_events()  # codes this export does not name: nothing to read them by
    thread = "NULL"
    if "correlationId" in db.columns(TABLE) and db.has(RUNTIME):
        thread = "(SELECT r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = m.correlationId"
        thread += " AND (r.globalTid >> 24) = (m.globalPid >> 24) LIMIT 1)"
    rows = db.scalar_rows(
        f"SELECT m.start, m.globalPid, m.deviceId, m.address, m.bytes, m.memoryOperationType IN "
        f"({', '.join(map(str, free or [-1]))}), {thread} FROM {TABLE} m "
        f"WHERE m.memKind IN ({', '.join(map(str, device_kinds))}) "
        f"AND m.memoryOperationType IN ({', '.join(map(str, alloc + free))}) ORDER BY m.start, m.rowid"
    )
    return _events(rows)


def _events(rows: list[tuple[object, ...]]) -> pa.Table:
    """SQL rows (start, globalPid, deviceId, address, bytes, is_free, globalTid) -> MEMORY_EVENTS."""
    if not rows:
        return no_events()
    cols = list(zip(*rows, strict=True))
    ts, gpid, device, address, size = (np.asarray(c, np.int64) for c in cols[:5])
    is_free = np.asarray(cols[5], bool)
    gtid = np.asarray([-1 if t is None else t for t in cols[6]], np.int64)
    signed = np.where(is_free, -np.abs(size), np.abs(size))
    pid = process_ids(gpid)
    # The allocator's view after each event: the running sum per process and device.
    group, _ = dense_ids(pid, device)
    order = np.lexsort((np.arange(len(ts)), group))
    running = np.empty(len(ts), np.int64)
    sums = np.cumsum(signed[order])
    starts = np.r_[True, group[order][1:] != group[order][:-1]]
    base = np.maximum.accumulate(np.where(starts, np.arange(len(ts)), 0))
    running[order] = sums - (sums[base] - signed[order][base])
    text = pa.array([f"cuda:{d}" for d in device.tolist()], pa.string())
    return pa.table(
        {
            "ts_ns": pa.array(ts),
            "process_id": pa.array(pid),
            "thread_id": pa.array(gtid & TID_BITS, mask=gtid < 0),  # null: the call is not in the capture
            "thread_key": pa.array(gtid),
            "device": text.dictionary_encode(),
            "device_id": pa.array(device),
            "address": pa.array(address),
            "bytes": pa.array(signed),
            "total_allocated": pa.array(running),
            "total_reserved": pa.array(running),
            "source": pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(len(ts), np.int32)), pa.array([SOURCE], pa.string())
            ),
        }
    ).cast(MEMORY_EVENTS)
