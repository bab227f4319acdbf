"""``convert --chrome``: the trace written in the same pass as the dataset, from the same chunks.

The streamed conversion hands each window's ops rows and each row group of final API calls and
GPU ops to the Parquet writers; :class:`TraceFeed` hands the same tables to a
:class:`~nvbridge.export.chrome.TraceWriter`, so the dataset is never read back to make the trace.
A report read whole goes through :func:`~nvbridge.export.trace.export_chrome_trace` from memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from nvbridge import output as outputs
from nvbridge._version import __version__
from nvbridge.engine import Model
from nvbridge.errors import ExportError
from nvbridge.export import parquet
from nvbridge.export.chrome import TraceWriter
from nvbridge.export.trace import NOTHING_TO_TRACE, export_chrome_trace
from nvbridge.profile import SourceInfo


class TraceOut(NamedTuple):
    """``convert --chrome``'s trace: written under ``tmp`` (a staging name beside ``path``), put at
    ``path`` once the dataset is in place; messages name ``path``."""

    path: Path
    tmp: Path


def header_meta(info: SourceInfo) -> dict[str, str | None]:
    """The dataset's meta as the trace header reads it (row counts are not part of it)."""
    table = parquet.meta_table(info, dict.fromkeys(parquet.TABLES, 0), __version__)
    return dict(zip(table.column("key").to_pylist(), table.column("value").to_pylist()))


class TraceFeed:
    """A trace fed the conversion's chunks as they are written.

    Args:
        dest: the trace file (checked by the caller), written under its staging name; a write the
            machine refuses (a full disk) is one line naming it.
        info: what the reader detected (header, rank).
        devices: the devices table (header).
        earliest_ns: the earliest start among API calls, GPU ops and the first window of
            ranges (ranges come in start order): the trace's time 0.
    """

    def __init__(self, dest: TraceOut, info: SourceInfo, devices: pa.Table, earliest_ns: int | None) -> None:
        self.dest = dest
        self.rows = 0
        with outputs.writing(dest.path, "the trace"):
            self._writer = (
                None
                if earliest_ns is None
                else TraceWriter(
                    dest.tmp, origin_ns=earliest_ns, meta=header_meta(info), devices=devices, rank=info.rank or 0
                )
            )

    def ops(self, table: pa.Table) -> None:
        self._feed(table, "ops")

    def api_calls(self, table: pa.Table) -> None:
        self._feed(table, "api_calls")

    def gpu_ops(self, table: pa.Table) -> None:
        self._feed(table, "gpu_ops")

    def _feed(self, table: pa.Table, name: str) -> None:
        if self._writer is not None:
            with outputs.writing(self.dest.path, "the trace"):
                getattr(self._writer, name)(table)
            self.rows += table.num_rows

    def finish(self, threads: pa.Table) -> None:
        """Publish the trace; an empty report is refused, as ``nvbridge trace`` refuses it."""
        if self._writer is None or not self.rows:
            self.abort()
            raise ExportError(NOTHING_TO_TRACE)
        with outputs.writing(self.dest.path, "the trace"):
            self._writer.finish(threads)

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.abort()


def earliest(windows: Iterator[pa.Table], found: list[int]) -> Iterator[pa.Table]:
    """``windows`` passed on, the earliest range start (in the first non-empty one) appended to
    ``found`` once it has been read."""
    for part in windows:
        if not found and part.num_rows:
            found.append(int(np.min(part.column("start_ns").to_numpy())))
        yield part


@dataclass(frozen=True)
class _InMemory:
    """A correlated model seen as the tables a trace is written from."""

    meta: Mapping[str, str | None]
    ops: pa.Table
    api_calls: pa.Table
    gpu_ops: pa.Table
    threads: pa.Table
    devices: pa.Table


def write_whole(model: Model, dest: TraceOut) -> None:
    """The trace of a report read whole, from memory (under its staging name)."""
    tables = _InMemory(header_meta(model.info), model.ops, model.api_calls, model.gpu_ops, model.threads, model.devices)
    try:
        export_chrome_trace(tables, dest.tmp, force=True)
    except ExportError as exc:  # its message names the file it wrote: the staging name
        raise ExportError(str(exc).replace(str(dest.tmp), str(dest.path))) from exc
