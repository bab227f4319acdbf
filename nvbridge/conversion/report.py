"""One report -> one Parquet dataset directory, all or nothing.

The dataset is built in a staging directory beside its destination and moved into place only
once complete (:mod:`nvbridge.output.publish`), so a failure never leaves a partial dataset behind.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from pathlib import Path

from nvbridge.conversion import pipeline
from nvbridge.conversion.collectives import write_inside
from nvbridge.conversion.pipeline import Progress, Sink
from nvbridge.conversion.result import ConversionResult, Tallies, with_rank
from nvbridge.conversion.sinks import ParquetSink
from nvbridge.conversion.trace import TraceRequest, TraceSink
from nvbridge.output import publish as outputs
from nvbridge.readers import estimate_rows, exported, open_windows

__all__ = ["Progress", "convert_one"]


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
    :data:`~nvbridge.conversion.pipeline.WINDOW_ROWS` rows at a time, so memory stays bounded
    whatever the report's size (:mod:`nvbridge.conversion.pipeline`). An nvprof file or another
    SQLAlchemy URL is read whole, as one window.

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
                tallies = _convert_into(database, tmp, report, trace, force)
                write_inside(tmp)  # a report of several ranks: its collectives matched
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
    database: str | os.PathLike[str],
    tmp: Path,
    report: Progress,
    trace: TraceRequest | None,
    force: bool,
) -> Tallies:
    """Convert the report into ``tmp`` (and ``trace``) through the one pipeline; the rank a file
    name spells counts where the capture recorded none."""
    sinks: list[Sink] = [ParquetSink(tmp)]
    if trace is not None:
        sinks.append(TraceSink(trace, force))
    opener = functools.partial(open_windows, database, pipeline.WINDOW_ROWS)
    return pipeline.convert(pipeline.Run(opener, functools.partial(with_rank, source=database)), sinks, report)
