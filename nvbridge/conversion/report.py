"""One report -> one Parquet dataset directory, all or nothing.

The dataset is built in a staging directory beside its destination and moved into place only
once complete (:mod:`nvbridge.output.publish`), so a failure never leaves a partial dataset behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from nvbridge._version import __version__
from nvbridge.columns import np_col
from nvbridge.conversion.result import ConversionResult, OpsTally, Tallies, gpu_figures, with_rank
from nvbridge.conversion.trace import TraceFeed, TraceRequest, earliest, write_whole
from nvbridge.engine import Correlator, capture_end, correlate, devices_table, other_tables, stream, with_parsed_names
from nvbridge.errors import BeyondHorizon, NotStreamable
from nvbridge.export import parquet
from nvbridge.export.trace_ranks import report_ranks
from nvbridge.output import publish as outputs
from nvbridge.readers import estimate_rows, exported, read_profile
from nvbridge.readers.activity import first_start
from nvbridge.readers.raw import SourceInfo

if TYPE_CHECKING:
    from nvbridge.readers.nsys import Stream

# progress(stage, rows): ``stage`` names what starts now; ``rows`` is how many rows' worth of the
# whole job the finished stage stands for, so a display can show rows/s and time left.
Progress = Callable[[str, int], None]
# NVTX rows per streamed window (and API call and GPU op rows per slab). Measured at 2M rows:
# 64K to 512K rows take the same time, and peak memory grows with the window.
WINDOW_ROWS = 1 << 16
# Windows between two returns of freed memory to the system (_trim_heap): without them the
# reader threads' freed buffers, fragmented, grew the peak at 50M NVTX rows from 0.79 to 1.05 GB
# (every 48 windows: 0.90 GB); each costs a few milliseconds. Every 8 rather than 16: 574-581 MB
# at 50M instead of 574-594 MB, no slower at 2M.
TRIM_EVERY = 8
# How many times longer the horizons are on a second try (readers.activity.LATE_NS for GPU ops,
# forward_links.FORWARD_HORIZON_ROWS for forward ops).
LATE_RETRY = 60
# Share of a report's time each stage takes (measured at 2M NVTX rows): read, correlate, write.
STAGE_SHARE = {"reading": 0.38, "correlating": 0.40, "writing": 0.22}


def convert_one(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    force: bool = False,
    progress: Progress | None = None,
    chrome_trace: str | os.PathLike[str] | None = None,
    chrome_split: str = "auto",
) -> ConversionResult:
    """Convert one profiler database into a Parquet dataset directory.

    An Nsight Systems file streams: its NVTX rows are read, correlated and written
    :data:`WINDOW_ROWS` rows at a time, so memory stays bounded whatever the report's size. A
    report whose ranges are out of start order, an nvprof file or another SQLAlchemy URL is
    read whole.

    Args:
        source: an nvprof or Nsight Systems SQLite file, an Nsight Systems report (``.nsys-rep``,
            ``.qdrep``, ``.qdstrm``: exported with ``nsys`` on PATH), or an SQLAlchemy URL.
        output: the dataset directory to create.
        force: replace ``output`` if it exists.
        progress: called with a short stage name as work advances.
        chrome_trace: also write the Chrome/Perfetto trace here (``.json`` or ``.json.gz``).
        chrome_split: ``auto`` (one trace per rank, ``NAME.rank<K>.json.gz``, for a report of
            several ranks; else one file), ``rank`` or ``none`` (one file):
            :func:`nvbridge.export.trace.export_chrome_traces`.

    Returns:
        What was read and written.

    Raises:
        InputError: the source cannot be read as a profile.
        ExportError: the output exists (without ``force``) or cannot be written.
    """
    out = Path(output)
    outputs.check_destination(out, force, [source])
    trace = None if chrome_trace is None else TraceRequest(Path(chrome_trace), chrome_split)
    if trace is not None:
        trace.check(force)
    report = progress or (lambda _stage, _rows: None)
    expected = estimate_rows(source) if progress else 0
    t0 = time.perf_counter()
    # The traces stay under their staging names until the dataset is in place: a run that fails
    # leaves neither (the dataset's publish can still fail on a full disk, or a race).
    try:
        # An .nsys-rep (or .qdrep, .qdstrm) is exported to SQLite with the user's nsys first.
        with outputs.staging(out) as tmp, exported(source) as database:
            with outputs.writing(out, "the dataset"):
                tallies = _convert_into(database, tmp, report, expected, trace, force)
            outputs.publish(tmp, out, force)
        if trace is not None:
            with outputs.writing(trace.path, "the trace"):
                trace.publish()
    finally:
        if trace is not None:
            trace.abort()
    report("done", max(expected - tallies.rows_read, 0))
    result = tallies.result(out, time.perf_counter() - t0)
    return result if trace is None else dataclasses.replace(result, traces=tuple(trace.written))


def _convert_into(
    source: str | os.PathLike[str], tmp: Path, report: Progress, expected: int, trace: TraceRequest | None, force: bool
) -> Tallies:
    """Stream the report into ``tmp`` (and ``trace``): NVTX rows by rowid windows, or, when its
    ranges turn out to be out of start order, by slabs of starts; when a GPU op starts later
    after its launch than the horizon allows, again with LATE_RETRY times the horizon. nvprof
    files, other URLs and reports that still do not stream are read whole."""
    by_start, horizons = False, 1
    for _attempt in range(3):
        try:
            return _streamed(source, tmp, report, (trace, force), by_start, horizons)
        except BeyondHorizon:
            if horizons > 1:
                break
            horizons = LATE_RETRY
        except NotStreamable:
            if by_start:
                break
            by_start = True
        for part in tmp.iterdir():
            part.unlink()
    for part in tmp.iterdir():
        part.unlink()
    return _whole(source, tmp, report, expected, (trace, force))


def _streamed(
    source: str | os.PathLike[str],
    tmp: Path,
    report: Progress,
    trace: tuple[TraceRequest | None, bool],
    by_start: bool,
    horizons: int,
) -> Tallies:
    """Convert an Nsight Systems file window by window into ``tmp`` (and ``trace``).

    Raises:
        NotStreamable: not a local Nsight Systems file, or (rowid windows) its ranges are out
            of start order.
    """
    from nvbridge.readers import detect
    from nvbridge.readers._db import Database
    from nvbridge.readers.nsys import Stream
    from nvbridge.readers.nsys_tables import require_columns

    with Database(source) as db:
        if db.path is None or detect(db) != "nsys":
            raise NotStreamable("only local Nsight Systems files stream")
        report("reading", 0)
        with db.translate_errors():
            require_columns(db)
            # Names are parsed on the reader threads, a window or two ahead of the engine.
            stream_in = Stream(db, WINDOW_ROWS, prepare=with_parsed_names, by_start=by_start, horizons=horizons)
            info = with_rank(stream_in.info, source)
            engine = Correlator(info, capture_end(info, stream_in.latest_ns), stream_in.syncs, horizons)
            reported = 0
            out = _Outputs(tmp, engine, trace, info, stream_in)
            first: list[int] = []  # the earliest range start, once the first window is read
            try:
                windows = stream(engine, earliest(stream_in.windows(), first), stream_in.activity)
                for count, chunk in enumerate(windows, 1):
                    out.window(chunk, first)
                    report("correlating", stream_in.rows_read - reported)
                    reported = stream_in.rows_read
                    if count % TRIM_EVERY == 0:
                        _trim_heap()
                report("writing", 0)
                _trim_heap()  # the windows' buffers: the last writes need less, and fresh
                threads = stream_in.threads(np.concatenate(engine.tally.thread_keys or [np.zeros(0, np.int64)]))
                tables = other_tables(engine, stream_in.marks(), threads, stream_in.devices)
                out.finish(first, tables)
            except BaseException:
                out.abort()
                raise
            finally:
                out.close()
        parquet.write_meta(tmp, info, out.rows(tables), __version__)
        t = engine.tally
        return Tallies(info, out.ops, t.api_calls, t.api_outside, t.figures(), stream_in.rows_read)


class _Outputs:
    """Where a streamed conversion's rows go: the ops, API call and GPU op files, written as
    their rows become final, and the trace (``convert --chrome``) fed the same tables."""

    def __init__(
        self,
        tmp: Path,
        engine: Correlator,
        trace: tuple[TraceRequest | None, bool],
        info: SourceInfo,
        stream_in: Stream,
    ) -> None:
        self.tmp = tmp
        self.engine = engine
        self.ops = OpsTally()
        # Windows' ops regrouped into row groups of ROW_GROUP_ROWS: a row group per window cost
        # 2-7 ms of encoder set-up each (a compressor and a dictionary per column chunk).
        self.ops_out = _Grouped(tmp / "ops.parquet")
        self.trace = trace
        self.feed: TraceFeed | None = None
        self._info, self._stream = info, stream_in
        self.api = _Grouped(tmp / "api_calls.parquet", engine.no_api_calls)
        self.gpu = _Grouped(tmp / "gpu_ops.parquet", engine.no_gpu_ops)

    def _trace(self, first: list[int]) -> TraceFeed | None:
        request, force = self.trace
        if request is not None and self.feed is None:
            s = self._stream
            starts = [t for t in (first_start([s.api, s.gpu]), *first) if t is not None]
            devices = devices_table(s.gpu_devices(), s.devices)
            ranks = report_ranks(*s.processes(), self._info.rank)
            self.feed = TraceFeed(request, self._info, devices, min(starts, default=None), ranks, force)
        return self.feed

    def window(self, chunk: pa.Table, first: list[int]) -> None:
        self.ops_out.write([chunk])
        self.ops.add(chunk)
        feed = self._trace(first)
        if feed is not None:
            feed.ops(chunk)
        self._final(feed, last=False)

    def _final(self, feed: TraceFeed | None, last: bool) -> None:
        api_ready, gpu_ready = self.engine.finished()
        api = self.api.write([api_ready] if api_ready is not None else [], last)
        gpu = self.gpu.write(gpu_ready, last)
        if feed is not None:
            for table in api:
                feed.api_calls(table)
            for table in gpu:
                feed.gpu_ops(table)

    def finish(self, first: list[int], tables: dict[str, pa.Table]) -> None:
        feed = self._trace(first)
        self.ops_out.write([], last=True)
        self._final(feed, last=True)
        for name, table in tables.items():
            parquet.write_table(table, self.tmp / f"{name}.parquet")
        if feed is not None:
            feed.finish(tables["threads"])

    def rows(self, tables: dict[str, pa.Table]) -> dict[str, int]:
        return {
            "ops": self.ops.rows,
            "api_calls": self.api.writer.rows,
            "gpu_ops": self.gpu.writer.rows,
            **{name: t.num_rows for name, t in tables.items()},
        }

    def abort(self) -> None:
        if self.feed is not None:
            self.feed.abort()

    def close(self) -> None:
        """Close every writer even when one fails (see TableWriter.close); the first failure is raised."""
        first: BaseException | None = None
        for out in (self.ops_out.writer, self.api.writer, self.gpu.writer):
            try:
                out.close()
            except BaseException as exc:  # raised below, once all are closed
                first = first or exc
        if first is not None:
            raise first


class _Grouped:
    """ops, api_calls or gpu_ops, written in row groups of ROW_GROUP_ROWS rows as they become
    final (``empty``: the table without rows, written when none came, for its columns; without
    it, the first table's columns, or none)."""

    def __init__(self, path: Path, empty: Callable[[], pa.Table] | None = None) -> None:
        self.writer = parquet.TableWriter(path)
        self._empty = empty
        self._schema: pa.Schema | None = None
        self._held: list[pa.Table] = []
        self._rows = 0
        self._written = False

    def write(self, tables: list[pa.Table], last: bool = False) -> list[pa.Table]:
        """Hold ``tables``; write the full row groups among the rows held (``last``: all of
        them). Returns the row groups written."""
        if self._schema is None and tables:
            self._schema = tables[0].schema
        # A column may change type between windows (a domain named only in later ones): the
        # first table's types hold for the file, as TableWriter casts.
        self._held += [t if t.schema == self._schema else t.cast(self._schema) for t in tables if t.num_rows]
        self._rows += sum(t.num_rows for t in tables)
        size = parquet.ROW_GROUP_ROWS
        if self._rows < size and not (last and self._rows):
            if last and not self._written:
                # The file still holds the table's schema.
                self.writer.write(self._empty() if self._empty else pa.schema(self._schema or []).empty_table())
                self._written = True
            return []
        held = pa.concat_tables(self._held) if len(self._held) > 1 else self._held[0]
        stop = self._rows if last else self._rows - self._rows % size
        groups = [held.slice(i, min(size, stop - i)) for i in range(0, stop, size)]
        for group in groups:
            self.writer.write(group)
        self._held = [held.slice(stop)] if stop < self._rows else []
        self._rows -= stop
        self._written = True
        return groups


def _trim_heap() -> None:
    """Give freed buffers back to the OS between stages (whole-report reads, then windows).

    glibc keeps freed memory in its heap behind live allocations: after the whole-report
    reads at 10M NVTX rows, 0.7-1 GB of a 2 GB peak. The next stage needs less, and reuses
    what is left.
    """
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _whole(
    source: str | os.PathLike[str], tmp: Path, report: Progress, expected: int, trace: tuple[TraceRequest | None, bool]
) -> Tallies:
    """Read, correlate and write a report in one window."""
    report("reading", 0)
    profile = read_profile(source)
    rows_read = profile.rows_read
    expected = expected or rows_read
    info = with_rank(profile.info, source)
    profile = dataclasses.replace(profile, info=info)
    report("correlating", round(expected * STAGE_SHARE["reading"]))
    model = correlate(profile)
    del profile  # the raw tables: gone before the output is encoded
    pa.default_memory_pool().release_unused()
    report("writing", round(expected * STAGE_SHARE["correlating"]))
    parquet.write(model, tmp, __version__)
    if trace[0] is not None:
        write_whole(model, trace[0], trace[1])
    ops = OpsTally()
    ops.add(model.ops)
    g, api_op = model.gpu_ops, model.api_calls.column("op_id")
    gpu = gpu_figures(
        g.column("kind"),
        np_col(g, "start_ns"),
        np_col(g, "end_ns"),
        np_col(g, "op_id", fill=-1),
        np_col(g, "api_call_id", fill=-1),
    )
    return Tallies(info, ops, model.api_calls.num_rows, api_op.null_count, gpu, rows_read)
