"""``convert --chrome``: the traces written in the same pass as the dataset, from the same rows.

The pipeline hands each window's finished ops, API calls and GPU ops to every sink;
:class:`TraceSink` hands them to a :class:`~nvbridge.export.chrome.TraceWriter` (one per rank for a
multi-rank report, each keeping its process's rows), so the dataset is never read back to make
the traces. A report read as one window goes through
:func:`~nvbridge.export.trace.export_chrome_traces` from memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from nvbridge._version import __version__
from nvbridge.dataset.schema import TABLES, InMemory
from nvbridge.engine import WindowRows, devices_table
from nvbridge.errors import ExportError
from nvbridge.export import parquet
from nvbridge.export.chrome import TraceWriter
from nvbridge.export.trace import NOTHING_TO_TRACE, check_destination, check_suffix, export_chrome_traces
from nvbridge.export.trace_ranks import SPLITS, Ranks, rank_path, report_ranks
from nvbridge.output import publish as outputs
from nvbridge.readers.raw import SourceInfo, WindowSource


class TraceOut(NamedTuple):
    """``convert --chrome``'s trace: written under ``tmp`` (a staging name beside ``path``), put at
    ``path`` once the dataset is in place; messages name ``path``."""

    path: Path
    tmp: Path


def header_meta(info: SourceInfo) -> dict[str, str | None]:
    """The dataset's meta as the trace header reads it (row counts are not part of it)."""
    table = parquet.meta_table(info, dict.fromkeys(TABLES, 0), __version__)
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

    def memory(self, table: pa.Table | None) -> None:
        """The window's allocator events (counters: no row of their own makes a trace non-empty)."""
        for writer in self._writers if table is not None and table.num_rows else []:
            writer.memory(table)

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


class TraceSink:
    """``convert --chrome``: the traces as a sink of the pipeline (nvbridge.conversion.pipeline).

    A streamed report's traces are written as its windows finish rows (:class:`TraceFeed`), set
    up at the first window from what the reader knows before the rows
    (:class:`~nvbridge.readers.raw.TraceFacts`); a report read as one window holds its rows, and
    its traces are written from them at the end, as ``nvbridge trace`` writes a loaded report's.
    """

    def __init__(self, request: TraceRequest, force: bool) -> None:
        self.request, self.force = request, force
        self._source: WindowSource | None = None
        self._info: SourceInfo | None = None
        self._feed: TraceFeed | None = None
        self._held: dict[str, list[pa.Table]] | None = None

    def start(self, source: WindowSource, info: SourceInfo) -> None:
        self._source, self._info, self._feed, self._held = source, info, None, None

    def _open(self) -> None:
        assert self._source is not None and self._info is not None, "rows before start"
        facts = self._source.trace_facts()
        if facts is None:
            self._held = {"ops": [], "api_calls": [], "gpu_ops": [], "memory": []}
            return
        devices = devices_table(facts.gpu_devices, facts.devices)
        ranks = report_ranks(facts.gpu_users, facts.host_processes, self._info.rank)
        self._feed = TraceFeed(self.request, self._info, devices, facts.first_ns, ranks, self.force)

    def rows(self, rows: WindowRows) -> None:
        if self._feed is None and self._held is None:
            self._open()
        if self._held is not None:
            for name in self._held:
                if getattr(rows, name) is not None:
                    self._held[name].append(getattr(rows, name))
        elif self._feed is not None:
            self._feed.ops(rows.ops)
            self._feed.api_calls(rows.api_calls)
            self._feed.gpu_ops(rows.gpu_ops)
            self._feed.memory(rows.memory)

    def finish(self, tables: dict[str, pa.Table]) -> None:
        if self._feed is None and self._held is None:
            self._open()
        if self._feed is not None:
            self._feed.finish(tables["threads"])
            self._feed = None
            return
        assert self._held is not None and self._info is not None
        whole = {name: pa.concat_tables(parts) for name, parts in self._held.items() if parts}
        self._held = None
        report = InMemory(header_meta(self._info), {**whole, **tables})
        export_chrome_traces(
            report, self.request.path, split=self.request.split, force=self.force, staged=self.request.staged
        )

    def abort(self) -> None:
        if self._feed is not None:
            self._feed.abort()
        self._feed, self._held = None, None
        self.request.abort()
