"""nvprof SQLite databases (Version 11 and 12; any file name: .nvvp, .prof, .sql, .sqlite).

nvprof writes every CUPTI activity table even when empty, names through ``StringTable``,
a range as two MARKER rows sharing an ``id`` (flags 2 = start, 4 = end, 1 = mark), the
thread of a marker as a 12-byte ``objectId`` blob (uint32 pid, uint32 tid), and
``RUNTIME.threadId`` as a signed 32-bit number. GPU rows carry no process: nvprof profiles
one process per file, so correlation ids are matched within the file.
"""

from __future__ import annotations

import functools

import cxxfilt
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col, set_column
from nvbridge.readers._arrow import align_gpu_ops, blob_u32, concat_gpu_ops, constant, lookup, prefixed, resolve_strings
from nvbridge.readers._column import Column
from nvbridge.readers._db import Database
from nvbridge.readers.cupti_cbids import DRIVER_CBIDS, RUNTIME_CBIDS
from nvbridge.readers.devices import clock_mhz, compute_capability, devices_table, gbps, sm_count
from nvbridge.readers.nsys_tables import COPY_KINDS, MEM_KINDS, SYNC_TYPES, checked_strings
from nvbridge.readers.raw import RawProfile, SourceInfo
from nvbridge.readers.validate import BadRows, capture_span, names_found, no_nulls, raw_names, sizes, unique
from nvbridge.readers.validate import times as check_times

K = "CUPTI_ACTIVITY_KIND_"
MARKER_INSTANT, MARKER_START, MARKER_END = 1, 2, 4
OBJECT_KIND_PROCESS, OBJECT_KIND_THREAD = 1, 2

# Sample rows (net.sql, torch 1.4): flags=2 timestamp=1583978808645121207 id=1
# objectKind=2 objectId=x'423E00004037DCEA00000000' name=3 ('embedding, seq = 65') domain=0
MARKER = [
    Column("flags", "flags", required=True),
    Column("ts_ns", "timestamp", required=True),
    Column("id", "id", required=True),
    Column("object_id", "objectId", "bytes", required=True),
    Column("name_id", "name", required=True),  # a range's name (its start row's)
    Column("domain_id", "domain", default=0),
]
# cbid=211 start=1583978808645290866 end=... processId=15938 threadId=-354666688 correlationId=12
API = [
    Column("cbid", "cbid", required=True),
    Column("start_ns", "start", required=True),
    Column("end_ns", "end", required=True),
    # The thread whose range a call belongs to, and the GPU ops it launched.
    Column("process_id", "processId", required=True),
    Column("thread_id", "threadId", required=True),
    Column("correlation_id", "correlationId", required=True),
    Column("return_value", "returnValue"),
]
# Where a GPU op ran and the API call that launched it.
_GPU = [
    Column("start_ns", "start", required=True),
    Column("end_ns", "end", required=True),
    Column("device_id", "deviceId", required=True),
    Column("context_id", "contextId"),
    Column("stream_id", "streamId", required=True),
    Column("correlation_id", "correlationId", required=True),
]
KERNEL = _GPU + [
    Column("name_id", "name", required=True),
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
MEMCPY = _GPU + [
    Column("bytes", "bytes", required=True),
    Column("copy_kind_id", "copyKind", required=True),
    Column("src_kind_id", "srcKind"),
    Column("dst_kind_id", "dstKind"),
]
MEMSET = _GPU + [Column("bytes", "bytes", required=True)]
SYNC = [
    Column("start_ns", "start", required=True),
    Column("end_ns", "end", required=True),
    Column("stream_id", "streamId"),
    Column("correlation_id", "correlationId", required=True),
    Column("sync_type_id", "type"),
]
NAMES = [
    Column("object_kind", "objectKind", required=True),
    Column("object_id", "objectId", "bytes", required=True),
    Column("name_id", "name", required=True),
]


@functools.cache
def demangle(symbol: str) -> str:
    """C++ demangling, as nvprof's own viewer shows kernel names; odd symbols pass through."""
    try:
        return str(cxxfilt.demangle(symbol, external_only=False))
    except Exception:  # cxxfilt raises on anything __cxa_demangle rejects
        return symbol


def read(db: Database) -> RawProfile:
    """Read an nvprof database into normalized Arrow tables."""
    version = db.scalar_rows("SELECT version FROM Version LIMIT 1") if db.has("Version") else []
    strings = db.read_table(
        "StringTable", [Column("id", "_id_", required=True), Column("value", "value", "str", required=True)]
    )
    strings = checked_strings(strings, "StringTable")
    ranges, marks = _markers(db, strings)
    api = _api_calls(db)
    gpu = _gpu_ops(db, strings)
    syncs = db.read_table(K + "SYNCHRONIZATION", SYNC)
    check_times(K + "SYNCHRONIZATION", syncs, raw_names(SYNC))
    syncs = set_column(syncs, "sync_type", lookup(np_col(syncs, "sync_type_id", fill=0), SYNC_TYPES))
    syncs = syncs.drop_columns(["sync_type_id"]).replace_schema_metadata(None)
    for name in ("device_id", "process_key"):
        syncs = set_column(
            syncs,
            name,
            pa.array(np.zeros(syncs.num_rows, np.int64))
            if name == "process_key"
            else pa.nulls(syncs.num_rows, pa.int64()),
        )
    times = [np_col(t, c) for t in (api, gpu) for c in ("start_ns", "end_ns") if t.num_rows]
    times += [np_col(marks, "ts_ns")] if marks.num_rows else []
    times += [np_col(ranges, "start_ns")] if ranges.num_rows else []
    end = [int(a.max()) for a in times if len(a)]
    if ranges.num_rows and ranges.column("end_ns").null_count < ranges.num_rows:
        end.append(int(pc.max(ranges.column("end_ns")).as_py()))
    # Each table's times were checked alone; Unix-epoch times of one capture lie together too.
    capture_span(
        [
            *((f"the API calls' {c[:-3]}", np_col(api, c)) for c in ("start_ns", "end_ns")),
            *((f"the GPU activities' {c[:-3]}", np_col(gpu, c)) for c in ("start_ns", "end_ns")),
            (K + "MARKER.timestamp", np_col(marks, "ts_ns")),
            (K + "MARKER.timestamp", np_col(ranges, "start_ns")),
            (K + "MARKER.timestamp", np_col(ranges.filter(ranges.column("end_ns").is_valid()), "end_ns")),
        ]
    )
    info = SourceInfo(
        source=db.name,
        kind="nvprof",
        producer="nvprof",
        schema_version=str(version[0][0]) if version else None,
        time_base="epoch",
        capture_end_ns=max(end) if end else None,
    )
    threads = _threads(db, strings, ranges, api)
    devices = _devices(db, strings)
    rows = sum(t.num_rows for t in (ranges, marks, api, gpu, syncs))
    return RawProfile(info, ranges, marks, api, gpu, syncs, threads, devices, rows)


def _markers(db: Database, strings: pa.Table) -> tuple[pa.Table, pa.Table]:
    m = db.read_table(K + "MARKER", MARKER)
    raw = raw_names(MARKER)
    no_nulls(K + "MARKER", m, raw, ["flags", "id", "object_id"])
    check_times(K + "MARKER", m, raw, "ts_ns", end=None)
    flags = np_col(m, "flags")
    pid, tid = _blob_ids(K + "MARKER", m.column("object_id").combine_chunks())
    ts = np_col(m, "ts_ns")
    ids = np_col(m, "id")
    name_ids = np_col(m, "name_id", fill=0)
    resolved = resolve_strings(strings, name_ids)
    # End rows carry no name; a start or instant row's name must be in the string table.
    names_found(
        K + "MARKER", "name", np.where(flags & (MARKER_START | MARKER_INSTANT), name_ids, -1), resolved, "StringTable"
    )
    name = resolved.cast(pa.string())
    domain_ids = np_col(m, "domain_id", fill=0)
    domain = pc.if_else(
        pa.array(domain_ids == 0), pa.scalar(None, pa.string()), resolve_strings(strings, domain_ids).cast(pa.string())
    )

    starts = np.flatnonzero(flags & MARKER_START)
    ends = np.flatnonzero(flags & MARKER_END)
    end_order = ends[np.argsort(ids[ends], kind="stable")]
    pos = np.clip(np.searchsorted(ids[end_order], ids[starts]), 0, max(len(end_order) - 1, 0))
    paired = (ids[end_order][pos] == ids[starts]) if len(end_order) else np.zeros(len(starts), bool)
    match = end_order[pos] if len(end_order) else np.zeros(len(starts), np.int64)
    end_ns = np.where(paired, ts[match] if len(end_order) else 0, 0)
    key = (pid << 32) | tid
    end_key = np.where(paired, key[match] if len(end_order) else 0, 0)
    crossed = paired & (end_key != key[starts])
    s = pa.array(starts)
    ranges = pa.table(
        {
            "start_ns": pa.array(ts[starts]),
            "end_ns": pa.array(end_ns, mask=~paired),
            "name": name.take(s),
            "domain": domain.take(s),
            "domain_id": pa.array(domain_ids[starts]),
            "process_id": pa.array(pid[starts]),
            "thread_id": pa.array(tid[starts]),
            "thread_key": pa.array(key[starts]),
            "end_thread_key": pa.array(end_key, mask=~crossed),
            # nvprof does not say whether a range was pushed or started; same-thread ranges nest.
            "style": pa.array(np.where(crossed, "start_end", "push_pop"), pa.string()),
        }
    )
    marks_idx = pa.array(np.flatnonzero(flags & MARKER_INSTANT))
    marks = pa.table(
        {
            "ts_ns": pa.array(ts).take(marks_idx),
            "name": name.take(marks_idx),
            "domain": domain.take(marks_idx),
            "process_id": pa.array(pid).take(marks_idx),
            "thread_id": pa.array(tid).take(marks_idx),
        }
    )
    return ranges, marks


def _blob_ids(table: str, blobs: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(pid, tid) from nvprof's objectId blobs (uint32 pid, uint32 tid, 4 spare bytes)."""
    try:
        return blob_u32(blobs, 0), blob_u32(blobs, 4)
    except ValueError:
        short = int(np.count_nonzero(pc.binary_length(blobs).to_numpy(zero_copy_only=False) < 8))
        raise BadRows(
            f"{table}.objectId is shorter than 8 bytes in {short:,} rows; the export is damaged or "
            "was edited; export the report again."
        ) from None


def _api_calls(db: Database) -> pa.Table:
    parts = []
    for table, kind, names in (("RUNTIME", "runtime", RUNTIME_CBIDS), ("DRIVER", "driver", DRIVER_CBIDS)):
        t = db.read_table(K + table, API)
        no_nulls(K + table, t, raw_names(API), ["cbid", "correlation_id"])
        check_times(K + table, t, raw_names(API))
        unique(
            K + table, t, ["thread_id", "start_ns", "end_ns", "correlation_id", "cbid"], "same thread, times and call"
        )
        cbid = np_col(t, "cbid", fill=0)
        pid = np_col(t, "process_id", fill=0)
        # threadId is stored signed; the marker blob holds the same value unsigned.
        tid = np_col(t, "thread_id", fill=0) & 0xFFFFFFFF
        parts.append(
            pa.table(
                {
                    "start_ns": t.column("start_ns"),
                    "end_ns": t.column("end_ns"),
                    "name": _cbid_names(cbid, names),
                    "kind": constant(kind, t.num_rows),
                    "process_id": pa.array(pid),
                    "thread_id": pa.array(tid),
                    "thread_key": pa.array((pid << 32) | tid),
                    "process_key": pa.array(np.zeros(t.num_rows, np.int64)),
                    "correlation_id": t.column("correlation_id"),
                    "return_value": t.column("return_value"),
                }
            )
        )
    return pa.concat_tables(parts)


def _cbid_names(cbid: np.ndarray, names: dict[int, str]) -> pa.Array:
    enc = pa.array(cbid, pa.int64()).dictionary_encode()
    labels = [names.get(int(c), f"cbid {int(c)}") for c in enc.dictionary.to_pylist()]
    return pa.DictionaryArray.from_arrays(enc.indices, pa.array(labels, pa.string()))


def _gpu_ops(db: Database, strings: pa.Table) -> pa.Table:
    parts = []
    for table in ("CONCURRENT_KERNEL", "KERNEL"):
        k = db.read_table(K + table, KERNEL)
        _check_gpu(K + table, k, KERNEL)
        no_nulls(K + table, k, raw_names(KERNEL), ["name_id"])
        resolved = resolve_strings(strings, np_col(k, "name_id"))
        names_found(K + table, "name", np_col(k, "name_id"), resolved, "StringTable")
        mangled = resolved.cast(pa.string())
        uniq, inverse = np.unique(np.asarray(mangled.fill_null("").to_numpy(zero_copy_only=False)), return_inverse=True)
        demangled = pa.array([demangle(str(u)) for u in uniq], pa.string())
        k = set_column(k, "name", pa.DictionaryArray.from_arrays(pa.array(inverse.ravel().astype(np.int32)), demangled))
        k = set_column(k, "mangled_name", mangled)
        parts.append(set_column(k, "kind", constant("kernel", k.num_rows)))
    for table in ("MEMCPY", "MEMCPY2"):
        m = db.read_table(K + table, MEMCPY)
        _check_gpu(K + table, m, MEMCPY)
        copy = lookup(np_col(m, "copy_kind_id", fill=0), COPY_KINDS)
        m = set_column(m, "copy_kind", copy)
        for side in ("src_kind", "dst_kind"):  # CUPTI's memory kinds are nsys' plus one
            m = set_column(m, side, lookup(np_col(m, side + "_id", fill=0) - 1, MEM_KINDS, "unknown"))
        m = set_column(m, "name", prefixed("Memcpy ", copy))
        parts.append(set_column(m, "kind", constant("memcpy", m.num_rows)))
    s = db.read_table(K + "MEMSET", MEMSET)
    _check_gpu(K + "MEMSET", s, MEMSET)
    s = set_column(s, "name", constant("Memset", s.num_rows))
    parts.append(set_column(s, "kind", constant("memset", s.num_rows)))
    gpu = concat_gpu_ops([align_gpu_ops(p) for p in parts])
    return set_column(gpu, "process_key", pa.array(np.zeros(gpu.num_rows, np.int64)))


def _check_gpu(table: str, t: pa.Table, columns: list[Column]) -> None:
    raw = raw_names(columns)
    no_nulls(table, t, raw, ["correlation_id", "device_id", "stream_id"])
    check_times(table, t, raw)
    sizes(table, t, raw, "bytes")
    unique(table, t, ["device_id", "stream_id", "start_ns", "end_ns"], "same device, stream and times")


def _object_names(db: Database, strings: pa.Table, kind: int) -> dict[tuple[int, int], str]:
    t = db.read_table(K + "NAME", NAMES)
    sel = np_col(t, "object_kind", fill=0) == kind
    if not sel.any():
        return {}
    t = t.filter(pa.array(sel))
    pid, tid = _blob_ids(K + "NAME", t.column("object_id").combine_chunks())
    names = resolve_strings(strings, np_col(t, "name_id", fill=0)).cast(pa.string()).to_pylist()
    return {(int(p), int(q) if kind == OBJECT_KIND_THREAD else 0): str(n) for p, q, n in zip(pid, tid, names) if n}


def _threads(db: Database, strings: pa.Table, ranges: pa.Table, api: pa.Table) -> pa.Table:
    keys = np.unique(np.concatenate([np_col(ranges, "thread_key"), np_col(api, "thread_key")]))
    keys = keys.astype(np.int64)
    pid, tid = keys >> 32, keys & 0xFFFFFFFF
    thread_names = _object_names(db, strings, OBJECT_KIND_THREAD)
    proc_names = _object_names(db, strings, OBJECT_KIND_PROCESS)
    return pa.table(
        {
            "process_id": pa.array(pid),
            "thread_id": pa.array(tid),
            "thread_key": pa.array(keys),
            "thread_name": pa.array([thread_names.get((int(p), int(t))) for p, t in zip(pid, tid)], pa.string()),
            "process_name": pa.array([proc_names.get((int(p), 0)) for p in pid], pa.string()),
        }
    )


def _devices(db: Database, strings: pa.Table) -> pa.Table:
    """CUPTI's device records: bandwidth in KB/s, SM clock in kHz (nvbridge.readers.devices)."""
    t = db.read_table(
        K + "DEVICE",
        [
            Column("device_id", "id", required=True),
            Column("name_id", "name", required=True),
            Column("bandwidth_kbps", "globalMemoryBandwidth"),
            Column("sm_count", "numMultiprocessors"),
            Column("clock_khz", "coreClockRate"),
            Column("major", "computeCapabilityMajor"),
            Column("minor", "computeCapabilityMinor"),
        ],
    )
    sizes(K + "DEVICE", t, {"bandwidth_kbps": "globalMemoryBandwidth"}, "bandwidth_kbps")
    names = resolve_strings(strings, np_col(t, "name_id", fill=0)).cast(pa.string()).to_pylist()
    return devices_table(
        [
            (d, n, gbps(b, 1000), sm_count(sm), clock_mhz(c), compute_capability(ma, mi), None)
            for d, n, b, sm, c, ma, mi in zip(
                t.column("device_id").to_pylist(),
                names,
                *(t.column(f).to_pylist() for f in ("bandwidth_kbps", "sm_count", "clock_khz", "major", "minor")),
            )
        ]
    )
