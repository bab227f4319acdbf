"""Nsight Systems tables: the raw columns each read takes and the step from raw rows to the
normalized profile tables (names resolved through ``StringIds`` in Arrow, rows validated); the
NVTX rows' step is :mod:`nvbridge.readers.nsys_ranges`.

Shared by the whole-file reader and the streamed one (:mod:`nvbridge.readers.nsys`).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col, set_column
from nvbridge.readers._arrow import align_gpu_ops, concat_gpu_ops, constant, lookup, prefixed, resolve_strings
from nvbridge.readers._column import Column
from nvbridge.readers._db import Database
from nvbridge.readers.nsys_info import meta_int
from nvbridge.readers.validate import names_found, no_nulls, raw_names, sizes, times, unique

# ENUM_NSYS_EVENT_TYPE: these ids are stable since NVTX_EVENTS exists; ENUM_* tables are
# absent from <=2022 exports, so the values live here.
NVTX_MARK, NVTX_THREAD_NAME = 34, 39
NVTX_PUSH_POP, NVTX_START_END = 59, 60
NVTXT_PUSH_POP, NVTXT_START_END = 70, 71
NVTX_DOMAIN_CREATE = 75
RANGE_TYPES = (NVTX_PUSH_POP, NVTX_START_END, NVTXT_PUSH_POP, NVTXT_START_END)

# ENUM_CUDA_MEMCPY_OPER (same ids as CUPTI's copyKind).
COPY_KINDS = {
    0: "Unknown",
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "UVM HtoD",
    12: "UVM DtoH",
    13: "UVM DtoD",
}
# ENUM_CUDA_MEM_KIND (memcpy srcKind/dstKind; CUPTI/nvprof count the same kinds from 1).
MEM_KINDS = {
    0: "pageable",
    1: "pinned",
    2: "device",
    3: "array",
    4: "managed",
    5: "device static",
    6: "managed static",
    7: "unknown",
}
# ENUM_CUPTI_SYNC_TYPE. Only a label: the codes exports store drift across versions (SCHEMA.md 1.5),
# so what a sync did is read from its API call (nvbridge.gpu.cuda_api), never from this code.
SYNC_TYPES = {0: "Unknown", 1: "Event sync", 2: "Stream wait", 3: "Stream sync", 4: "Context sync"}
# The enum's own names, for a file that has the table (its ids are read, not assumed).
_SYNC_ENUM_NAMES = {
    "EVENT_SYNCHRONIZE": "Event sync",
    "STREAM_WAIT_EVENT": "Stream wait",
    "STREAM_SYNCHRONIZE": "Stream sync",
    "CONTEXT_SYNCHRONIZE": "Context sync",
}
# ENUM_NSYS_EVENT_CLASS for CUPTI_ACTIVITY_KIND_RUNTIME.eventClass.
API_KINDS = {0: "runtime", 1: "driver"}

TID_BITS = 0xFFFFFF
PID_MASK = ~0xFFFFFF  # globalTid -> globalPid: clear the thread bits, keep vm/hw/pid

# Sample row (nsys 2026.2): start=38305112519 end=38305113207 eventType=59 text='aten::mul,
# seq = 45328, op_id = 990726' textId=NULL globalTid=281475602513557 endGlobalTid=NULL domainId=0
NVTX = [
    Column("start_ns", "start", required=True),
    Column("end_ns", "end", required=True),  # NULL: never closed; absent: every range would read open
    Column("event_type", "eventType", required=True),
    # The name: inline (torch's ranges) or a StringIds id (registered strings, NCCL's); every
    # export since NVTX_EVENTS exists has both columns. Without either, names would read null.
    Column("text", "text", "str", required=True),
    Column("text_id", "textId", required=True),
    Column("global_tid", "globalTid", required=True),  # the thread a range nests on
    Column("end_global_tid", "endGlobalTid"),
    Column("domain_id", "domainId", default=0),
]
# Sample row: start=38270391000 end=38270398283 eventClass=0 globalTid=281475602513557
# correlationId=120417 nameId=1303 (cudaLaunchKernel_v7000) returnValue=0
RUNTIME = [
    Column("start_ns", "start", required=True),
    Column("end_ns", "end", required=True),
    Column("event_class", "eventClass", default=0),
    Column("global_tid", "globalTid", required=True),  # the thread whose range a call belongs to
    Column("correlation_id", "correlationId", required=True),  # the GPU ops a call launched
    Column("name_id", "nameId", required=True),
    Column("return_value", "returnValue"),
]
# Device, stream, correlation id and process: where a GPU op ran and which API call (in which
# process: correlation ids repeat across processes) launched it. Without one, every op would
# read as launched by no call, or on no device.
_GPU_COMMON = [
    Column("start_ns", "start", required=True),
    Column("end_ns", "end", required=True),
    Column("device_id", "deviceId", required=True),
    Column("context_id", "contextId"),
    Column("stream_id", "streamId", required=True),
    Column("correlation_id", "correlationId", required=True),
    Column("process_key", "globalPid", required=True),
    Column("graph_node_id", "graphNodeId"),
]
# Sample row: start=38280134399 end=38280137055 deviceId=0 streamId=7 correlationId=120417
# globalPid=281475602513152 demangledName=1471 shortName=1470 gridX=1184 blockX=128 ...
KERNEL = _GPU_COMMON + [
    Column("name_id", "demangledName", required=True),
    Column("short_name_id", "shortName"),
    Column("mangled_name_id", "mangledName"),
    Column("grid_x", "gridX"),
    Column("grid_y", "gridY"),
    Column("grid_z", "gridZ"),
    Column("block_x", "blockX"),
    Column("block_y", "blockY"),
    Column("block_z", "blockZ"),
    Column("registers_per_thread", "registersPerThread"),
    Column("static_shared_bytes", "staticSharedMemory"),
    Column("dynamic_shared_bytes", "dynamicSharedMemory"),
]
MEMCPY = _GPU_COMMON + [
    Column("bytes", "bytes", required=True),
    Column("copy_kind_id", "copyKind", required=True),  # the direction (HtoD, DtoH, ...)
    Column("src_kind_id", "srcKind"),
    Column("dst_kind_id", "dstKind"),
]
MEMSET = _GPU_COMMON + [Column("bytes", "bytes", required=True)]
GRAPH_TRACE = _GPU_COMMON + [Column("graph_id", "graphId", required=True)]  # its name
STRINGS = [Column("id", "id", required=True), Column("value", "value", "str", required=True)]
SYNC = [
    Column("start_ns", "start", required=True),
    Column("end_ns", "end", required=True),
    Column("device_id", "deviceId"),
    Column("stream_id", "streamId"),
    Column("correlation_id", "correlationId", required=True),  # the API call that waited
    Column("process_key", "globalPid", required=True),
    Column("sync_type_id", "syncType"),
    Column("deprecated_sync_type_id", "deprecatedSyncType"),  # 2025.1: syncType 0, the code here
]

# Every table but NVTX_EVENTS, read whole; the largest first.
WHOLE_TABLES: dict[str, tuple[str, list[Column]]] = {
    "runtime": ("CUPTI_ACTIVITY_KIND_RUNTIME", RUNTIME),
    "kernel": ("CUPTI_ACTIVITY_KIND_KERNEL", KERNEL),
    "strings": ("StringIds", STRINGS),
    "memcpy": ("CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY),
    "memset": ("CUPTI_ACTIVITY_KIND_MEMSET", MEMSET),
    "graph": ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", GRAPH_TRACE),
    "sync": ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", SYNC),
}


THREAD_NAMES = [Column("name_id", "nameId", required=True), Column("global_tid", "globalTid", required=True)]


def require_columns(db: Database) -> None:
    """Refuse a table without a column that carries its meaning (MissingTable), before any
    query: a streamed read plans its slabs with SQL over those columns first."""
    db.require("NVTX_EVENTS", NVTX)
    db.require("ThreadNames", THREAD_NAMES)
    for table, columns in WHOLE_TABLES.values():
        db.require(table, columns)


def checked_strings(strings: pa.Table, table: str = "StringIds") -> pa.Table:
    """The string table, refused when an id or a value is NULL (every name lookup needs both)."""
    no_nulls(table, strings, {"id": "_id_" if table == "StringTable" else "id"}, ["id", "value"])
    return strings


def process_ids(global_ids: np.ndarray) -> np.ndarray:
    """The process id bits of ``globalTid`` values."""
    return (global_ids >> 24) & TID_BITS


def sync_type_labels(db: Database) -> dict[int, str]:
    """Labels of the sync codes, from the file's ``ENUM_CUPTI_SYNC_TYPE`` where it has one."""
    if not db.has("ENUM_CUPTI_SYNC_TYPE"):
        return dict(SYNC_TYPES)
    enum = db.read_table("ENUM_CUPTI_SYNC_TYPE", [Column("id", "id", required=True), Column("name", "name", "str")])
    labels = {}
    for code, name in zip(np_col(enum, "id").tolist(), enum.column("name").to_pylist()):
        suffix = next((k for k in _SYNC_ENUM_NAMES if (name or "").endswith(k)), None)
        labels[int(code)] = _SYNC_ENUM_NAMES[suffix] if suffix else "Unknown"
    return labels


def normalize_syncs(syncs: pa.Table, labels: Mapping[int, str] = SYNC_TYPES) -> pa.Table:
    times(WHOLE_TABLES["sync"][0], syncs, raw_names(SYNC))
    code = np_col(syncs, "sync_type_id", fill=0)
    if "deprecated_sync_type_id" in syncs.column_names:  # 2025.1 moved the code there, left 0 here
        old = np_col(syncs, "deprecated_sync_type_id", fill=-1)
        code = np.where((code == 0) & (old >= 0), old, code)
        syncs = syncs.drop_columns(["deprecated_sync_type_id"])
    syncs = set_column(syncs, "sync_type", lookup(code, dict(labels)))
    return syncs.drop_columns(["sync_type_id"]).replace_schema_metadata(None)


def normalize_api_calls(api: pa.Table, strings: pa.Table) -> pa.Table:
    table, raw = WHOLE_TABLES["runtime"][0], raw_names(RUNTIME)
    no_nulls(table, api, raw, ["global_tid", "correlation_id", "name_id"])
    times(table, api, raw)
    unique(table, api, ["global_tid", "start_ns", "end_ns", "correlation_id", "name_id"], "same thread, times and call")
    gtid = np_col(api, "global_tid", fill=0)  # absent in the table: 0
    cls = np_col(api, "event_class", fill=0)
    names = resolve_strings(strings, np_col(api, "name_id"))
    names_found(table, "nameId", np_col(api, "name_id"), names, "StringIds")
    return pa.table(
        {
            "start_ns": api.column("start_ns"),
            "end_ns": api.column("end_ns"),
            "name": names,
            "kind": lookup(cls, API_KINDS, default="other"),
            "process_id": pa.array(process_ids(gtid)),
            "thread_id": pa.array(gtid & TID_BITS),
            "thread_key": pa.array(gtid),
            "process_key": pa.array(gtid & PID_MASK),
            "correlation_id": api.column("correlation_id"),
            "return_value": api.column("return_value"),
        }
    )


GPU_TABLES = ("kernel", "memcpy", "memset", "graph")


def gpu_ops(raw: Mapping[str, pa.Table], strings: pa.Table) -> pa.Table:
    return concat_gpu_ops([part for key in GPU_TABLES if (part := gpu_part(key, raw[key], strings)) is not None])


def gpu_part(key: str, t: pa.Table, strings: pa.Table | Future[pa.Table]) -> pa.Table | None:
    """One GPU activity table (``key`` of GPU_TABLES), named and aligned to GPU_OPS_SCHEMA; None
    for graph launches when there are none."""
    if key == "graph" and not t.num_rows:
        return None
    strings = strings.result() if isinstance(strings, Future) else strings
    table, columns = WHOLE_TABLES[key]
    raw = raw_names(columns)
    no_nulls(table, t, raw, ["correlation_id", "device_id", "stream_id"])
    times(table, t, raw)
    unique(table, t, ["device_id", "stream_id", "start_ns", "end_ns"], "same device, stream and times")
    sizes(table, t, raw, "bytes")
    if key == "kernel":
        no_nulls(table, t, raw, ["name_id"])
        t = set_column(t, "name", names := resolve_strings(strings, np_col(t, "name_id")))
        names_found(table, "demangledName", np_col(t, "name_id"), names, "StringIds")
        for field in ("short_name", "mangled_name"):
            t = set_column(t, field, resolve_strings(strings, np_col(t, field + "_id", fill=-1)))
    elif key == "memcpy":
        copy = lookup(np_col(t, "copy_kind_id", fill=0), COPY_KINDS)
        t = set_column(set_column(t, "copy_kind", copy), "name", prefixed("Memcpy ", copy))
        for side in ("src_kind", "dst_kind"):
            t = set_column(t, side, lookup(np_col(t, side + "_id", fill=7), MEM_KINDS))
    elif key == "memset":
        t = set_column(t, "name", constant("Memset", t.num_rows))
    else:
        t = set_column(
            t, "name", pc.binary_join_element_wise("CUDA graph", t.column("graph_id").cast(pa.string()), " ")
        )
    return align_gpu_ops(set_column(t, "kind", constant(key, t.num_rows)))


def thread_table(db: Database, strings: pa.Table, ranges: pa.Table, api: pa.Table, nvtx_names: pa.Table) -> pa.Table:
    # Distinct keys by hashing, then sorting the few that remain.
    keys = np.sort(
        np.asarray(
            pa.array(
                np.concatenate(
                    [
                        np_col(ranges, "thread_key"),
                        np_col(api, "thread_key"),
                        np_col(nvtx_names, "thread_key"),
                    ]
                )
            )
            .unique()
            .to_numpy(zero_copy_only=False),
            np.int64,
        )
    )
    names: dict[int, str] = {}
    if db.has("ThreadNames"):
        tn = db.read_table("ThreadNames", THREAD_NAMES)
        ids = np_col(tn, "name_id", fill=-1)
        resolved = resolve_strings(strings, ids)
        names_found("ThreadNames", "nameId", ids, resolved, "StringIds")
        for key, name in zip(np_col(tn, "global_tid", fill=0), resolved.cast(pa.string()).to_pylist()):
            if name:
                names[int(key)] = name
    # Names given through nvtxNameOsThread win over the OS name.
    for key, name in zip(np_col(nvtx_names, "thread_key"), nvtx_names.column("thread_name").to_pylist()):
        if name:
            names[int(key)] = name
    proc_names: dict[int, str] = {}
    if db.has("PROCESSES"):
        for gpid, _pid, name in db.scalar_rows("SELECT globalPid, pid, name FROM PROCESSES"):
            if gpid is not None and name:
                proc_names[meta_int([(gpid,)], "PROCESSES.globalPid") or 0] = str(name)
    return pa.table(
        {
            "process_id": pa.array(process_ids(keys)),
            "thread_id": pa.array(keys & TID_BITS),
            "thread_key": pa.array(keys),
            "thread_name": pa.array([names.get(int(k)) for k in keys], pa.string()),
            "process_name": pa.array([proc_names.get(int(k) & PID_MASK) for k in keys], pa.string()),
        }
    )
