"""The one conversion pipeline: reader -> name parsing -> engine -> sinks, a window at a time.

Every conversion runs here, whatever the input and wherever its rows go:

1. a reader (:func:`nvbridge.readers.open_windows`) chooses how to read the report (rowid windows,
   slabs of starts, or the whole report as one window) and yields complete windows
   (:class:`~nvbridge.readers.raw.Window`: ranges, API calls, GPU ops, the cut);
2. each window's range names are parsed on a worker thread, one window ahead of the engine;
3. the engine (:class:`~nvbridge.engine.Correlator`) turns the window into finished rows: ops,
   api_calls, gpu_ops;
4. the sinks (:class:`Sink`: the Parquet files, the Chrome traces, tables in memory) take them,
   each table first checked to be the one nvbridge.dataset.schema declares;
5. after the last window, the engine makes the small tables (marks, syncs, threads, devices) from
   the reader's tail, and the sinks finish.

Where the windows chosen cannot carry the report, the reader or the engine hands on a
:class:`~nvbridge.readers.raw.Restart` (a value, never an exception); this driver then drops what
the sinks took and reads the report again: by slabs of starts, or with horizons LATE_RETRY times
longer, at most three times, then whole, as one window.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from nvbridge.conversion.result import OpsTally, Tallies, with_marked_ranks
from nvbridge.dataset.schema import conform
from nvbridge.engine import Correlator, WindowRows, parse_names
from nvbridge.errors import CorrelationError
from nvbridge.readers.raw import Restart, SourceInfo, Window, WindowSource
from nvbridge.workers import worker_pool

# progress(stage, rows): ``stage`` names what starts now; ``rows`` is how many rows' worth of the
# whole job the finished stage stands for, so a display can show rows/s and time left.
Progress = Callable[[str, int], None]
# NVTX rows per streamed window (and API call and GPU op rows per slab). Measured at 2M rows:
# 64K to 512K rows take the same time, and peak memory grows with the window.
WINDOW_ROWS = 1 << 16
# Windows between two returns of freed memory to the system (trim_heap): without them the
# reader threads' freed buffers, fragmented, grew the peak at 50M NVTX rows from 0.79 to 1.05 GB
# (every 48 windows: 0.90 GB); each costs a few milliseconds. Every 8 rather than 16: 574-581 MB
# at 50M instead of 574-594 MB, no slower at 2M.
TRIM_EVERY = 8
# How many times longer the horizons are on a second try (readers.activity.LATE_NS for GPU ops,
# engine.forward_links.FORWARD_HORIZON_ROWS for forward ops).
LATE_RETRY = 60
# Tries at streaming a report before it is read whole.
TRIES = 3


class Opener(Protocol):
    """Opens the report as windows, the strategy given (nvbridge.readers.open_windows)."""

    def __call__(
        self, *, by_start: bool = False, horizons: int = 1, whole: bool = False, marks: bool = False
    ) -> AbstractContextManager[WindowSource]: ...


class Sink(Protocol):
    """Where a conversion's rows go. ``start`` comes before a run's first window (again after a
    restart), ``rows`` with each window's finished rows, ``finish`` with the small tables once
    the last window is in; ``abort`` drops everything of the run (a restart, or a failure)."""

    def start(self, source: WindowSource, info: SourceInfo) -> None: ...

    def rows(self, rows: WindowRows) -> None: ...

    def finish(self, tables: dict[str, pa.Table]) -> None: ...

    def abort(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Run:
    """A conversion's reading: the source opened as windows and what the file name adds."""

    open: Opener
    info: Callable[[SourceInfo], SourceInfo]  # e.g. the rank a file name spells


def convert(run: Run, sinks: Sequence[Sink], progress: Progress) -> Tallies:
    """Run the pipeline over ``run``'s report into ``sinks``; the strategy follows the Restarts.

    Raises:
        InputError: the report cannot be read.
        CorrelationError: an invariant is broken.
    """
    by_start, horizons, marks = False, 1, False
    for _ in range(TRIES + 1):  # + the one read again expecting allocator marks
        done = _attempt(run, run.open(by_start=by_start, horizons=horizons, marks=marks), sinks, progress)
        if not isinstance(done, Restart):
            return done
        if done.marks and not marks:  # the same strategy, the ops' memory columns counted
            marks = True
        elif done.horizon:
            if horizons > 1:
                break
            horizons = LATE_RETRY
        elif by_start:
            break
        else:
            by_start = True
    done = _attempt(run, run.open(whole=True), sinks, progress)
    if isinstance(done, Restart):  # one window holds every launch and forward op
        raise CorrelationError(f"the report could not be correlated in one window: {done.reason}")
    return done


def _attempt(
    run: Run, opened: AbstractContextManager[WindowSource], sinks: Sequence[Sink], progress: Progress
) -> Tallies | Restart:
    """One pass over the report; the sinks hold nothing of it if it ends in a Restart or fails."""
    try:
        with opened as source, worker_pool(1, "nvbridge-names") as names:
            progress("reading", 0)
            info = run.info(source.info)
            engine = Correlator(info, source.capture_end_ns, source.syncs, memory=source.has_memory)
            try:
                for sink in sinks:
                    sink.start(source, info)
                done = _windows(engine, parsed_ahead(source.windows(), names.submit), sinks, progress)
                if isinstance(done, Restart):
                    for sink in sinks:
                        sink.abort()
                    return done
                progress("writing", 0)
                trim_heap()  # the windows' buffers: the last writes need less, and fresh
                tables = {name: conform(name, t) for name, t in engine.finish(source.tail()).items()}
                info = with_marked_ranks(info, tables.get("marks"))  # as the sinks write it
                for sink in sinks:
                    sink.finish(tables)
            finally:
                engine.close()
    except BaseException:
        for sink in sinks:
            sink.abort()
        raise
    t = engine.tally
    return Tallies(info, done.ops, t.api_calls, t.api_outside, t.figures(), done.rows_read)


@dataclass(slots=True)
class _Done:
    ops: OpsTally
    rows_read: int = 0


def _windows(
    engine: Correlator,
    windows: Iterable[tuple[Window, Future[pa.Table]] | Restart],
    sinks: Sequence[Sink],
    progress: Progress,
) -> _Done | Restart:
    """Every window through the engine into the sinks; a Restart as soon as one comes."""
    done = _Done(OpsTally())
    for count, item in enumerate(windows, 1):
        if isinstance(item, Restart):
            return item
        window, parsed = item
        rows = engine.add(window, parsed)
        progress("correlating", window.rows_read - done.rows_read)
        done.rows_read = window.rows_read
        del window, item, parsed  # the window's tables: only the rows made of them stay
        if isinstance(rows, Restart):
            return rows
        for name in ("ops", "api_calls", "gpu_ops", "memory"):  # each as declared, before any sink takes it
            if getattr(rows, name) is not None:
                conform(name, getattr(rows, name))
        done.ops.add(rows.ops)
        for sink in sinks:
            sink.rows(rows)
        if count % TRIM_EVERY == 0:
            trim_heap()
    return done


def parsed_ahead(
    windows: Iterator[Window | Restart], submit: Callable[..., Future[pa.Table]]
) -> Iterator[tuple[Window, Future[pa.Table]] | Restart]:
    """``windows`` with their range names being parsed (``submit``: on a worker), the next
    window's parse started before this one is handed on, so it runs while the engine works.
    Nothing here holds a window once it is handed on (a one-window report's tables go as soon
    as the engine has made its rows)."""
    queue: deque[tuple[Window, Future[pa.Table]]] = deque()
    for window in windows:
        if isinstance(window, Restart):
            yield window
            return
        queue.append((window, submit(parse_names, window.ranges)))
        del window
        if len(queue) > 1:
            yield queue.popleft()
    while queue:
        yield queue.popleft()


def trim_heap() -> None:
    """Give freed buffers back to the OS between stages (whole-report reads, then windows).

    glibc keeps freed memory in its heap behind live allocations: after the whole-report
    reads at 10M NVTX rows, 0.7-1 GB of a 2 GB peak. The next stage needs less, and reuses
    what is left.
    """
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
