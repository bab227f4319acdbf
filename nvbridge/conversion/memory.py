"""A report converted in memory: ``nvbridge.load(report.sqlite)``, through the one pipeline into
tables held in memory (:class:`~nvbridge.conversion.sinks.MemorySink`) instead of files."""

from __future__ import annotations

import functools
import os

from nvbridge._version import __version__
from nvbridge.conversion import pipeline
from nvbridge.conversion.result import with_rank
from nvbridge.conversion.sinks import MemorySink
from nvbridge.dataset.schema import TABLES, InMemory
from nvbridge.export import parquet
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
