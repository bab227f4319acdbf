"""A report converted in memory: ``nvbridge.load(report.sqlite)``, through the one pipeline into
tables held in memory (:class:`~nvbridge.conversion.sinks.MemorySink`) instead of files.

Where a path may be a dataset or a report, the choice is made here, above the dataset and the
trace writer, which read datasets and tables only: :func:`load_tables` (``nvbridge.load``, the
commands) and :func:`export_chrome_traces` (``nvbridge.export_chrome_trace``)."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from nvbridge._version import __version__
from nvbridge.conversion import pipeline
from nvbridge.conversion.result import with_rank
from nvbridge.conversion.sinks import MemorySink
from nvbridge.dataset import report as dataset
from nvbridge.dataset.schema import TABLES, InMemory, ReportTables
from nvbridge.export import parquet
from nvbridge.export import trace as traces
from nvbridge.export.chrome import TraceStats
from nvbridge.readers import open_windows


def convert_in_memory(source: str | os.PathLike[str]) -> InMemory:
    """The tables a conversion of ``source`` would write, and its meta, in memory.

    Args:
        source: an nvprof or Nsight Systems SQLite file, or an SQLAlchemy URL.

    Raises:
        InputError: the source cannot be read as a profile.
    """
    sink = MemorySink()
    opener = functools.partial(open_windows, source, pipeline.WINDOW_ROWS)
    # The rank a file name spells counts here as when converting.
    pipeline.convert(pipeline.Run(opener, functools.partial(with_rank, source=source)), [sink], _quiet)
    assert sink.info is not None
    meta_t = parquet.meta_table(sink.info, {name: sink.tables[name].num_rows for name in TABLES}, __version__)
    meta = dict(zip(meta_t.column("key").to_pylist(), meta_t.column("value").to_pylist()))
    return InMemory(meta, sink.tables)


def _quiet(_stage: str, _rows: int) -> None:
    """No progress to show."""


def load_tables(
    path: str | os.PathLike[str],
    columns: Mapping[str, Sequence[str]] | None = None,
    in_order: bool = True,
    *,
    streamed: bool = False,
) -> dataset.DatasetTables:
    """A dataset directory's tables (:func:`nvbridge.dataset.report.load`, which takes the
    arguments), or a profiler database or SQLAlchemy URL converted in memory.

    Raises:
        InputError: a report that cannot be read.
        ExportError, DamagedDataset: as :func:`nvbridge.dataset.report.load`.
    """
    if Path(os.fspath(path)).is_dir():
        return dataset.load(path, columns, in_order, streamed=streamed)
    converted = convert_in_memory(path)
    return dataset.DatasetTables(dict(converted.meta), converted.tables)


def export_chrome_traces(
    source: str | os.PathLike[str] | ReportTables,
    dest: str | os.PathLike[str],
    *,
    split: str = "auto",
    start_ns: int | None = None,
    end_ns: int | None = None,
    steps: tuple[int, int] | None = None,
    processes: set[int] | None = None,
    force: bool = True,
) -> traces.Traces:
    """:func:`nvbridge.export.trace.export_chrome_traces` (the arguments), from a profiler
    database or SQLAlchemy URL too: converted in memory once the arguments are checked."""
    if isinstance(source, (str, os.PathLike)) and not Path(os.fspath(source)).is_dir():
        traces.check_arguments(Path(dest), split, force, start_ns, end_ns, steps)
        source = load_tables(source)
    return traces.export_chrome_traces(
        source, dest, split=split, start_ns=start_ns, end_ns=end_ns, steps=steps, processes=processes, force=force
    )


def export_chrome_trace(
    source: str | os.PathLike[str] | ReportTables,
    dest: str | os.PathLike[str],
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    steps: tuple[int, int] | None = None,
    processes: set[int] | None = None,
    force: bool = True,
) -> TraceStats:
    """Write a report, a converted dataset or a report's tables as one Chrome/Perfetto trace (all
    its ranks in one file: see :func:`nvbridge.export.trace.export_chrome_traces` for the
    arguments and for one trace per rank)."""
    return export_chrome_traces(
        source, dest, split="none", start_ns=start_ns, end_ns=end_ns, steps=steps, processes=processes, force=force
    ).files[0]
