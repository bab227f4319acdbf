"""What a trace is read from: a loaded report's tables or a dataset directory, a chunk at a time,
and the first pass over their time, process and device columns (:func:`plan`): the trace's origin
and window, the capture window, the report's processes and ranks, and what the window keeps.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from nvbridge.columns import np_col
from nvbridge.dataset.check import check_dataset, check_intervals
from nvbridge.dataset.files import ReadErrors, outside_window
from nvbridge.dataset.schema import ReportTables
from nvbridge.dataset.timeline import CaptureWindow, in_window
from nvbridge.errors import ExportError
from nvbridge.export.chrome import BATCH_ROWS, TraceWriter
from nvbridge.export.chrome_memory import MEMORY_COLUMNS
from nvbridge.export.chrome_text import API_COLUMNS, GPU_COLUMNS, OP_COLUMNS
from nvbridge.export.trace_ranks import Ranks, recorded_rank, recorded_world, report_ranks

EVENT_TABLES = ("api_calls", "gpu_ops", "ops")  # the order they are written in: calls before GPU ops
COLUMNS = {"ops": OP_COLUMNS, "api_calls": API_COLUMNS, "gpu_ops": GPU_COLUMNS, "memory": MEMORY_COLUMNS}
SPAN_COLUMNS = ["start_ns", "end_ns", "process_id"]
PLAN_COLUMNS = {"ops": SPAN_COLUMNS, "api_calls": SPAN_COLUMNS, "gpu_ops": [*SPAN_COLUMNS, "device_id"]}


class _Loaded:
    """A report already in memory, handed out in slices of BATCH_ROWS rows."""

    def __init__(self, report: ReportTables) -> None:
        self.report = report
        self.meta = report.meta

    def table(self, name: str) -> pa.Table:
        return self.report.table(name)

    def rows(self, name: str) -> int:
        return self.report.rows(name)

    def chunks(
        self, name: str, columns: Sequence[str], window: tuple[int | None, int | None] = (None, None)
    ) -> Iterator[pa.Table]:
        table = self.report.table(name)
        for lo in range(0, table.num_rows, BATCH_ROWS):
            yield table.slice(lo, BATCH_ROWS)


class _Dataset:
    """A dataset directory, read a row group at a time with only the columns asked for; only the
    threads and devices are read whole (:meth:`table`), the event tables never are."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        # The checks dataset.load makes, on the files this reader opens (rows: as each part is read).
        self.meta = check_dataset(directory, (*EVENT_TABLES, "memory", "threads", "devices"), COLUMNS)
        self._whole: dict[str, pa.Table] = {}
        for name in ("threads", "devices"):
            self.table(name)
        self.files: dict[str, pq.ParquetFile] = {}
        for name in EVENT_TABLES:
            with self._reading(name):
                self.files[name] = pq.ParquetFile(directory / f"{name}.parquet")
        if (directory / "memory.parquet").exists():  # optional: a dataset older than the table has none
            with self._reading("memory"):
                self.files["memory"] = pq.ParquetFile(directory / "memory.parquet")

    def _reading(self, name: str) -> ReadErrors:
        return ReadErrors(self.directory, name)

    def table(self, name: str) -> pa.Table:
        if name not in self._whole:
            with self._reading(name):
                self._whole[name] = pq.read_table(self.directory / f"{name}.parquet")
        return self._whole[name]

    def rows(self, name: str) -> int:
        return int(self.files[name].metadata.num_rows) if name in self.files else 0

    def chunks(
        self, name: str, columns: Sequence[str], window: tuple[int | None, int | None] = (None, None)
    ) -> Iterator[pa.Table]:
        pf = self.files.get(name)
        if pf is None:  # no memory table
            return
        for i in range(pf.metadata.num_row_groups):
            if outside_window(pf.metadata.row_group(i), window) or _after(pf.metadata.row_group(i), window[1]):
                continue
            with self._reading(name):
                chunk = pf.read_row_group(i, columns=list(columns))
            if "end_ns" in columns:
                check_intervals(self.directory, name, chunk)
            yield chunk


def _after(row_group: pq.RowGroupMetaData, end_ns: int | None) -> bool:
    """A row group of events (``ts_ns``: the memory table) all later than ``end_ns``."""
    names = [row_group.column(i).path_in_schema for i in range(row_group.num_columns)]
    if end_ns is None or "ts_ns" not in names:
        return False
    stats = row_group.column(names.index("ts_ns")).statistics
    return bool(stats is not None and stats.has_min_max and stats.min > end_ns)


def memory_chunks(source: ReportTables, end_ns: int | None = None) -> Iterator[pa.Table]:
    """The memory rows up to ``end_ns`` (with those before any window: the value live at its
    start is drawn from them), a chunk at a time; none where the source has no memory table."""
    try:
        if not source.rows("memory"):
            return
    except KeyError:  # a conversion's tables without one
        return
    yield from source.chunks("memory", MEMORY_COLUMNS, (None, end_ns))


def feed_memory(
    writer: TraceWriter, source: ReportTables, window: tuple[int | None, int | None], offset_ns: int, pid_base: int
) -> None:
    """One report's memory rows into a trace of many (nvbridge.export.trace_many): its own
    ``window``, moved onto the aligned clock by ``offset_ns`` and to its processes' ids by ``pid_base``."""
    lo, hi = window
    floor = None if lo is None else max(lo + offset_ns, writer.origin)
    for chunk in memory_chunks(source, hi):
        if hi is not None:
            chunk = chunk.filter(pc.less_equal(chunk.column("ts_ns"), hi))
        for column, by in (("ts_ns", offset_ns), ("process_id", pid_base)):
            at = chunk.column_names.index(column)
            chunk = chunk.set_column(at, column, pc.add(chunk.column(column), pa.scalar(by, pa.int64())))
        writer.memory(chunk, floor)


@dataclass(frozen=True)
class Plan:
    """What the first pass found: the trace's origin and window, and what the report holds."""

    origin_ns: int
    start_ns: int | None
    end_ns: int | None
    kept_rows: int
    first_ns: int | None
    last_ns: int | None
    processes: frozenset[int]
    host_processes: frozenset[int] = frozenset()  # with ranges or CUDA calls
    gpu_users: Mapping[int, frozenset[int]] = field(default_factory=dict)  # device -> processes that used it
    kept_processes: frozenset[int] = frozenset()  # with rows in the window and process filter

    @property
    def owners(self) -> dict[int, int]:
        """Device -> its only user: GPU ops without a process belong to it (nvbridge.dataset.timeline)."""
        return {d: next(iter(u)) for d, u in self.gpu_users.items() if len(u) == 1}

    def ranks(self, meta: Mapping[str, str | None]) -> Ranks:
        return report_ranks(self.gpu_users, self.host_processes, recorded_rank(meta), recorded_world(meta))


def plan(source: ReportTables, start_ns: int | None, end_ns: int | None, processes: set[int] | None) -> Plan:
    """First pass over the time, process and device columns only."""
    kept, origin = 0, None
    capture = CaptureWindow()  # the one timeline's capture window (nvbridge.dataset.timeline)
    pids: dict[str, set[int]] = {name: set() for name in EVENT_TABLES}
    users: dict[int, set[int]] = {}
    kept_pids: set[int] = set()
    for name in EVENT_TABLES:
        for chunk in source.chunks(name, PLAN_COLUMNS[name], (None, None)):
            if not chunk.num_rows:
                continue
            start, pid = np_col(chunk, "start_ns"), np_col(chunk, "process_id", fill=-1)
            capture = capture.add(chunk)
            uniq = np.unique(pid)
            pids[name].update(uniq.tolist())
            if name == "gpu_ops":
                _add_users(users, np_col(chunk, "device_id", fill=-1), pid)
            keep = in_window(chunk, start_ns, end_ns, processes)
            if keep.any():
                kept += int(keep.sum())
                kept_pids.update((uniq if keep.all() else np.unique(pid[keep])).tolist())
                low = int(start[keep].min())
                origin = low if origin is None else min(origin, low)
    return Plan(
        origin or 0,
        start_ns,
        end_ns,
        kept,
        capture.start_ns,
        capture.end_ns,
        frozenset(set().union(*pids.values()) - {-1}),
        frozenset((pids["ops"] | pids["api_calls"]) - {-1}),
        {d: frozenset(u) for d, u in users.items()},
        frozenset(kept_pids - {-1}),
    )


def _add_users(users: dict[int, set[int]], dev: np.ndarray, pid: np.ndarray) -> None:
    """The (device, process) pairs of GPU ops with a process, a few a chunk (no Python object a row)."""
    ok = pid >= 0
    pairs = np.unique(((dev[ok] + 1) << 32) | pid[ok])  # devices from -1 (none), pids below 2**32
    for d, p in zip(((pairs >> 32) - 1).tolist(), (pairs & 0xFFFFFFFF).tolist()):
        users.setdefault(d, set()).add(p)


def first_event_ns(source: str | os.PathLike[str] | ReportTables) -> int:
    """The report's earliest start (what ``--start``/``--end`` count from); 0 for an empty report."""
    src = open_source(source)
    return plan(src, None, None, None).first_ns or 0


def open_source(source: str | os.PathLike[str] | ReportTables) -> ReportTables:
    if not isinstance(source, (str, os.PathLike)):
        return _Loaded(source)
    path = Path(os.fspath(source))
    if not path.is_dir():  # a report: nvbridge.conversion.trace converts it and hands its tables here
        raise ExportError(f"{path} is not a dataset directory; convert it first (nvbridge.export_chrome_trace does).")
    return _Dataset(path)
