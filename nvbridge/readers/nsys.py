"""Nsight Systems SQLite exports (2021 through 2026.x schemas) into a RawProfile.

Tables are created lazily by the exporter and columns come and go between versions, so
every read goes through :class:`Column` declarations: an absent table is zero rows, an
absent optional column its default. Names are resolved through ``StringIds`` in Arrow
(dictionary arrays), not in SQL, so the bulk read stays a plain table scan.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col, set_column
from nvbridge.errors import NotStreamable
from nvbridge.readers._db import Database
from nvbridge.readers._pages import RowFilter
from nvbridge.readers.activity import LATE_NS, Part, SlabTable
from nvbridge.readers.nsys_info import device_table, source_info
from nvbridge.readers.nsys_tables import (
    GPU_TABLES,
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
    domain_names,
    gpu_ops,
    gpu_part,
    normalize_api_calls,
    normalize_ranges,
    normalize_syncs,
    nvtx_others,
    sync_type_labels,
    thread_table,
)
from nvbridge.readers.raw import GPU_OPS_SCHEMA, RawProfile
from nvbridge.readers.slabs import Slab, plan

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
    "Stream",
    "read",
]


# API calls and GPU ops are read in slabs of window_rows / SLAB_SHARE rows: a window takes about
# that many of each (the FSDP export: 26,000 calls and 18,000 GPU ops per 65,536 NVTX rows), and
# a larger slab is held, read ahead, for nothing (-60 MB at 10M NVTX rows).
SLAB_SHARE = 2
# A condition no row meets: a read of it gives the table's columns, typed, without rows.
NO_ROWS = "1 = 0"


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
        ranges = normalize_ranges(raw["nvtx"], strings, domains)
    threads = thread_table(db, strings, ranges, api, thread_names)
    rows = sum(t.num_rows for t in (ranges, marks, api, gpu, syncs))
    return RawProfile(info, ranges, marks, api, gpu, syncs, threads, device_table(db), rows)


@dataclass(frozen=True, slots=True)
class _Window:
    rows: int  # NVTX rows read, ranges or not
    others: pa.Table | None  # marks, thread names, domain creations
    ranges: pa.Table
    thread_keys: np.ndarray
    stop: int | None = None  # rowid windows: the first rowid after the window


class Stream:
    """An export read for a streamed conversion: NVTX rows in windows of ``window_rows`` rows,
    or, ``by_start``, in slabs of half as many rows in start order (:mod:`nvbridge.readers.slabs`:
    for exports whose ranges are out of start order, which rowid windows cannot stream); API
    calls and GPU ops in slabs of starts (:class:`~nvbridge.readers.activity.SlabTable`).

    Reads start on construction, on the database's two reader threads: the string table, the
    chunk scans of the API and GPU tables, the first NVTX window, then the first slabs; later
    windows and slabs are fetched one ahead of the consumer, so memory holds a few windows
    whatever the report's size. Marks, thread names and domain names come out of the same
    windows (no second scan of NVTX_EVENTS).

    Raises (from :meth:`windows`):
        NotStreamable: a domain is named after ranges of it were already emitted unnamed.
    """

    AHEAD = 1  # NVTX windows read ahead of the one the engine works on

    def __init__(
        self,
        db: Database,
        window_rows: int,
        prepare: Callable[[pa.Table], pa.Table] = lambda ranges: ranges,
        *,
        by_start: bool = False,
        horizons: int = 1,
    ) -> None:
        self.db = db
        self.window_rows = window_rows
        self._prepare = prepare
        # Rowids still to read (none without NVTX_EVENTS); None while a window's read is finding
        # where the next one starts.
        self._next: int | None = 0
        self._last = -1
        self._pending: list[Future[_Window]] = []
        self._slabs: list[Slab] | None = None  # by_start: the slabs still to read
        self._latest_range: int | None = None
        self._domains: dict[tuple[int, int], str] = {}
        self._late = LATE_NS * horizons  # the GPU op horizon past a window's cut and calls
        # The string table first: every normalization needs it. Then the API calls' and GPU ops'
        # chunk scans, then the first NVTX windows; the slabs of API calls and GPU ops follow
        # as the engine asks for them (:meth:`activity`).
        self._strings = strings = db.submit(*WHOLE_TABLES["strings"], then=checked_strings)
        self.api = SlabTable(
            db,
            [Part(WHOLE_TABLES["runtime"][0], RUNTIME, lambda t: normalize_api_calls(t, strings.result()))],
            window_rows // SLAB_SHARE,
        )
        self.gpu = SlabTable(
            db,
            [Part(*WHOLE_TABLES[key], functools.partial(gpu_part, key, strings=strings)) for key in GPU_TABLES],
            window_rows // SLAB_SHARE,
            latest=None,  # only the API calls' latest end bounds the capture
        )
        syncs = db.submit(*WHOLE_TABLES["sync"], then=functools.partial(normalize_syncs, labels=sync_type_labels(db)))
        if db.has("NVTX_EVENTS"):
            db.require("NVTX_EVENTS", NVTX)  # a required column missing: MissingTable, before any query
            wanted = RANGE_TYPES + (NVTX_MARK, NVTX_THREAD_NAME, NVTX_DOMAIN_CREATE)
            self._types = ("eventType", wanted, True)  # NULL types: read, to be refused
            # Two subqueries: SQLite answers a lone min() or max() of rowid from the b-tree's ends,
            # but scans every row for both in one SELECT (0.16 s at 2M rows).
            ((first, last),) = db.scalar_rows(
                "SELECT (SELECT min(rowid) FROM NVTX_EVENTS), (SELECT max(rowid) FROM NVTX_EVENTS)"
            )
            self._next = self._first = int(first or 0)
            self._last = int(last or -1)
            if by_start:
                self._plan_slabs()
            for _ in range(self.AHEAD):
                self._submit_window()
        self.info = source_info(db)
        self.strings = strings.result()
        self.syncs = syncs.result()
        self.devices = device_table(db)
        # An API call table without rows, as the reader makes it (its columns' types).
        self._no_api = normalize_api_calls(db.read_table(*WHOLE_TABLES["runtime"], NO_ROWS), self.strings)
        # Never-closed ranges are clamped at the latest time of the capture; in a stream the
        # latest range start is the last range row's (the engine checks that it is).
        if self._slabs is not None:
            last = [(self._latest_range,)]
        elif db.has("NVTX_EVENTS"):
            last = db.scalar_rows(
                f"SELECT start FROM NVTX_EVENTS WHERE eventType IN {RANGE_TYPES} ORDER BY rowid DESC LIMIT 1"
            )
        else:
            last = []
        times = [int(last[0][0])] if last and last[0][0] is not None else []
        for stats in self.api.stats:  # the latest API call start and end (None: damaged)
            times += [int(stats.hi.max())] if stats is not None and len(stats.hi) else []
            times += [stats.latest] if stats is not None and stats.latest is not None else []
        self.latest_ns = max(times, default=0)
        # The first slabs of API calls and GPU ops read now, beside the first NVTX window.
        self.api.start()
        self.gpu.start()
        self._rows_read: int = self.syncs.num_rows
        self._unnamed: set[tuple[int, int]] = set()
        self._marks: list[pa.Table] = []
        self._thread_names: list[pa.Table] = []
        self._thread_keys: list[np.ndarray] = []

    def _plan_slabs(self) -> None:
        """Slabs in start order from one grouped scan; domain names first, as a slab may hold
        ranges of a domain whose creation row comes in a later slab."""
        latest = ("start", ("eventType", RANGE_TYPES))  # the latest range start
        stats = self.db.chunk_spans("NVTX_EVENTS", RowFilter(member=self._types), latest, self._first, self._last)
        # Half a window's rows a slab: a slab's rows are estimated from its chunks' spans, and
        # a wrong estimate (rows stored out of order spread over chunks) held 80 MB more at 10M.
        bounds = plan([stats], self.window_rows // SLAB_SHARE)
        if stats is None:  # a start that is not an integer: the one slab's read names it
            self._slabs = [Slab(None, None, None, False)]
            return
        self._slabs = [stats.slab(lo, hi, k == 0) for k, (lo, hi) in enumerate(bounds)]
        self._latest_range = stats.latest
        named = self.db.read_table("NVTX_EVENTS", NVTX, f'"eventType" = {NVTX_DOMAIN_CREATE}')
        self._domains.update(nvtx_others(named, self._strings.result())[2])

    def _submit_window(self) -> None:
        if self._slabs is not None:
            if self._slabs:
                where = self._slabs.pop(0).rows(self._types)
                self._pending.append(self.db.submit("NVTX_EVENTS", NVTX, where, then=self._split))
            return
        if self._next is None or self._next > self._last:
            return
        first, self._next = self._next, None  # the window's read finds where the next starts
        self._pending.append(self.db.run(functools.partial(self._read_window, first)))

    def _read_window(self, first: int) -> _Window:
        """On a reader thread: the window of the next window_rows rows from rowid ``first``.

        A window is the next window_rows rows, not a span of rowids: a row moved to rowid 2^62
        would otherwise cost 2^45 empty windows, and windows (hence the dataset) would depend on
        rowid gaps. Dense rowids give the same windows as arithmetic would. The page reader finds
        the window's end as it reads it; through SQLite, an OFFSET walk finds it first.
        """
        ev, end = self.db.read_window("NVTX_EVENTS", NVTX, first, self.window_rows, self._types)
        stop = end if end is not None else self._last + 1
        window = self._split(ev)
        return dataclasses.replace(window, stop=stop)

    def _split(self, ev: pa.Table) -> _Window:
        """On a reader thread: a window's ranges, normalized and ``prepare``d, with domain names
        left to :meth:`windows` (they depend on earlier windows); the other rows apart."""
        etype = np_col(ev, "event_type", fill=-1)  # NULL types go with the others, which refuse them
        is_range = np.isin(etype, RANGE_TYPES)
        others = None
        if not is_range.all():
            others = ev.filter(pa.array(~is_range))
            ev = ev.filter(pa.array(is_range))
        ranges = normalize_ranges(ev, self._strings.result(), {})
        return _Window(len(etype), others, self._prepare(ranges), np.unique(np_col(ranges, "thread_key")))

    def windows(self) -> Iterator[pa.Table]:
        """The ranges, one window of rowids at a time, in export order."""
        while self._pending:
            window = self._pending.pop(0).result()
            if window.stop is not None:
                self._next = window.stop
            if len(self._pending) < self.AHEAD:
                self._submit_window()
            self._rows_read += window.rows
            if window.others is not None:
                self._others(window.others)
            ranges = window.ranges
            domain_id = np_col(ranges, "domain_id")
            if (domain_id != 0).any():
                pid = np_col(ranges, "process_id")
                pairs = np.unique((pid[domain_id != 0] << 32) | domain_id[domain_id != 0])
                self._unnamed.update(
                    (int(p >> 32), int(p & 0xFFFFFFFF))
                    for p in pairs
                    if (int(p >> 32), int(p & 0xFFFFFFFF)) not in self._domains
                )
                ranges = set_column(ranges, "domain", domain_names(pid, domain_id, self._domains))
            self._thread_keys.append(window.thread_keys)
            yield ranges

    def _others(self, ev: pa.Table) -> None:
        marks, thread_names, domains = nvtx_others(ev, self.strings)
        if set(domains) & self._unnamed:
            raise NotStreamable("a domain is named after ranges of it")
        self._domains.update(domains)
        self._marks.append(marks)
        self._thread_names.append(thread_names)

    def marks(self) -> pa.Table:
        """The marks (once :meth:`windows` is exhausted)."""
        if not self._marks:
            self._others(self.db.read_table("NVTX_EVENTS", NVTX, NO_ROWS))  # no rows: the empty table
        return pa.concat_tables(self._marks)

    def threads(self, api_thread_keys: np.ndarray) -> pa.Table:
        """Every thread of the report, named (once :meth:`windows` is exhausted);
        ``api_thread_keys``: the threads the API calls were made on."""
        keys = np.unique(np.concatenate(self._thread_keys)) if self._thread_keys else np.zeros(0, np.int64)
        names = (
            pa.concat_tables(self._thread_names)
            if self._thread_names
            else pa.table({"thread_key": pa.array([], pa.int64()), "thread_name": pa.array([], pa.string())})
        )
        api = pa.table({"thread_key": pa.array(api_thread_keys, pa.int64())})
        return thread_table(self.db, self.strings, pa.table({"thread_key": pa.array(keys)}), api, names)

    def gpu_devices(self) -> list[int]:
        """Every device a GPU op ran on (one scan of each GPU table: for a trace's header,
        written before the GPU ops are read)."""
        tables = [WHOLE_TABLES[key][0] for key in GPU_TABLES]
        union = " UNION ".join(f"SELECT DISTINCT deviceId FROM {t}" for t in tables if "deviceId" in self.db.columns(t))
        return [int(d) for (d,) in self.db.scalar_rows(union) if d is not None] if union else []

    def processes(self) -> tuple[dict[int, set[int]], list[int]]:
        """Per device, the host processes that ran GPU work on it, and (only when none did) the
        processes with ranges or CUDA calls: one scan of each table, for the ranks of a trace
        written while converting (nvbridge.export.trace_ranks), known before the rows are read."""

        def scan(tables: list[tuple[str, str]], column: str, device: str) -> list[tuple[int, int]]:
            union = " UNION ".join(
                f"SELECT DISTINCT {device}, ({column} >> 24) & 16777215 FROM {t}{where}"
                for t, where in tables
                if column in self.db.columns(t) and (device == "-1" or device in self.db.columns(t))
            )
            rows = self.db.scalar_rows(union) if union else []
            return sorted({(int(d), int(p)) for d, p in rows if p is not None and d is not None})

        work: dict[int, set[int]] = {}
        for d, p in scan([(WHOLE_TABLES[key][0], "") for key in GPU_TABLES], "globalPid", "deviceId"):
            work.setdefault(d, set()).add(p)
        if work:
            return work, []
        ranges = f" WHERE eventType IN ({', '.join(str(t) for t in RANGE_TYPES)})"  # the ops table's rows, not marks
        host = scan([("NVTX_EVENTS", ranges), (WHOLE_TABLES["runtime"][0], "")], "globalTid", "-1")
        return work, [p for _, p in host]

    @property
    def rows_read(self) -> int:
        return self._rows_read + self.api.rows_read + self.gpu.rows_read

    def activity(self, cut: int | None) -> tuple[pa.Table, pa.Table]:
        """The API calls starting before ``cut`` (None: all) not handed on before, each with its
        api_call_id, and the GPU ops read since, at least through the window's horizon: LATE_NS
        past the cut and past the end of its last API call (:mod:`nvbridge.engine.activity`)."""
        api = self.api.before(cut)
        if api is None:
            api = self._no_api.append_column("table_index", pa.array([], pa.int64()))
            api = api.append_column("rowid", pa.array([], pa.int64()))
        horizon = None if cut is None else max(cut, int(np_col(api, "end_ns").max(initial=cut))) + self._late
        gpu = self.gpu.before(horizon, exact=False)
        return _with_ids(self.api, api), gpu if gpu is not None else NO_GPU_OPS


# GPU ops without rows, as the engine takes them.
NO_GPU_OPS = GPU_OPS_SCHEMA.empty_table().append_column("table_index", pa.array([], pa.int64()))
NO_GPU_OPS = NO_GPU_OPS.append_column("rowid", pa.array([], pa.int64()))


def _with_ids(reader: SlabTable, api: pa.Table) -> pa.Table:
    """API call rows with their api_call_id, the place in table order: the row's offset from
    the first rowid, or (the table read whole) its place in the read.

    Raises:
        NotStreamable: the table has rowid gaps and is read in several slabs.
    """
    rowid = np_col(api, "rowid")
    if reader.single() or not api.num_rows:
        ids = np.arange(reader.handed, reader.handed + api.num_rows, dtype=np.int64)
    elif (first := reader.dense(0)) is not None:
        ids = rowid - first
    else:
        raise NotStreamable("API call rowids have gaps")
    reader.handed += api.num_rows
    return api.drop_columns(["table_index", "rowid"]).append_column("api_call_id", pa.array(ids))
