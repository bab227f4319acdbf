"""Nsight Systems SQLite exports (2021 through 2026.x schemas) read whole into a RawProfile
(streamed: :mod:`nvbridge.readers.nsys_source`).

Tables are created lazily by the exporter and columns come and go between versions, so
every read goes through :class:`Column` declarations: an absent table is zero rows, an
absent optional column its default. Names are resolved through ``StringIds`` in Arrow
(dictionary arrays), not in SQL, so the bulk read stays a plain table scan.
"""

from __future__ import annotations

from nvbridge.readers import memory_nsys
from nvbridge.readers._db import Database
from nvbridge.readers._pages import RowFilter
from nvbridge.readers.memory_marks import split_memory
from nvbridge.readers.nsys_info import device_table, source_info
from nvbridge.readers.nsys_ranges import normalize_ranges, nvtx_others
from nvbridge.readers.nsys_tables import (
    GRAPH_TRACE,
    KERNEL,
    MEMCPY,
    MEMSET,
    NVTX,
    NVTX_DOMAIN_CREATE,
    NVTX_MARK,
    NVTX_THREAD_NAME,
    RANGE_TYPES,
    RUNTIME,
    SYNC,
    WHOLE_TABLES,
    checked_strings,
    gpu_ops,
    normalize_api_calls,
    normalize_syncs,
    sync_type_labels,
    thread_table,
)
from nvbridge.readers.raw import RawProfile

# bench_convert reads the raw tables as these declarations say.
__all__ = [
    "GRAPH_TRACE",
    "KERNEL",
    "MEMCPY",
    "MEMSET",
    "NVTX",
    "NVTX_DOMAIN_CREATE",
    "NVTX_MARK",
    "NVTX_THREAD_NAME",
    "RANGE_TYPES",
    "RUNTIME",
    "SYNC",
    "read",
]


def read(db: Database) -> RawProfile:
    """Read an Nsight Systems export into normalized Arrow tables."""
    ranges_only = others = None
    if db.has("NVTX_EVENTS"):
        db.require("NVTX_EVENTS", NVTX)  # a required column missing: MissingTable, before any query
        # Two scans, filtered in SQL: the ranges need no row selection in Arrow (a copy of
        # every column), and the few marks, thread names and domains come on the other worker.
        ranges_only = RowFilter(member=("eventType", RANGE_TYPES, False))
        # NULL event types come with the others, to be refused there rather than dropped unseen.
        others = RowFilter(member=("eventType", (NVTX_MARK, NVTX_THREAD_NAME, NVTX_DOMAIN_CREATE), True))
    with db.reading(
        {
            "nvtx": ("NVTX_EVENTS", NVTX, ranges_only),  # the largest: first, on its own worker
            **{key: (table, columns, None) for key, (table, columns) in WHOLE_TABLES.items()},
            "nvtx_other": ("NVTX_EVENTS", NVTX, others),  # a scan returning few rows: last
        }
    ) as raw:
        # The metadata, then API calls and GPU ops, are processed while NVTX_EVENTS is read.
        info = source_info(db)
        strings = checked_strings(raw["strings"])
        api = normalize_api_calls(raw["runtime"], strings)
        gpu = gpu_ops(raw, strings)
        syncs = normalize_syncs(raw["sync"], sync_type_labels(db))
        marks, thread_names, domains = nvtx_others(raw["nvtx_other"], strings)
        marks, memory = split_memory(marks)
        if not memory.num_rows:  # nvbridge's marks win over nsys' own events (nvbridge.readers.memory_nsys)
            memory = memory_nsys.read_events(db)
        ranges = normalize_ranges(raw["nvtx"], strings, domains)
    threads = thread_table(db, strings, ranges, api, thread_names)
    rows = sum(t.num_rows for t in (ranges, marks, api, gpu, syncs))
    rows += memory.num_rows
    return RawProfile(info, ranges, marks, api, gpu, syncs, threads, device_table(db), rows, memory)
