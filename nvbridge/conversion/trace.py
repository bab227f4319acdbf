"""``convert --chrome``: the traces written in the same pass as the dataset, from the same chunks.

The streamed conversion hands each window's ops rows and each row group of final API calls and
GPU ops to the Parquet writers; :class:`TraceFeed` hands the same tables to a
:class:`~nvbridge.export.chrome.TraceWriter` (one per rank for a multi-rank report, each keeping
its process's rows), so the dataset is never read back to make the traces. A report read whole
goes through :func:`~nvbridge.export.trace.export_chrome_traces` from memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from nvbridge._version import __version__
from nvbridge.engine import Model
from nvbridge.errors import ExportError
from nvbridge.export import parquet
from nvbridge.export.chrome import TraceWriter
from nvbridge.export.trace import NOTHING_TO_TRACE, check_destination, check_suffix, export_chrome_traces
from nvbridge.export.trace_ranks import SPLITS, Ranks, rank_path
from nvbridge.output import publish as outputs
from nvbridge.readers.raw import SourceInfo


class TraceOut(NamedTuple):
    """``convert --chrome``'s trace: written under ``tmp`` (a staging name beside ``path``), put at
    ``path`` once the dataset is in place; messages name ``path``."""

    path: Path
    tmp: Path


def header_meta(info: SourceInfo) -> dict[str, str | None]:
    """The dataset's meta as the trace header reads it (row counts are not part of it)."""
    table = parquet.meta_table(info, dict.fromkeys(parquet.TABLES, 0), __version__)
    return dict(zip(table.column("key").to_pylist(), table.column("value").to_pylist()))


@dataclass(frozen=True)
class TraceRequest:
    """``convert --chrome PATH --chrome-split SPLIT``: where, and one file or one per rank
    (:func:`nvbridge.export.trace.export_chrome_traces`)."""

    path: Path
    split: str = "auto"
    written: list[Path] = field(default_factory=list)  # the files published
    # Files written and closed under their staging names, put in place once the dataset is
    # (:meth:`publish`): a dataset that fails to publish takes its traces with it.
    staged: list[TraceWriter] = field(default_factory=list)

    def check(self, force: bool) -> None:
        """What can be checked before converting: the name, and the one file's destination (the
        files per rank are named once the ranks are known)."""
        if self.split not in SPLITS:
            raise ExportError(f"--chrome-split {self.split}: pass one of {', '.join(SPLITS)}.")
        check_suffix(self.path)
        # Split by rank or not, the folder and the name are checked now; the files per rank (and
        # whether they exist already), once the ranks are known (TraceFeed).
        check_destination(self.path, force or self.split != "none")

    def publish(self) -> None:
        """Put the staged files in place (after the dataset)."""
        while self.staged:
            writer = self.staged.pop(0)
            writer.publish()
            self.written.append(writer.path)

    def abort(self) -> None:
        """Remove the files not published (the conversion failed)."""
        while self.staged:
            self.staged.pop().abort()


class TraceFeed:
    """The trace (one file, or one per rank) fed the conversion's chunks as they are written.

    Args:
        request: the trace file and split (checked by the caller).
        info: what the reader detected (header).
        devices: the devices table (header).
        earliest_ns: the earliest start among API calls, GPU ops and the first window of
            ranges (ranges come in start order): the trace's time 0.
        ranks: the report's ranks (known before the rows are read: ``Stream.processes``).
        force: replace the files per rank if they exist.
    """

    def __init__(
        self,
        request: TraceRequest,
        info: SourceInfo,
        devices: pa.Table,
        earliest_ns: int | None,
        ranks: Ranks,
        force: bool,
    ) -> None:
        self.rows = 0
        self.request = request
        held = ranks.held(ranks.of)
        per_rank = request.split == "rank" or (request.split == "auto" and len(held) > 1)
        if per_rank and not held:
            raise ExportError("the report holds no rank (no process ran GPU work); pass --chrome-split none.")
        targets = (
            [(rank_path(request.path, ranks.of[p]), {p}, ranks.info([p])) for p in held]
            if per_rank
            else [(request.path, None, ranks.info(held))]
        )
        for path, _, _ in targets:
            check_destination(path, force)
        meta = header_meta(info)
        self._writers: list[TraceWriter] = []
        try:
            for path, procs, distributed in targets if earliest_ns is not None else []:
                self._writers.append(
                    TraceWriter(
                        path,
                        origin_ns=earliest_ns or 0,
                        meta=meta,
                        devices=devices,
                        distributed=distributed,
                        processes=procs,
                    )
                )
        except BaseException:
            self.abort()
            raise

    def ops(self, table: pa.Table) -> None:
        self._feed(table, "ops")

    def api_calls(self, table: pa.Table) -> None:
        self._feed(table, "api_calls")

    def gpu_ops(self, table: pa.Table) -> None:
        self._feed(table, "gpu_ops")

    def _feed(self, table: pa.Table, name: str) -> None:
        for writer in self._writers:
            getattr(writer, name)(table)
        if self._writers:
            self.rows += table.num_rows

    def finish(self, threads: pa.Table) -> None:
        """Publish the traces (all, or none); an empty report is refused, as ``nvbridge trace``
        refuses it."""
        if not self._writers or not self.rows:
            self.abort()
            raise ExportError(NOTHING_TO_TRACE)
        try:
            with outputs.writing(self.request.path, "the trace"):
                for writer in self._writers:
                    writer.close(threads)
        except BaseException:
            self.abort()
            raise
        self.request.staged.extend(self._writers)  # published with the dataset
        self._writers = []

    def abort(self) -> None:
        for writer in self._writers:
            writer.abort()


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


def write_whole(model: Model, request: TraceRequest, force: bool) -> None:
    """The traces of a report read whole, from memory."""
    tables = _InMemory(header_meta(model.info), model.ops, model.api_calls, model.gpu_ops, model.threads, model.devices)
    export_chrome_traces(tables, request.path, split=request.split, force=force, staged=request.staged)
