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

from nvbridge.columns import dense_ids, np_col
from nvbridge.readers._column import ROWID, Column
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
    where = (
        f"memKind IN ({', '.join(map(str, device_kinds))}) "
        f"AND memoryOperationType IN ({', '.join(map(str, alloc + free))})"
    )
    m = db.read_table(TABLE, _EVENT_COLUMNS, where)
    order = np.lexsort((np_col(m, "rowid"), np_col(m, "start")))
    m = m.take(pa.array(order))
    is_free = np.isin(np_col(m, "oper"), np.asarray(free or [-1], np.int64))
    return _events(m, is_free, _threads(db, m))


_EVENT_COLUMNS = [
    Column("start", "start", required=True),
    Column("globalPid", "globalPid", required=True),
    Column("deviceId", "deviceId", required=True),
    Column("address", "address", required=True),
    Column("bytes", "bytes", required=True),
    Column("oper", "memoryOperationType", required=True),
    Column("correlationId", "correlationId"),
    Column("rowid", ROWID),
]


def _threads(db: Database, m: pa.Table) -> np.ndarray:
    """Each event's thread (globalTid, -1: unknown): its runtime call's, the call with its
    correlationId in its process. One filtered read and a sorted lookup: a correlated subquery
    per event scans the runtime table once per event (minutes at 100k events, 1M calls)."""
    out = np.full(m.num_rows, -1, np.int64)
    if not m.num_rows or not db.has(RUNTIME) or "correlationId" not in db.columns(TABLE):
        return out
    calls = db.read_table(
        RUNTIME,
        [Column("globalTid", "globalTid"), Column("correlationId", "correlationId")],
        f"correlationId IN (SELECT correlationId FROM {TABLE} WHERE correlationId IS NOT NULL)",
    )
    if not calls.num_rows:
        return out
    tid, corr = np_col(calls, "globalTid", fill=-1), np_col(calls, "correlationId", fill=-1)
    keys = (process_ids(tid) << 32) | (corr & 0xFFFFFFFF)
    order = np.argsort(keys, kind="stable")  # the first call of a key, as LIMIT 1 in rowid order
    keys, tid = keys[order], tid[order]
    want_corr = np_col(m, "correlationId", fill=-1)
    want = (process_ids(np_col(m, "globalPid", fill=0)) << 32) | (want_corr & 0xFFFFFFFF)
    at = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
    found = (want_corr >= 0) & (keys[at] == want)
    out[found] = tid[at[found]]
    return out


def _events(m: pa.Table, is_free: np.ndarray, gtid: np.ndarray) -> pa.Table:
    """The table's rows (time order), which are frees, their threads -> MEMORY_EVENTS."""
    if not m.num_rows:
        return no_events()
    ts, gpid, device = np_col(m, "start"), np_col(m, "globalPid", fill=0), np_col(m, "deviceId", fill=0)
    address, size = np_col(m, "address"), np_col(m, "bytes")
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
    names, codes = np.unique(device, return_inverse=True)  # a name per device, not per row
    text = pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array([f"cuda:{d}" for d in names]))
    return pa.table(
        {
            "ts_ns": pa.array(ts),
            "process_id": pa.array(pid),
            "thread_id": pa.array(gtid & TID_BITS, mask=gtid < 0),  # null: the call is not in the capture
            "thread_key": pa.array(gtid),
            "device": text,
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
