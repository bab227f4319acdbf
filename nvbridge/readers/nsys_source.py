"""An Nsight Systems export read as complete windows, for a streamed conversion.

The strategy is chosen up front: NVTX rows in rowid windows or in slabs of starts
(:class:`~nvbridge.readers.nsys_nvtx.NvtxParts`), API calls and GPU ops in slabs of starts
planned from each table's chunk scan (:class:`~nvbridge.readers.activity.SlabTable`), the GPU op
horizon :data:`~nvbridge.readers.activity.LATE_NS` times ``horizons``. Reads start on
construction, on the database's two reader threads: the string table, the chunk scans of the API
and GPU tables, the first NVTX part, then the first slabs; later parts and slabs are fetched one
ahead of the consumer, so memory holds a few windows whatever the report's size.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col
from nvbridge.readers import memory_nsys
from nvbridge.readers._db import Database
from nvbridge.readers.activity import LATE_NS, Part, SlabTable, first_start
from nvbridge.readers.nsys_info import device_table, source_info
from nvbridge.readers.nsys_nvtx import NO_ROWS, SLAB_SHARE, NvtxParts
from nvbridge.readers.nsys_tables import (
    GPU_TABLES,
    NVTX,
    RANGE_TYPES,
    RUNTIME,
    WHOLE_TABLES,
    checked_strings,
    gpu_part,
    normalize_api_calls,
    normalize_syncs,
    sync_type_labels,
    thread_table,
)
from nvbridge.readers.raw import GPU_OPS_SCHEMA, Restart, Tail, TraceFacts, Window, capture_end
from nvbridge.readers.windows import cut_windows

# GPU ops without rows, as the engine takes them.
NO_GPU_OPS = GPU_OPS_SCHEMA.empty_table().append_column("table_index", pa.array([], pa.int64()))
NO_GPU_OPS = NO_GPU_OPS.append_column("rowid", pa.array([], pa.int64()))


class NsysWindows:
    """A local Nsight Systems export as windows of ``window_rows`` NVTX rows (see the module
    doc); a :class:`~nvbridge.readers.raw.WindowSource`. Check :meth:`streamable` first."""

    def __init__(
        self, db: Database, window_rows: int, *, by_start: bool = False, horizons: int = 1, marks: bool = False
    ) -> None:
        self.db = db
        self._late = LATE_NS * horizons  # the GPU op horizon past a window's cut and calls
        # The string table first: every normalization needs it. Then the API calls' and GPU ops'
        # chunk scans, then the first NVTX parts; the slabs of API calls and GPU ops follow as
        # the windows ask for them (:meth:`take`).
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
        self.nvtx = NvtxParts(db, window_rows, strings, by_start)
        self.info = source_info(db)
        self.strings = strings.result()
        self.syncs = syncs.result()
        self.devices = device_table(db)
        # An API call table without rows, as the reader makes it (its columns' types).
        self._no_api = normalize_api_calls(db.read_table(*WHOLE_TABLES["runtime"], NO_ROWS), self.strings)
        # Never-closed ranges are clamped at the latest time of the capture; in a stream the
        # latest range start is the last range row's (the windows check that it is).
        last = self.nvtx.last_range_start()
        times = [last] if last is not None else []
        for stats in self.api.stats:  # the latest API call start and end (None: damaged)
            times += [int(stats.hi.max())] if stats is not None and len(stats.hi) else []
            times += [stats.latest] if stats is not None and stats.latest is not None else []
        self.capture_end_ns = capture_end(self.info, max(times, default=0))
        # nvbridge's allocator marks win over Nsight Systems' device-memory events where a report
        # has both (nvbridge.readers.memory_nsys); those, few (one per driver allocation), are
        # read whole and handed to the windows by time like the marks.
        self.has_memory = self.nvtx.has_memory(known=marks)
        if not self.has_memory and memory_nsys.has_events(db):
            self.nvtx.memory.put(memory_nsys.read_events(db))
            self.has_memory = True
        self._api_threads: list[np.ndarray] = []
        self._handed = 0  # API calls handed on

    def streamable(self) -> bool:
        """Whether the API calls can be numbered a slab at a time: read whole, or in slabs with
        rowids without gaps (a call's id is its offset from the first rowid). Starts the first
        slabs' reads when they can; else cancels the NVTX reads (the report is read whole)."""
        if not self.api.single() and self.api.dense(0) is None:
            self.nvtx.cancel()
            return False
        # The first slabs of API calls and GPU ops read now, beside the first NVTX part.
        self.api.start()
        self.gpu.start()
        return True

    @property
    def rows_read(self) -> int:
        return int(self.syncs.num_rows) + self.nvtx.rows_read + self.api.rows_read + self.gpu.rows_read

    def windows(self) -> Iterator[Window | Restart]:
        """The report's windows, in start order (:func:`nvbridge.readers.windows.cut_windows`)."""
        return cut_windows(self.nvtx.parts(), self, self.capture_end_ns, lambda: self.rows_read, self.nvtx.memory.take)

    def bounds(self) -> list[int]:
        """Where the API call and GPU op slabs meet: where a window may be cut."""
        return sorted(set(self.api.bounds()) | set(self.gpu.bounds()))

    def take(self, cut: int | None) -> tuple[pa.Table, pa.Table]:
        """The API calls starting before ``cut`` (None: all) not handed on before, each with its
        api_call_id, and the GPU ops read since, at least through the window's horizon: LATE_NS
        past the cut and past the end of its last API call (:mod:`nvbridge.engine.activity`)."""
        api = self.api.before(cut)
        if api is None:
            api = self._no_api.append_column("table_index", pa.array([], pa.int64()))
            api = api.append_column("rowid", pa.array([], pa.int64()))
        horizon = None if cut is None else max(cut, int(np_col(api, "end_ns").max(initial=cut))) + self._late
        gpu = self.gpu.before(horizon, exact=False)
        self._api_threads.append(np.unique(np_col(api, "thread_key")))
        return self._with_ids(api), gpu if gpu is not None else NO_GPU_OPS

    def _with_ids(self, api: pa.Table) -> pa.Table:
        """API call rows with their api_call_id, the place in table order: the row's offset from
        the first rowid, or (the table read whole) its place in the read (:meth:`streamable`)."""
        if self.api.single() or not api.num_rows:
            ids = np.arange(self._handed, self._handed + api.num_rows, dtype=np.int64)
        else:
            ids = np_col(api, "rowid") - self.api.dense(0)
        self._handed += api.num_rows
        return api.drop_columns(["table_index", "rowid"]).append_column("api_call_id", pa.array(ids))

    def tail(self) -> Tail:
        """The marks, every thread of the report (named) and the devices it names, once the
        windows are out."""
        keys = pa.table({"thread_key": pa.array(self.nvtx.thread_keys())})
        api = np.concatenate(self._api_threads) if self._api_threads else np.zeros(0, np.int64)
        api_threads = pa.table({"thread_key": pa.array(np.unique(api), pa.int64())})
        threads = thread_table(self.db, self.strings, keys, api_threads, self.nvtx.thread_names())
        return Tail(self.nvtx.marks(), threads, self.devices)

    def trace_facts(self) -> TraceFacts:
        """Every device a GPU op ran on and who used it, from one scan of each GPU table (for a
        trace's header and ranks, written before the GPU ops are read), and the earliest start
        (once the first window is out)."""
        starts = [t for t in (first_start([self.api, self.gpu]), self.nvtx.first_start) if t is not None]
        work, host = self._processes()
        return TraceFacts(self.devices, self._gpu_devices(), work, host, min(starts, default=None))

    def _gpu_devices(self) -> list[int]:
        tables = [WHOLE_TABLES[key][0] for key in GPU_TABLES]
        union = " UNION ".join(f"SELECT DISTINCT deviceId FROM {t}" for t in tables if "deviceId" in self.db.columns(t))
        return [int(d) for (d,) in self.db.scalar_rows(union) if d is not None] if union else []

    def _processes(self) -> tuple[dict[int, set[int]], list[int]]:
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


__all__ = ["NVTX", "NsysWindows"]
