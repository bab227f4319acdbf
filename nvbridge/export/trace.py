"""``export_chrome_trace``: a report, a loaded Report or a dataset directory -> one Chrome trace.

A dataset is streamed row group by row group through :class:`~nvbridge.export.chrome.TraceWriter`
(API calls, then GPU ops, then ops), never read whole: a first pass reads only the time and
process columns (and the ``ProfilerStep`` ranges for a step window) to find the window, the
trace's origin and whether anything is left to write, so a trace that would be empty is refused
before a file is created.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from nvbridge import output as outputs
from nvbridge.columns import np_col
from nvbridge.dataset_check import check_dataset, check_intervals
from nvbridge.dataset_files import ReadErrors, outside_window
from nvbridge.errors import ExportError
from nvbridge.export.chrome import BATCH_ROWS, SUFFIXES, Tables, TraceStats, TraceWriter
from nvbridge.export.chrome_text import API_COLUMNS, GPU_COLUMNS, OP_COLUMNS
from nvbridge.timeline import CaptureWindow, in_window, step_spans, step_window_of

EVENT_TABLES = ("api_calls", "gpu_ops", "ops")  # the order they are written in: calls before GPU ops
COLUMNS = {"ops": OP_COLUMNS, "api_calls": API_COLUMNS, "gpu_ops": GPU_COLUMNS}
NOTHING_TO_TRACE = (
    "the report has no ranges, API calls or GPU ops: nothing to trace; profile with NVTX or CUDA tracing "
    "(nsys profile -t cuda,nvtx)."
)
SPAN_COLUMNS = ["start_ns", "end_ns", "process_id"]


class Source(Protocol):
    """Chunks of a report's tables, whole or from a dataset's row groups."""

    @property
    def meta(self) -> Mapping[str, str | None]: ...
    @property
    def threads(self) -> pa.Table: ...
    @property
    def devices(self) -> pa.Table: ...

    def rows(self, name: str) -> int: ...

    def chunks(self, name: str, columns: list[str], window: tuple[int | None, int | None]) -> Iterator[pa.Table]: ...


class _Loaded:
    """A report already in memory, sliced into chunks."""

    def __init__(self, report: Tables) -> None:
        self.report = report
        self.meta, self.threads, self.devices = report.meta, report.threads, report.devices

    def rows(self, name: str) -> int:
        return int(getattr(self.report, name).num_rows)

    def chunks(self, name: str, columns: list[str], window: tuple[int | None, int | None]) -> Iterator[pa.Table]:
        table: pa.Table = getattr(self.report, name)
        for lo in range(0, table.num_rows, BATCH_ROWS):
            yield table.slice(lo, BATCH_ROWS)


class _Dataset:
    """A dataset directory, read a row group at a time with only the columns asked for."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        # The checks dataset.load makes, on the files this reader opens (rows: as each part is read).
        self.meta = check_dataset(directory, (*EVENT_TABLES, "threads", "devices"), COLUMNS)
        with self._reading("threads"):
            self.threads = pq.read_table(directory / "threads.parquet")
        with self._reading("devices"):
            self.devices = pq.read_table(directory / "devices.parquet")
        self.files: dict[str, pq.ParquetFile] = {}
        for name in EVENT_TABLES:
            with self._reading(name):
                self.files[name] = pq.ParquetFile(directory / f"{name}.parquet")

    def _reading(self, name: str) -> ReadErrors:
        return ReadErrors(self.directory, name)

    def rows(self, name: str) -> int:
        return int(self.files[name].metadata.num_rows)

    def chunks(self, name: str, columns: list[str], window: tuple[int | None, int | None]) -> Iterator[pa.Table]:
        pf = self.files[name]
        for i in range(pf.metadata.num_row_groups):
            if outside_window(pf.metadata.row_group(i), window):
                continue
            with self._reading(name):
                chunk = pf.read_row_group(i, columns=columns)
            if "end_ns" in columns:
                check_intervals(self.directory, name, chunk)
            yield chunk


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


def plan(source: Source, start_ns: int | None, end_ns: int | None, processes: set[int] | None) -> Plan:
    """First pass over the time and process columns only."""
    kept, origin = 0, None
    capture = CaptureWindow()  # the one timeline's capture window (nvbridge.timeline)
    pids: set[int] = set()
    for name in EVENT_TABLES:
        for chunk in source.chunks(name, SPAN_COLUMNS, (None, None)):
            if not chunk.num_rows:
                continue
            start = np_col(chunk, "start_ns")
            capture = capture.add(chunk)
            pids.update(np.unique(np_col(chunk, "process_id", fill=-1)).tolist())
            keep = in_window(chunk, start_ns, end_ns, processes)
            if keep.any():
                kept += int(keep.sum())
                low = int(start[keep].min())
                origin = low if origin is None else min(origin, low)
    return Plan(origin or 0, start_ns, end_ns, kept, capture.start_ns, capture.end_ns, frozenset(pids - {-1}))


def first_event_ns(source: str | os.PathLike[str] | Tables) -> int:
    """The report's earliest start (what ``--start``/``--end`` count from); 0 for an empty report."""
    src = _open(source)
    return plan(src, None, None, None).first_ns or 0


def _open(source: str | os.PathLike[str] | Tables) -> Source:
    if not isinstance(source, (str, os.PathLike)):
        return _Loaded(source)
    path = Path(os.fspath(source))
    if path.is_dir():
        return _Dataset(path)
    from nvbridge.dataset import load  # a database is converted in memory first

    return _Loaded(load(path))


def check_destination(path: Path, force: bool) -> None:
    """A trace file may be written at ``path``: right suffix, then the rule of every single-file
    output (:func:`nvbridge.output.check_file_destination`).

    Raises:
        ExportError: naming the problem and the fix.
    """
    if not path.name.endswith(SUFFIXES):
        raise ExportError(f"{path.name}: a Chrome trace is written as .json or .json.gz; rename the output.")
    outputs.check_file_destination(path, force, "the trace")


def export_chrome_trace(
    source: str | os.PathLike[str] | Tables,
    dest: str | os.PathLike[str],
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    steps: tuple[int, int] | None = None,
    processes: set[int] | None = None,
    force: bool = True,
) -> TraceStats:
    """Write a report (or converted dataset) as a Chrome/Perfetto trace.

    Args:
        source: a profiler database, SQLAlchemy URL, dataset directory (streamed, never read
            whole), or a loaded Report.
        dest: ``.json`` or ``.json.gz`` (compressed while streaming), in an existing folder.
        start_ns, end_ns: a time window, in the report's time base.
        steps: ``(first, last)`` ProfilerStep numbers: the window they span (not with start/end).
        processes: host process ids to keep.
        force: replace ``dest`` if it exists.

    Raises:
        InputError: the source cannot be read.
        ExportError: bad destination, an empty window, steps or processes the report does not
            have, or nothing to write; no file is left behind.
    """
    path = Path(dest)
    check_destination(path, force)
    if steps is not None and (start_ns is not None or end_ns is not None):
        raise ExportError("a step range and a start/end window both choose the window; pass one of them.")
    if start_ns is not None and end_ns is not None and end_ns <= start_ns:
        raise ExportError("the window is empty; pass an end later than the start.")
    src = _open(source)
    if steps is not None:
        start_ns, end_ns = _step_window(src, steps)
    found = plan(src, start_ns, end_ns, processes)
    _check_not_empty(found, start_ns, end_ns, processes)
    rank = src.meta.get("rank")
    try:
        with TraceWriter(
            path,
            origin_ns=found.origin_ns,
            meta=src.meta,
            devices=src.devices,
            rank=int(rank) if rank not in (None, "None") else 0,
            start_ns=start_ns,
            end_ns=end_ns,
            processes=processes,
        ) as writer:
            feed = {"ops": writer.ops, "api_calls": writer.api_calls, "gpu_ops": writer.gpu_ops}
            for name in EVENT_TABLES:
                for chunk in src.chunks(name, list(COLUMNS[name]), (start_ns, end_ns)):
                    feed[name](chunk)
            return writer.finish(src.threads, gpu_rows=src.rows("gpu_ops"))
    except OSError as exc:  # disk full, permissions: nothing is left behind
        raise ExportError(
            f"cannot write {path} ({exc.strerror or exc}); free some space or write it elsewhere."
        ) from exc


def _step_window(src: Source, steps: tuple[int, int]) -> tuple[int, int]:
    parts = [step_spans(chunk) for chunk in src.chunks("ops", ["op_name", "start_ns", "end_ns"], (None, None))]
    spans = tuple(np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, np.int64) for i in range(3))
    try:
        return step_window_of((spans[0], spans[1], spans[2]), *steps)
    except ValueError as exc:
        raise ExportError(str(exc)) from exc


def _check_not_empty(found: Plan, start_ns: int | None, end_ns: int | None, processes: set[int] | None) -> None:
    """An empty trace is refused with what the report does hold."""
    if found.kept_rows:
        return
    if found.first_ns is None or found.last_ns is None:
        raise ExportError(NOTHING_TO_TRACE)
    if processes is not None and not processes & found.processes:
        have = ", ".join(str(p) for p in sorted(found.processes)) or "none"
        raise ExportError(
            f"no host process {', '.join(str(p) for p in sorted(processes))} in the report "
            f"(it has {have}); pass one of those to --process."
        )
    span = found.last_ns - found.first_ns

    def ms(ns: int | None, default: str) -> str:
        return default if ns is None else f"{(ns - (found.first_ns or 0)) / 1e6:,.3f} ms"

    raise ExportError(
        f"nothing to trace from {ms(start_ns, 'the start')} to {ms(end_ns, 'the end')}: the "
        f"report's events span 0 to {span / 1e6:,.3f} ms; choose a window inside it."
    )
