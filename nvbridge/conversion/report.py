"""One report -> one Parquet dataset directory, all or nothing.

The dataset is built in a staging directory beside its destination and moved into place only
once complete (:mod:`nvbridge.output`), so a failure never leaves a partial dataset behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa

from nvbridge import output as outputs
from nvbridge._version import __version__
from nvbridge.columns import np_col
from nvbridge.conversion.result import ConversionResult, OpsTally, Tallies, gpu_figures, with_rank
from nvbridge.conversion.trace import TraceFeed, earliest, write_whole
from nvbridge.engine import Correlator, capture_end, correlate, devices_table, other_tables, stream, with_parsed_names
from nvbridge.errors import NotStreamable
from nvbridge.export import parquet
from nvbridge.export.trace import check_destination as check_trace_destination
from nvbridge.profile import SourceInfo
from nvbridge.readers import estimate_rows, exported, read_profile

# progress(stage, rows): ``stage`` names what starts now; ``rows`` is how many rows' worth of the
# whole job the finished stage stands for, so a display can show rows/s and time left.
Progress = Callable[[str, int], None]
# NVTX rowids per streamed window. Measured at 2M rows: 64K to 512K rows take the same time,
# and peak memory grows with the window (0.60 GB at 64K, 0.67 at 128K, 0.85 at 256K, 1.1 at 512K).
WINDOW_ROWS = 1 << 17
# NVTX windows the readers may fetch ahead while the engine is set up (21 MB each at 131,072 rows).
INIT_WINDOWS = 8
# Share of a report's time each stage takes (measured at 2M NVTX rows): read, correlate, write.
STAGE_SHARE = {"reading": 0.38, "correlating": 0.40, "writing": 0.22}


def convert_one(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    force: bool = False,
    progress: Progress | None = None,
    chrome_trace: str | os.PathLike[str] | None = None,
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

    Returns:
        What was read and written.

    Raises:
        InputError: the source cannot be read as a profile.
        ExportError: the output exists (without ``force``) or cannot be written.
    """
    out = Path(output)
    outputs.check_destination(out, force, [source])
    trace = None if chrome_trace is None else Path(chrome_trace)
    if trace is not None:
        check_trace_destination(trace, force)
    report = progress or (lambda _stage, _rows: None)
    expected = estimate_rows(source) if progress else 0
    t0 = time.perf_counter()
    # An .nsys-rep (or .qdrep, .qdstrm) is exported to SQLite with the user's nsys first.
    with outputs.staging(out) as tmp, exported(source) as database:
        with outputs.writing(out, "the dataset"):
            tallies = _convert_into(database, tmp, report, expected, trace)
        outputs.publish(tmp, out, force)
    report("done", max(expected - tallies.rows_read, 0))
    return tallies.result(out, time.perf_counter() - t0)


def _convert_into(
    source: str | os.PathLike[str], tmp: Path, report: Progress, expected: int, trace: Path | None
) -> Tallies:
    """Stream the report into ``tmp`` (and ``trace``): NVTX rows by rowid windows, or, when its
    ranges turn out to be out of start order, by slabs of starts; nvprof files and other URLs
    are read whole."""
    for by_start in (False, True):
        try:
            return _streamed(source, tmp, report, trace, by_start)
        except NotStreamable:
            for part in tmp.iterdir():
                part.unlink()
    return _whole(source, tmp, report, expected, trace)


def _streamed(
    source: str | os.PathLike[str], tmp: Path, report: Progress, trace: Path | None, by_start: bool
) -> Tallies:
    """Convert an Nsight Systems file window by window into ``tmp`` (and ``trace``).

    Raises:
        NotStreamable: not a local Nsight Systems file, or (rowid windows) its ranges are out
            of start order.
    """
    from nvbridge.readers import detect
    from nvbridge.readers._db import Database
    from nvbridge.readers.nsys import Stream

    with Database(source) as db:
        if db.path is None or detect(db) != "nsys":
            raise NotStreamable("only local Nsight Systems files stream")
        report("reading", 0)
        with db.translate_errors():
            # Names are parsed on the reader threads, a window or two ahead of the engine.
            stream_in = Stream(db, WINDOW_ROWS, prepare=with_parsed_names, by_start=by_start)
            info = with_rank(stream_in.info, source)
            # The engine's set-up sorts every API call and GPU op (0.15 s at 2M NVTX rows, 0.8-1.1 s
            # at 10M): it runs beside the readers, which fetch windows meanwhile instead of waiting.
            with ThreadPoolExecutor(max_workers=1) as pool:
                building = pool.submit(
                    Correlator,
                    info,
                    stream_in.api_calls,
                    stream_in.gpu_ops,
                    capture_end(info, stream_in.latest_ns),
                    stream_in.syncs,
                )
                stream_in.read_while(building, INIT_WINDOWS)
                engine = building.result()
            _trim_heap()
            reported = stream_in.rows_read
            report("correlating", reported)
            out = _Outputs(tmp, engine, trace, info, stream_in.devices)
            first: list[int] = []  # the earliest range start, once the first window is read
            try:
                for chunk in stream(engine, earliest(stream_in.windows(), first)):
                    out.window(chunk, first)
                    report("correlating", stream_in.rows_read - reported)
                    reported = stream_in.rows_read
                report("writing", 0)
                _trim_heap()  # the windows' buffers: the last writes need less, and fresh
                tables = other_tables(engine, stream_in.marks(), stream_in.threads(), stream_in.devices)
                out.finish(first, tables)
            except BaseException:
                out.abort()
                raise
            finally:
                out.close()
        gpu = gpu_figures(engine.gpu.column("kind"), *engine.gpu_columns())
        parquet.write_meta(tmp, info, out.rows(tables), __version__)
        return Tallies(info, out.ops, engine.api_op, gpu, stream_in.rows_read)


class _Outputs:
    """Where a streamed conversion's rows go: the ops, API call and GPU op files, written as
    their rows become final, and the trace (``convert --chrome``) fed the same tables."""

    def __init__(self, tmp: Path, engine: Correlator, trace: Path | None, info: SourceInfo, devices: pa.Table) -> None:
        self.tmp = tmp
        self.engine = engine
        self.ops = OpsTally()
        self.writer = parquet.TableWriter(tmp / "ops.parquet")
        self.trace = trace
        self.feed: TraceFeed | None = None
        self._info, self._devices = info, devices_table(engine, devices)
        # API calls and GPU ops are written as their rows become final, a row group at a
        # time built on the writers' threads (the main thread when a trace needs them too).
        self.api = _Finished(tmp / "api_calls.parquet", engine.api_calls, trace is not None)
        self.gpu = _Finished(tmp / "gpu_ops.parquet", engine.gpu_ops, trace is not None)

    def _trace(self, first: list[int]) -> TraceFeed | None:
        if self.trace is not None and self.feed is None:
            starts = [int(np_col(t, "start_ns").min()) for t in (self.engine.api, self.engine.gpu) if t.num_rows]
            self.feed = TraceFeed(self.trace, self._info, self._devices, min(starts + first, default=None))
        return self.feed

    def window(self, chunk: pa.Table, first: list[int]) -> None:
        self.writer.write(chunk)
        self.ops.add(chunk)
        feed = self._trace(first)
        if feed is not None:
            feed.ops(chunk)
        self._final(feed, last=False)

    def _final(self, feed: TraceFeed | None, last: bool) -> None:
        api_ready, gpu_ready = self.engine.final_rows()
        api, gpu = self.api.write(api_ready, last), self.gpu.write(gpu_ready, last)
        if feed is not None:
            for table in api:
                feed.api_calls(table)
            for table in gpu:
                feed.gpu_ops(table)

    def finish(self, first: list[int], tables: dict[str, pa.Table]) -> None:
        feed = self._trace(first)
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
        for out in (self.writer, self.api.writer, self.gpu.writer):
            out.close()


class _Finished:
    """api_calls or gpu_ops, written in row groups of ROW_GROUP_ROWS rows as they become final.

    Each row group is built on the writer's thread, or here when ``keep`` (the trace needs the
    tables too): :meth:`write` returns the tables it built.
    """

    def __init__(self, path: Path, build: Callable[[int, int], pa.Table], keep: bool = False) -> None:
        self.writer = parquet.TableWriter(path)
        self._build = build
        self._keep = keep
        self._done = 0
        self._queued = False

    def write(self, ready: int, last: bool = False) -> list[pa.Table]:
        """Queue the full row groups among the first ``ready`` rows; ``last``: all of them."""
        built: list[pa.Table] = []
        while ready - self._done >= parquet.ROW_GROUP_ROWS or (last and ready > self._done):
            stop = min(self._done + parquet.ROW_GROUP_ROWS, ready)
            self._queue(self._done, stop, built)
            self._done, self._queued = stop, True
        if last and not self._queued:  # no rows: the file still holds the table's schema
            self._queue(0, 0, built)
            self._queued = True
        return built

    def _queue(self, first: int, stop: int, built: list[pa.Table]) -> None:
        if self._keep:
            built.append(self._build(first, stop))
            self.writer.write(built[-1])
        else:
            self.writer.write(functools.partial(self._build, first, stop))


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


def _whole(source: str | os.PathLike[str], tmp: Path, report: Progress, expected: int, trace: Path | None) -> Tallies:
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
    if trace is not None:
        write_whole(model, trace)
    ops = OpsTally()
    ops.add(model.ops)
    g = model.gpu_ops
    gpu = gpu_figures(
        g.column("kind"),
        np_col(g, "start_ns"),
        np_col(g, "end_ns"),
        np_col(g, "op_id", fill=-1),
        np_col(g, "api_call_id", fill=-1),
    )
    return Tallies(info, ops, np_col(model.api_calls, "op_id", fill=-1), gpu, rows_read)
