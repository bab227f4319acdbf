"""Nsight Systems SQLite exports (2021 through 2026.x schemas) into a RawProfile.

Tables are created lazily by the exporter and columns come and go between versions, so
every read goes through :class:`Column` declarations: an absent table is zero rows, an
absent optional column its default. Names are resolved through ``StringIds`` in Arrow
(dictionary arrays), not in SQL, so the bulk read stays a plain table scan.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa

from nvbridge.columns import dense_ids, np_col, set_column
from nvbridge.errors import NotStreamable
from nvbridge.profile import RawProfile, SourceInfo
from nvbridge.readers._arrow import align_gpu_ops, concat_gpu_ops, constant, lookup, prefixed, resolve_strings
from nvbridge.readers._db import Column, Database

# ENUM_NSYS_EVENT_TYPE: these ids are stable since NVTX_EVENTS exists; ENUM_* tables are
# absent from <=2022 exports, so the values live here.
NVTX_MARK, NVTX_THREAD_NAME = 34, 39
NVTX_PUSH_POP, NVTX_START_END = 59, 60
NVTXT_PUSH_POP, NVTXT_START_END = 70, 71
NVTX_DOMAIN_CREATE = 75
RANGE_TYPES = (NVTX_PUSH_POP, NVTX_START_END, NVTXT_PUSH_POP, NVTXT_START_END)

# ENUM_CUDA_MEMCPY_OPER (same ids as CUPTI's copyKind).
COPY_KINDS = {
    0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
    7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD",
}
# ENUM_CUPTI_SYNC_TYPE.
SYNC_TYPES = {0: "Unknown", 1: "Event sync", 2: "Stream wait", 3: "Stream sync", 4: "Context sync"}
# ENUM_NSYS_EVENT_CLASS for CUPTI_ACTIVITY_KIND_RUNTIME.eventClass.
API_KINDS = {0: "runtime", 1: "driver"}

_TID_BITS = 0xFFFFFF
_PID_MASK = ~0xFFFFFF  # globalTid -> globalPid: clear the thread bits, keep vm/hw/pid

# Sample row (nsys 2026.2): start=38305112519 end=38305113207 eventType=59 text='aten::mul,
# seq = 45328, op_id = 990726' textId=NULL globalTid=281475602513557 endGlobalTid=NULL domainId=0
NVTX = [
    Column("start_ns", "start", required=True),
    Column("end_ns", "end"),
    Column("event_type", "eventType", required=True),
    Column("text", "text", "str"),
    Column("text_id", "textId"),
    Column("global_tid", "globalTid"),
    Column("end_global_tid", "endGlobalTid"),
    Column("domain_id", "domainId", default=0),
]
# Sample row: start=38270391000 end=38270398283 eventClass=0 globalTid=281475602513557
# correlationId=120417 nameId=1303 (cudaLaunchKernel_v7000) returnValue=0
RUNTIME = [
    Column("start_ns", "start", required=True),
    Column("end_ns", "end", required=True),
    Column("event_class", "eventClass", default=0),
    Column("global_tid", "globalTid"),
    Column("correlation_id", "correlationId"),
    Column("name_id", "nameId", required=True),
    Column("return_value", "returnValue"),
]
_GPU_COMMON = [
    Column("start_ns", "start", required=True),
    Column("end_ns", "end", required=True),
    Column("device_id", "deviceId"),
    Column("context_id", "contextId"),
    Column("stream_id", "streamId"),
    Column("correlation_id", "correlationId"),
    Column("process_key", "globalPid"),
    Column("graph_node_id", "graphNodeId"),
]
# Sample row: start=38280134399 end=38280137055 deviceId=0 streamId=7 correlationId=120417
# globalPid=281475602513152 demangledName=1471 shortName=1470 gridX=1184 blockX=128 ...
KERNEL = _GPU_COMMON + [
    Column("name_id", "demangledName", required=True),
    Column("short_name_id", "shortName"),
    Column("mangled_name_id", "mangledName"),
    Column("grid_x", "gridX"), Column("grid_y", "gridY"), Column("grid_z", "gridZ"),
    Column("block_x", "blockX"), Column("block_y", "blockY"), Column("block_z", "blockZ"),
    Column("registers_per_thread", "registersPerThread"),
    Column("static_shared_bytes", "staticSharedMemory"),
    Column("dynamic_shared_bytes", "dynamicSharedMemory"),
]
MEMCPY = _GPU_COMMON + [
    Column("bytes", "bytes"),
    Column("copy_kind_id", "copyKind"),
]
MEMSET = _GPU_COMMON + [Column("bytes", "bytes")]
GRAPH_TRACE = _GPU_COMMON + [Column("graph_id", "graphId")]
STRINGS = [Column("id", "id", required=True), Column("value", "value", "str")]
SYNC = [
    Column("start_ns", "start", required=True),
    Column("end_ns", "end", required=True),
    Column("device_id", "deviceId"),
    Column("stream_id", "streamId"),
    Column("correlation_id", "correlationId"),
    Column("process_key", "globalPid"),
    Column("sync_type_id", "syncType"),
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


def _process_id(global_ids: np.ndarray) -> np.ndarray:
    return (global_ids >> 24) & _TID_BITS


def read(db: Database) -> RawProfile:
    """Read an Nsight Systems export into normalized Arrow tables."""
    ranges_only = others = None
    if db.has("NVTX_EVENTS"):
        # Two scans, filtered in SQL: the ranges need no row selection in Arrow (a copy of
        # every column), and the few marks, thread names and domains come on the other worker.
        event_type = db.table("NVTX_EVENTS").c.eventType
        ranges_only = event_type.in_(RANGE_TYPES)
        others = event_type.in_((NVTX_MARK, NVTX_THREAD_NAME, NVTX_DOMAIN_CREATE))
    with db.reading({
        "nvtx": ("NVTX_EVENTS", NVTX, ranges_only),  # the largest: first, on its own worker
        **{key: (table, columns, None) for key, (table, columns) in WHOLE_TABLES.items()},
        "nvtx_other": ("NVTX_EVENTS", NVTX, others),  # a scan returning few rows: last
    }) as raw:
        # The metadata, then API calls and GPU ops, are processed while NVTX_EVENTS is read.
        info = _source_info(db)
        strings = raw["strings"]
        api = _api_calls(raw["runtime"], strings)
        gpu = _gpu_ops(raw, strings)
        syncs = _syncs(raw["sync"])
        marks, thread_names, domains = _nvtx_others(raw["nvtx_other"], strings)
        ranges = _ranges(raw["nvtx"], strings, domains)
    threads = _threads(db, strings, ranges, api, thread_names)
    rows = sum(t.num_rows for t in (ranges, marks, api, gpu, syncs))
    return RawProfile(info, ranges, marks, api, gpu, syncs, threads, _devices(db), rows)


def _meta(db: Database) -> dict[str, str]:
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if db.has(table):
            return {str(k): str(v) for k, v in db.scalar_rows(f"SELECT name, value FROM {table}")}
    return {}


def _source_info(db: Database) -> SourceInfo:
    meta = _meta(db)
    start_utc = None
    if db.has("TARGET_INFO_SESSION_START_TIME"):
        rows = db.scalar_rows("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
        start_utc = int(rows[0][0]) if rows and rows[0][0] is not None else None
    capture_end = None
    if db.has("ANALYSIS_DETAILS") and "duration" in db.columns("ANALYSIS_DETAILS"):
        rows = db.scalar_rows("SELECT duration FROM ANALYSIS_DETAILS LIMIT 1")
        capture_end = int(rows[0][0]) if rows and rows[0][0] is not None else None
    normalized = meta.get("EXPORT_PARAM_TIME_NORMALIZE", "false").lower() == "true"
    if normalized and capture_end is not None and start_utc is not None:
        capture_end += start_utc
    return SourceInfo(
        source=db.name,
        kind="nsys",
        rank=_rank(db),
        producer=meta.get("EXPORT_PRODUCT_NAME", "Nsight Systems").replace("NVIDIA ", ""),
        producer_version=meta.get("EXPORT_PRODUCT_VERSION"),
        schema_version=meta.get("EXPORT_SCHEMA_VERSION"),
        time_base="epoch" if normalized else "session",
        session_start_utc_ns=start_utc,
        capture_end_ns=capture_end,
    )


def _rank(db: Database) -> int | None:
    """RANK from the captured process environment: that one variable, nothing else is kept."""
    if not db.has("META_DATA_CAPTURE"):
        return None
    rows = db.scalar_rows("SELECT value FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT_VARIABLE%' "
                          "AND value LIKE 'RANK=%'")
    for (value,) in rows:
        text = str(value)[5:]
        if text.isdigit():
            return int(text)
    return None


def _text(ev: pa.Table, strings: pa.Table) -> pa.ChunkedArray:
    """NVTX messages; registered strings (NCCL's, for one) come by id. coalesce is 5x faster
    than a masked replace of the few rows that need it."""
    text = ev.column("text")
    text_id = ev.column("text_id")
    if text_id.null_count < len(text_id):
        text = pc.coalesce(text, resolve_strings(strings, np_col(ev, "text_id", fill=-1)).cast(pa.string()))
    return text


def _nvtx_others(ev: pa.Table, strings: pa.Table) -> tuple[pa.Table, pa.Table, dict[tuple[int, int], str]]:
    """Mark, thread-name and domain-creation rows -> (marks, thread names, domain names).

    Domain names come from NvtxDomainCreate rows and are scoped per process (NVIDIA's reports
    join on domainId and the pid bits). Windowed exports may lack them: then the domain is
    reported by id.
    """
    etype = np_col(ev, "event_type")
    gtid = np_col(ev, "global_tid", fill=0)
    pid = _process_id(gtid)
    domain_id = np_col(ev, "domain_id", fill=0)
    text = _text(ev, strings)
    is_domain = etype == NVTX_DOMAIN_CREATE
    domains = {(int(p), int(d)): str(n) for p, d, n in zip(
        pid[is_domain], domain_id[is_domain], text.filter(pa.array(is_domain)).to_pylist())}
    is_mark = etype == NVTX_MARK
    msel = pa.array(is_mark)
    marks = pa.table({
        "ts_ns": ev.column("start_ns").filter(msel),
        "name": text.filter(msel),
        "domain": _domain_names(pid[is_mark], domain_id[is_mark], domains),
        "process_id": pa.array(pid[is_mark]),
        "thread_id": pa.array(gtid[is_mark] & _TID_BITS),
    })
    is_tname = etype == NVTX_THREAD_NAME
    thread_names = pa.table({
        "thread_key": pa.array(gtid[is_tname]),
        "thread_name": text.filter(pa.array(is_tname)),
    })
    return marks, thread_names, domains


def _ranges(ev: pa.Table, strings: pa.Table, domains: dict[tuple[int, int], str]) -> pa.Table:
    """Push/pop and start/end range rows -> the normalized ranges table."""
    etype = np_col(ev, "event_type")
    gtid = np_col(ev, "global_tid", fill=0)
    pid = _process_id(gtid)
    domain_id = np_col(ev, "domain_id", fill=0)
    end_gtid = np_col(ev, "end_global_tid", fill=0)
    crossed = (end_gtid != 0) & (end_gtid != gtid)
    push_pop = (etype == NVTX_PUSH_POP) | (etype == NVTXT_PUSH_POP)
    return pa.table({
        "start_ns": ev.column("start_ns"),
        "end_ns": ev.column("end_ns"),
        "name": _text(ev, strings),
        "domain": _domain_names(pid, domain_id, domains),
        "domain_id": pa.array(domain_id),
        "process_id": pa.array(pid),
        "thread_id": pa.array(gtid & _TID_BITS),
        "thread_key": pa.array(gtid),
        "end_thread_key": pa.array(end_gtid, mask=~crossed),
        "style": lookup(push_pop.astype(np.int64), {1: "push_pop", 0: "start_end"}),
    })


def _domain_names(pid: np.ndarray, domain_id: np.ndarray, names: dict[tuple[int, int], str]) -> pa.Array:
    """Per-row domain name: null for the default domain 0 and for domains whose creation the
    export lacks (windowed captures); ``domain_id`` still tells those apart."""
    out = pa.nulls(len(pid), pa.string())
    if not names or not (domain_id != 0).any():
        return out
    ids, count = dense_ids(pid, domain_id)
    first = np.zeros(count, np.int64)
    first[ids[::-1]] = np.arange(len(ids))[::-1]  # a row of each (pid, domain) pair
    labels = [names.get((int(pid[i]), int(domain_id[i]))) if domain_id[i] else None for i in first]
    return pa.DictionaryArray.from_arrays(pa.array(ids.astype(np.int32)), pa.array(labels, pa.string()))


def _syncs(syncs: pa.Table) -> pa.Table:
    syncs = set_column(syncs, "sync_type", lookup(np_col(syncs, "sync_type_id"), SYNC_TYPES))
    return syncs.drop_columns(["sync_type_id"])


def _api_calls(api: pa.Table, strings: pa.Table) -> pa.Table:
    gtid = np_col(api, "global_tid", fill=0)
    cls = np_col(api, "event_class", fill=0)
    return pa.table({
        "start_ns": api.column("start_ns"),
        "end_ns": api.column("end_ns"),
        "name": resolve_strings(strings, np_col(api, "name_id", fill=-1)),
        "kind": lookup(cls, API_KINDS, default="other"),
        "process_id": pa.array(_process_id(gtid)),
        "thread_id": pa.array(gtid & _TID_BITS),
        "thread_key": pa.array(gtid),
        "process_key": pa.array(gtid & _PID_MASK),
        "correlation_id": api.column("correlation_id"),
        "return_value": api.column("return_value"),
    })


GPU_TABLES = ("kernel", "memcpy", "memset", "graph")


def _gpu_ops(raw: Mapping[str, pa.Table], strings: pa.Table) -> pa.Table:
    return concat_gpu_ops([part for key in GPU_TABLES if (part := _gpu_part(key, raw[key], strings)) is not None])


def _gpu_part(key: str, t: pa.Table, strings: pa.Table | Future[pa.Table]) -> pa.Table | None:
    """One GPU activity table (``key`` of GPU_TABLES), named and aligned to GPU_OPS_SCHEMA; None
    for graph launches when there are none."""
    if key == "graph" and not t.num_rows:
        return None
    strings = strings.result() if isinstance(strings, Future) else strings
    if key == "kernel":
        t = set_column(t, "name", resolve_strings(strings, np_col(t, "name_id", fill=-1)))
        for field in ("short_name", "mangled_name"):
            t = set_column(t, field, resolve_strings(strings, np_col(t, field + "_id", fill=-1)))
    elif key == "memcpy":
        copy = lookup(np_col(t, "copy_kind_id", fill=0), COPY_KINDS)
        t = set_column(set_column(t, "copy_kind", copy), "name", prefixed("Memcpy ", copy))
    elif key == "memset":
        t = set_column(t, "name", constant("Memset", t.num_rows))
    else:
        t = set_column(t, "name", pc.binary_join_element_wise(
            "CUDA graph", t.column("graph_id").cast(pa.string()), " "))
    return align_gpu_ops(set_column(t, "kind", constant(key, t.num_rows)))


def _threads(db: Database, strings: pa.Table, ranges: pa.Table, api: pa.Table,
             nvtx_names: pa.Table) -> pa.Table:
    # Distinct keys by hashing, then sorting the few that remain.
    keys = np.sort(np.asarray(pa.array(np.concatenate([
        np_col(ranges, "thread_key"), np_col(api, "thread_key"), np_col(nvtx_names, "thread_key"),
    ])).unique().to_numpy(zero_copy_only=False), np.int64))
    names: dict[int, str] = {}
    if db.has("ThreadNames"):
        tn = db.read_table("ThreadNames", [Column("name_id", "nameId"), Column("global_tid", "globalTid")])
        for key, name in zip(np_col(tn, "global_tid", fill=0),
                             resolve_strings(strings, np_col(tn, "name_id", fill=-1)).cast(pa.string()).to_pylist()):
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
                proc_names[int(gpid)] = str(name)
    return pa.table({
        "process_id": pa.array(_process_id(keys)),
        "thread_id": pa.array(keys & _TID_BITS),
        "thread_key": pa.array(keys),
        "thread_name": pa.array([names.get(int(k)) for k in keys], pa.string()),
        "process_name": pa.array([proc_names.get(int(k) & _PID_MASK) for k in keys], pa.string()),
    })


def _devices(db: Database) -> pa.Table:
    for table, id_col in (("TARGET_INFO_GPU", "id"), ("TARGET_INFO_GPU", "deviceId"),
                          ("TARGET_INFO_CUDA_GPU", "deviceId")):
        if id_col in db.columns(table) and "name" in db.columns(table):
            # memoryBandwidth: bytes/s as the driver reports it (for % of peak, nvbridge.gpus).
            bw = "memoryBandwidth" if "memoryBandwidth" in db.columns(table) else "NULL"
            rows = db.scalar_rows(f"SELECT DISTINCT {id_col}, name, {bw} FROM {table} ORDER BY {id_col}")
            return pa.table({
                "device_id": pa.array([int(r[0]) for r in rows], pa.int64()),
                "name": pa.array([r[1] for r in rows], pa.string()),
                "memory_gbps": pa.array([float(r[2]) / 1e9 if r[2] else None for r in rows], pa.float64()),
            })
    return pa.table({"device_id": pa.array([], pa.int64()), "name": pa.array([], pa.string()),
                     "memory_gbps": pa.array([], pa.float64())})




@dataclass(frozen=True, slots=True)
class _Window:
    rows: int  # NVTX rows read, ranges or not
    others: pa.Table | None  # marks, thread names, domain creations
    ranges: pa.Table
    thread_keys: np.ndarray


class Stream:
    """An export read for a streamed conversion: API calls and GPU ops whole (numbers and
    name ids, compact), NVTX rows in windows of ``window_rows`` rowids.

    Reads start on construction, on the database's two reader threads: the first NVTX
    windows, then the whole tables; later windows are fetched two ahead of the consumer, so
    memory holds a few windows whatever the report's size. Marks, thread names and domain
    names come out of the same windows (no second scan of NVTX_EVENTS).

    Raises (from :meth:`windows`):
        NotStreamable: a domain is named after ranges of it were already emitted unnamed.
    """

    AHEAD = 2

    def __init__(self, db: Database, window_rows: int,
                 prepare: Callable[[pa.Table], pa.Table] = lambda ranges: ranges) -> None:
        self.db = db
        self.window_rows = window_rows
        self._prepare = prepare
        self._next, self._last = 0, -1  # rowids still to read (none without NVTX_EVENTS)
        self._pending: list[Future[_Window]] = []
        # The API calls and GPU ops come first: the first window cannot be correlated without
        # them. The NVTX windows follow on whichever reader is free.
        # Each is normalized on its reader thread as soon as it is read; the string table, which
        # they need, first.
        self._strings = strings = db.submit(*WHOLE_TABLES["strings"])
        api = db.submit(*WHOLE_TABLES["runtime"], then=lambda t: _api_calls(t, strings.result()))
        gpu = {key: db.submit(*WHOLE_TABLES[key], then=functools.partial(_gpu_part, key, strings=strings))
               for key in GPU_TABLES}
        syncs = db.submit(*WHOLE_TABLES["sync"], then=_syncs)
        if db.has("NVTX_EVENTS"):
            t = db.table("NVTX_EVENTS")
            self._types = t.c.eventType.in_(RANGE_TYPES + (NVTX_MARK, NVTX_THREAD_NAME, NVTX_DOMAIN_CREATE))
            # Two subqueries: SQLite answers a lone min() or max() of rowid from the b-tree's ends,
            # but scans every row for both in one SELECT (0.16 s at 2M rows).
            (first, last), = db.scalar_rows("SELECT (SELECT min(rowid) FROM NVTX_EVENTS), "
                                            "(SELECT max(rowid) FROM NVTX_EVENTS)")
            self._next, self._last = int(first or 0), int(last or -1)
            for _ in range(self.AHEAD):
                self._submit_window()
        self.info = _source_info(db)
        self.strings = strings.result()
        self.api_calls = api.result()
        self.syncs = syncs.result()
        self.gpu_ops = concat_gpu_ops([part for key in GPU_TABLES if (part := gpu[key].result()) is not None])
        self.devices = _devices(db)
        # Never-closed ranges are clamped at the latest time of the capture; in a stream the
        # latest range start is the last range row's (the engine checks that it is).
        last = db.scalar_rows(f"SELECT start FROM NVTX_EVENTS WHERE eventType IN {RANGE_TYPES} "
                              "ORDER BY rowid DESC LIMIT 1") if db.has("NVTX_EVENTS") else []
        times = [int(last[0][0])] if last and last[0][0] is not None else []
        times += [int(np_col(self.api_calls, c).max()) for c in ("start_ns", "end_ns") if self.api_calls.num_rows]
        self.latest_ns = max(times, default=0)
        self.rows_read = self.api_calls.num_rows + self.gpu_ops.num_rows + self.syncs.num_rows
        self._domains: dict[tuple[int, int], str] = {}
        self._unnamed: set[tuple[int, int]] = set()
        self._marks: list[pa.Table] = []
        self._thread_names: list[pa.Table] = []
        self._thread_keys: list[np.ndarray] = []

    def read_while(self, busy: Future[Any], most: int) -> None:
        """Keep both readers fetching NVTX windows, up to ``most`` waiting, until ``busy`` is done
        (the engine being set up); the queue then drains back to AHEAD as windows are consumed."""
        while not busy.done():
            reading = [f for f in self._pending if not f.done()]
            if len(reading) < self.db.READERS and len(self._pending) < most and self._next <= self._last:
                self._submit_window()
                continue
            wait([busy, *reading], return_when=FIRST_COMPLETED)

    def _submit_window(self) -> None:
        if self._next > self._last:
            return
        rowid: sa.ColumnClause[int] = sa.literal_column("rowid")
        where = sa.and_(self._types, rowid >= self._next, rowid < self._next + self.window_rows)
        self._pending.append(self.db.submit("NVTX_EVENTS", NVTX, where, then=self._split))
        self._next += self.window_rows

    def _split(self, ev: pa.Table) -> _Window:
        """On a reader thread: a window's ranges, normalized and ``prepare``d, with domain names
        left to :meth:`windows` (they depend on earlier windows); the other rows apart."""
        etype = np_col(ev, "event_type")
        is_range = np.isin(etype, RANGE_TYPES)
        others = None
        if not is_range.all():
            others = ev.filter(pa.array(~is_range))
            ev = ev.filter(pa.array(is_range))
        ranges = _ranges(ev, self._strings.result(), {})
        return _Window(len(etype), others, self._prepare(ranges), np.unique(np_col(ranges, "thread_key")))

    def windows(self) -> Iterator[pa.Table]:
        """The ranges, one window of rowids at a time, in export order."""
        while self._pending:
            window = self._pending.pop(0).result()
            if len(self._pending) < self.AHEAD:
                self._submit_window()
            self.rows_read += window.rows
            if window.others is not None:
                self._others(window.others)
            ranges = window.ranges
            domain_id = np_col(ranges, "domain_id")
            if (domain_id != 0).any():
                pid = np_col(ranges, "process_id")
                pairs = np.unique((pid[domain_id != 0] << 32) | domain_id[domain_id != 0])
                self._unnamed.update((int(p >> 32), int(p & 0xFFFFFFFF)) for p in pairs
                                     if (int(p >> 32), int(p & 0xFFFFFFFF)) not in self._domains)
                ranges = set_column(ranges, "domain", _domain_names(pid, domain_id, self._domains))
            self._thread_keys.append(window.thread_keys)
            yield ranges

    def _others(self, ev: pa.Table) -> None:
        marks, thread_names, domains = _nvtx_others(ev, self.strings)
        if set(domains) & self._unnamed:
            raise NotStreamable("a domain is named after ranges of it")
        self._domains.update(domains)
        self._marks.append(marks)
        self._thread_names.append(thread_names)

    def marks(self) -> pa.Table:
        """The marks (once :meth:`windows` is exhausted)."""
        if not self._marks:
            self._others(self.db.read_table("NVTX_EVENTS", NVTX, sa.false()))  # no rows: the empty table
        return pa.concat_tables(self._marks)

    def threads(self) -> pa.Table:
        """Every thread of the report, named (once :meth:`windows` is exhausted)."""
        keys = np.unique(np.concatenate(self._thread_keys)) if self._thread_keys else np.zeros(0, np.int64)
        names = pa.concat_tables(self._thread_names) if self._thread_names else \
            pa.table({"thread_key": pa.array([], pa.int64()), "thread_name": pa.array([], pa.string())})
        return _threads(self.db, self.strings, pa.table({"thread_key": pa.array(keys)}), self.api_calls, names)
