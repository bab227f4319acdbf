"""Chrome / Perfetto trace (Trace Event Format), shaped like PyTorch profiler (Kineto) traces, streamed.

Tracks follow Kineto: a host process is ``pid`` = OS pid with one ``tid`` per thread; a GPU is
``pid`` = device index with one ``tid`` per stream. Slices are ``ph: "X"`` with categories
``cpu_op`` / ``user_annotation`` (NVTX ranges), ``cuda_runtime`` / ``cuda_driver`` (API calls),
``kernel``, ``gpu_memcpy``, ``gpu_memset``; flows ``ac2g`` (API call -> GPU op, id gpu_op_id + 1)
and ``fwdbwd`` (forward op -> backward node, id gpu rows + 1 + op_id: no collisions) are
``ph: "s"`` then ``ph: "f"`` with ``bp: "e"``. Times are microseconds with three decimals (exact
nanoseconds) relative to ``baseTimeNanoseconds``.

:class:`TraceWriter` is fed the ops, API calls and GPU ops a chunk at a time, in any order
between tables (GPU ops in ``gpu_op_id`` order, as datasets and conversions hold them); each
chunk's events are written and the chunk dropped. It keeps only what later chunks need: per API
call its thread and start (to draw ``ac2g`` flows), per op with a sequence number or a forward
link its id, thread and start (``fwdbwd``), the set of tracks, and the rare rows that cannot
nest on their track (they get extra tracks once every real track is known, at :meth:`finish`).

The header carries what Kineto writes and Holistic Trace Analysis reads before the events:
``schemaVersion``, ``baseTimeNanoseconds``, ``distributedInfo`` (HTA maps one file to one rank:
:mod:`nvbridge.export.trace_ranks` says which rank a file holds; a multi-rank report is written
as one trace per rank by :func:`nvbridge.export.trace.export_chrome_traces`) and
``deviceProperties``. Track names follow the events.
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col
from nvbridge.dataset.schema import ReportTables
from nvbridge.dataset.timeline import in_window, step_window
from nvbridge.engine import CROSS_THREAD, CROSSING
from nvbridge.export.chrome_flows import FlowState, ThreadCodes
from nvbridge.export.chrome_memory import MemoryCounters
from nvbridge.export.chrome_text import (
    EventSink,
    Lines,
    api_lines,
    decoded,
    gpu_lines,
    header,
    op_lines,
)
from nvbridge.export.chrome_tracks import StreamLanes, TrackSet, extra_tids, lanes, track_names
from nvbridge.export.trace_ranks import recorded_rank, tables_ranks
from nvbridge.output import publish as outputs
from nvbridge.workers import worker_pool

__all__ = ["SUFFIXES", "TraceStats", "TraceWriter", "lanes", "step_window", "write"]

SUFFIXES = (".json", ".json.gz")
BATCH_ROWS = 200_000
SPLIT_ROWS = 16_384  # chunks at least this long are turned into lines on two threads
GZIP_LEVEL = 1  # measured at 2M NVTX rows: zlib's level 1 writes 5x faster than 9 for a file 1.3x larger


@dataclass
class TraceStats:
    """What was written: counts per kind, flows, and problems found (never silently fixed)."""

    path: Path
    slices: dict[str, int] = field(default_factory=dict)
    flows: dict[str, int] = field(default_factory=dict)
    overlapping_gpu_ops: int = 0
    gpu_ns_by_device: dict[int, int] = field(default_factory=dict)
    distributed: dict[str, object] = field(default_factory=dict)  # the header's distributedInfo
    counters: int = 0  # memory counter events (nvbridge.export.chrome_memory)


class TraceWriter:
    """A Chrome trace written as chunks of the ops, API calls and GPU ops arrive (see the module doc).

    Args:
        dest: ``.json`` or ``.json.gz`` (compressed while streaming); written under a staging name
            beside it (:func:`nvbridge.output.publish.staging_file`) and renamed at :meth:`finish`; removed
            by :meth:`abort`, a failure inside ``with``, or an interrupt.
        origin_ns: trace time 0 (report time base); no kept row may start earlier.
        meta: the dataset's ``meta`` (source, time base, session start...); devices: the
            ``devices`` table, for the header.
        distributed: the header's ``distributedInfo`` (default rank 0 of 1:
            :meth:`nvbridge.export.trace_ranks.Ranks.info` gives a report's).
        start_ns, end_ns: keep only rows overlapping this window; processes: only rows of these
            host process ids (GPU ops by the process that launched them).
    """

    def __init__(
        self,
        dest: str | os.PathLike[str],
        *,
        origin_ns: int,
        meta: Mapping[str, str | None] | None = None,
        devices: pa.Table | None = None,
        distributed: Mapping[str, object] | None = None,
        start_ns: int | None = None,
        end_ns: int | None = None,
        processes: set[int] | None = None,
    ) -> None:
        self.path = Path(dest)
        self.origin = origin_ns
        self.window = (start_ns, end_ns, None if processes is None else sorted(processes))
        self.devices = (
            devices
            if devices is not None
            else pa.table({"device_id": pa.array([], pa.int64()), "name": pa.array([], pa.string())})
        )
        info: dict[str, object] = dict(distributed) if distributed is not None else {"rank": 0, "world_size": 1}
        self.stats = TraceStats(self.path, distributed=info)
        self._threads = ThreadCodes()
        self._flows = FlowState(self._threads)
        self._lanes = StreamLanes()
        self._streams: set[tuple[int, int]] = set()
        self._unnested: list[pa.Table] = []  # ranges that cannot nest on their thread
        self._moved: list[pa.Table] = []  # GPU ops overlapping an earlier op of their stream
        self._extra_flows: dict[str, int] = {}  # flows the caller drew (:meth:`extra`)
        self._memory = MemoryCounters(origin_ns, start_ns, end_ns, self.window[2])
        self._tmp = outputs.staging_file(self.path)
        self._fh = io.BufferedWriter(
            _open_gzip(self._tmp) if self.path.suffix == ".gz" else io.FileIO(self._tmp, "wb"), buffer_size=1 << 20
        )
        self._builder = worker_pool(1, "nvbridge-lines")
        try:
            self._sink = EventSink(self._fh, header(meta or {}, devices, origin_ns, info))
        except BaseException:
            self._fh.close()
            self._tmp.unlink(missing_ok=True)
            raise

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None:
            self.abort()

    def _lines(self, build: Callable[[pa.Table, np.ndarray, int], pa.Array], table: pa.Table, tid: np.ndarray) -> None:
        """Build a chunk's lines in two halves at once (Arrow's string kernels release the GIL);
        write them in order."""
        half = table.num_rows // 2 if table.num_rows >= SPLIT_ROWS else table.num_rows
        second = (
            self._builder.submit(build, table.slice(half), tid[half:], self.origin) if half < table.num_rows else None
        )
        self._sink.lines(build(table.slice(0, half), tid[:half], self.origin))
        if second is not None:
            self._sink.lines(second.result())

    def _kept(self, table: pa.Table) -> pa.Table:
        start_ns, end_ns, processes = self.window
        if start_ns is not None or end_ns is not None or processes is not None:
            keep = in_window(table, start_ns, end_ns, processes)
            if not keep.all():
                table = table.filter(pa.array(keep))
        if table.num_rows and int(pc.min(table.column("start_ns")).as_py()) < self.origin:
            raise ValueError(f"a row starts before the trace's origin_ns {self.origin}; pass an earlier origin")
        return decoded(table)

    def ops(self, table: pa.Table) -> None:
        """NVTX ranges (``ops`` rows, any order); columns :data:`OP_COLUMNS`."""
        t = self._kept(table)
        if not t.num_rows:
            return
        unnested = (np_col(t, "flags", fill=0) & (CROSS_THREAD | CROSSING)) != 0
        nested = t.filter(pa.array(~unnested)) if unnested.any() else t
        tid = np_col(nested, "thread_id", fill=0)
        codes = np.full(t.num_rows, -1, np.int32)
        codes[~unnested] = self._threads.codes(np_col(nested, "process_id"), tid)
        self._flows.add_ops(t, codes)
        self._lines(op_lines, nested, tid)
        if unnested.any():
            self._unnested.append(t.filter(pa.array(unnested)))
        _bump(self.stats.slices, "ops", t.num_rows)

    def api_calls(self, table: pa.Table) -> None:
        """CUDA API calls (``api_calls`` rows, any order); columns :data:`API_COLUMNS`."""
        self._flows.seen_api_calls(np_col(table, "api_call_id"))
        t = self._kept(table)
        if t.num_rows:
            codes = self._threads.codes(np_col(t, "process_id"), np_col(t, "thread_id"))
            self._flows.add_api_calls(np_col(t, "api_call_id"), codes, np_col(t, "start_ns"))
            self._lines(lambda part, _tid, origin: api_lines(part, origin), t, np.zeros(t.num_rows, np.int64))
            _bump(self.stats.slices, "api_calls", t.num_rows)
        self._sink.lines(self._flows.ac2g_pending(self.origin, final=False))

    def gpu_ops(self, table: pa.Table) -> None:
        """GPU ops (``gpu_ops`` rows, in ``gpu_op_id`` order); columns :data:`GPU_COLUMNS`."""
        self._flows.gpu_rows += table.num_rows
        t = self._kept(table)
        if not t.num_rows:
            return
        dev, stream = np_col(t, "device_id", fill=0), np_col(t, "stream_id", fill=0)
        start, end = np_col(t, "start_ns"), np_col(t, "end_ns")
        for d in np.unique(dev):
            _bump(self.stats.gpu_ns_by_device, int(d), int((end - start)[dev == d].sum()))
        for row in pc.value_counts(t.column("kind")).to_pylist():
            _bump(self.stats.slices, str(row["values"]), int(row["counts"]))
        moved = self._lanes.moved((dev << 32) | stream, start, end)
        stay = t.filter(pa.array(~moved)) if moved.any() else t
        kept_dev, kept_stream = dev[~moved], stream[~moved]
        for d in np.unique(kept_dev).tolist():  # a few devices: no sort of (device, stream) rows
            self._streams |= {(d, s) for s in np.unique(kept_stream[kept_dev == d]).tolist()}
        self._lines(gpu_lines, stay, stream[~moved])
        self._sink.lines(self._flows.ac2g(stay, stream[~moved], self.origin))
        if moved.any():
            self._moved.append(t.filter(pa.array(moved)))
            self.stats.overlapping_gpu_ops += int(moved.sum())

    def memory(self, table: pa.Table, floor_ns: int | None = None) -> None:
        """Allocator events (``memory`` rows, in time order) as counters; ``floor_ns``: where
        their tracks start, if not at the window's start (:class:`MemoryCounters`)."""
        lines = self._memory.lines(table, floor_ns)
        if lines is not None:
            self._sink.lines(lines)

    def finish(self, threads: pa.Table, gpu_rows: int | None = None) -> TraceStats:
        """Write the rows held back, the fwdbwd flows and the track names; publish the file.

        Args:
            threads: the ``threads`` table (process and thread names).
            gpu_rows: rows of the whole ``gpu_ops`` table when not every row was fed (fwdbwd
                flow ids count from it).
        """
        self.close(threads, gpu_rows)
        self.publish()
        return self.stats

    def close(self, threads: pa.Table, gpu_rows: int | None = None) -> TraceStats:
        """:meth:`finish` but for publishing: the file stays under its staging name until
        :meth:`publish` (several files published together, or none)."""
        try:
            carried = self._memory.carried()
            if carried is not None:
                self._sink.lines(carried)
            tracks, unnested_tid = self._extra_tracks()
            self._sink.lines(self._flows.ac2g_pending(self.origin, final=True))
            fwdbwd = self._flows.fwdbwd(self.origin, gpu_rows, unnested_tid)
            self._sink.lines(fwdbwd)
            self._sink.lines(pa.array(track_names(tracks, threads, self.devices), pa.string()))
            self._sink.close()
            self._fh.flush()
            self._fh.close()
            self._builder.shutdown()
        except BaseException:
            self.abort()
            raise
        self.stats.flows = {**self._flows.counts, **self._extra_flows}
        self.stats.counters = self._memory.rows
        return self.stats

    def extra(self, lines: list[Lines], slices: Mapping[str, int], flows: Mapping[str, int]) -> None:
        """Events the caller built (a many-rank trace's collectives: nvbridge.export.trace_many),
        counted with the writer's."""
        for part in lines:
            self._sink.lines(part)
        for kind, n in slices.items():
            _bump(self.stats.slices, kind, n)
        for kind, n in flows.items():
            _bump(self._extra_flows, kind, n)

    def publish(self) -> None:
        """Rename the closed file to its name."""
        try:
            self._tmp.replace(self.path)
        except BaseException:
            self.abort()
            raise
        outputs.release(self._tmp)

    def _extra_tracks(self) -> tuple[TrackSet, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Lanes of the rows held back, their thread ids, and their events written."""
        ops = _in_order(self._unnested, "op_id")
        gpu = _in_order(self._moved, "gpu_op_id")
        o_pid, o_tid = np_col(ops, "process_id"), np_col(ops, "thread_id", fill=0)
        o_lane = 1 + lanes((o_pid << 32) | o_tid, np_col(ops, "start_ns"), np_col(ops, "end_ns"))
        g_dev, g_stream = np_col(gpu, "device_id", fill=0), np_col(gpu, "stream_id", fill=0)
        g_lane = 1 + lanes((g_dev << 32) | g_stream, np_col(gpu, "start_ns"), np_col(gpu, "end_ns"))
        host = self._threads.pairs()
        extra_host = sorted(set(zip(o_pid.tolist(), o_tid.tolist(), o_lane.tolist())))
        extra_gpu = sorted(set(zip(g_dev.tolist(), g_stream.tolist(), g_lane.tolist())))
        host_map, gpu_map = extra_tids({t for _, t in host} | {s for _, s in self._streams}, extra_host, extra_gpu)
        op_tid = np.array([host_map[k] for k in zip(o_pid.tolist(), o_tid.tolist(), o_lane.tolist())], np.int64)
        gpu_tid = np.array([gpu_map[k] for k in zip(g_dev.tolist(), g_stream.tolist(), g_lane.tolist())], np.int64)
        if ops.num_rows:
            self._sink.lines(op_lines(ops, op_tid, self.origin))
        if gpu.num_rows:
            self._sink.lines(gpu_lines(gpu, gpu_tid, self.origin))
            self._sink.lines(self._flows.ac2g(gpu, gpu_tid, self.origin))
        tracks = TrackSet(host, self._streams, host_map, gpu_map, self._memory.pids)
        return tracks, (np_col(ops, "op_id"), o_pid, op_tid)

    def abort(self) -> None:
        """Close and remove the partial file (nothing is left behind)."""
        self._sink.stop()
        self._builder.shutdown(cancel_futures=True)
        try:
            self._fh.close()
        except (OSError, ValueError):
            pass
        self._tmp.unlink(missing_ok=True)
        outputs.release(self._tmp)


def _open_gzip(path: Path) -> io.RawIOBase | gzip.GzipFile:
    """A gzip stream: ISA-L's where installed (at 2M NVTX rows 0.6 s of CPU instead of zlib's 2.4 s,
    and 8% smaller), else zlib's."""
    try:
        from isal import igzip
    except ImportError:
        return gzip.open(path, "wb", compresslevel=GZIP_LEVEL)
    return igzip.open(path, "wb", compresslevel=GZIP_LEVEL)  # type: ignore[no-untyped-call,no-any-return]


K = TypeVar("K", int, str)


def _bump(counts: dict[K, int], key: K, n: int) -> None:
    counts[key] = counts.get(key, 0) + n


def _in_order(parts: list[pa.Table], key: str) -> pa.Table:
    """The held-back rows, in id order (the order a whole-table writer would see them in)."""
    if not parts:
        return pa.table(
            {
                key: pa.array([], pa.int64()),
                "process_id": pa.array([], pa.int64()),
                "thread_id": pa.array([], pa.int64()),
                "device_id": pa.array([], pa.int64()),
                "stream_id": pa.array([], pa.int64()),
                "start_ns": pa.array([], pa.int64()),
                "end_ns": pa.array([], pa.int64()),
            }
        )
    table = pa.concat_tables(parts, promote_options="permissive")
    return table.take(pa.array(np.argsort(np_col(table, key), kind="stable")))


def write(
    report: ReportTables,
    dest: str | os.PathLike[str],
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    processes: set[int] | None = None,
    distributed: Mapping[str, object] | None = None,
) -> TraceStats:
    """Write a loaded report's tables as one Chrome trace (``.json`` or ``.json.gz``).

    Args:
        report: an ``nvbridge.Report`` (or anything with its tables and ``meta``).
        dest: output path; a ``.gz`` suffix compresses while streaming.
        start_ns, end_ns: keep only what overlaps this window (report time base).
        processes: keep only these host process ids (and GPU work they launched).
        distributed: ``distributedInfo`` (default: the rank the kept processes are, by
            :mod:`nvbridge.export.trace_ranks`' rule; a file of several ranks names none).
    """
    ops, api_calls, gpu_ops = (report.table(name) for name in ("ops", "api_calls", "gpu_ops"))
    tables = (ops, api_calls, gpu_ops)
    kept = [in_window(t, start_ns, end_ns, processes) for t in tables]
    starts = [np_col(t, "start_ns")[k] for t, k in zip(tables, kept)]
    origin = min((int(s.min()) for s in starts if len(s)), default=0)
    if distributed is None:
        ranks = tables_ranks(ops, api_calls, gpu_ops, recorded_rank(report.meta))
        pids = set().union(*(np.unique(np_col(t, "process_id", fill=-1)[k]).tolist() for t, k in zip(tables, kept)))
        distributed = ranks.info(pids)
    with TraceWriter(
        dest,
        origin_ns=origin,
        meta=report.meta,
        devices=report.table("devices"),
        distributed=distributed,
        start_ns=start_ns,
        end_ns=end_ns,
        processes=processes,
    ) as writer:
        for lo in range(0, max(api_calls.num_rows, 1), BATCH_ROWS):
            writer.api_calls(api_calls.slice(lo, BATCH_ROWS))
        for lo in range(0, max(gpu_ops.num_rows, 1), BATCH_ROWS):
            writer.gpu_ops(gpu_ops.slice(lo, BATCH_ROWS))
        for lo in range(0, max(ops.num_rows, 1), BATCH_ROWS):
            writer.ops(ops.slice(lo, BATCH_ROWS))
        memory = report.table("memory")
        for lo in range(0, memory.num_rows, BATCH_ROWS):
            writer.memory(memory.slice(lo, BATCH_ROWS))
        return writer.finish(report.table("threads"))
