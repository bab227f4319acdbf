"""``convert``: profiler database(s) -> Parquet dataset, all or nothing.

Output goes to a temporary directory beside the destination and is renamed into place
only once complete, so a failure never leaves a partial dataset behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge._version import __version__
from nvbridge.columns import np_col
from nvbridge.dataset import Report, load
from nvbridge.engine import Correlator, capture_end, correlate, other_tables, stream, with_parsed_names
from nvbridge.errors import ExportError, NotStreamable
from nvbridge.export import chrome, parquet
from nvbridge.profile import SourceInfo
from nvbridge.readers import read_profile

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
_EVENT_TABLES = (
    "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_MARKER",
    "CUPTI_ACTIVITY_KIND_DRIVER", "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL",
)


def estimate_rows(source: str | os.PathLike[str]) -> int:
    """Rows a conversion will read, from each event table's largest rowid (no scan); 0 if unknown."""
    path = Path(os.fspath(source))
    if "://" in os.fspath(source) or not path.is_file():
        return 0
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
        try:
            have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            return sum(int(con.execute(f'SELECT max(rowid) FROM "{t}"').fetchone()[0] or 0)
                       for t in _EVENT_TABLES if t in have)
        finally:
            con.close()
    except sqlite3.DatabaseError:
        return 0  # the conversion itself reports what is wrong with the file


@dataclass(frozen=True, slots=True)
class ConversionResult:
    """What one conversion read and wrote, with the figures the CLI summary prints."""

    info: SourceInfo
    output: Path
    rows_read: int
    ops: int
    threads: int
    processes: int
    api_calls: int
    api_calls_outside_ranges: int
    kernels: int
    memcpys: int
    memsets: int
    gpu_ops_without_api_call: int
    gpu_ops_unattributed: int
    gpu_ns_total: int
    gpu_ns_unattributed: int
    seconds: float

    def describe(self) -> str:
        """The one-paragraph summary ``nvbridge convert`` prints."""
        share = 100.0 * self.gpu_ns_unattributed / self.gpu_ns_total if self.gpu_ns_total else 0.0
        return (
            f"Read {self.info.source}: {self.info.describe()}, {self.rows_read:,} rows in "
            f"{self.seconds:.2f} s. {self.ops:,} ops (NVTX ranges) on {_n(self.threads, 'thread')} in "
            f"{_n(self.processes, 'process')}; {self.api_calls:,} CUDA API calls "
            f"({self.api_calls_outside_ranges:,} outside any range); {self.kernels:,} kernels, "
            f"{self.memcpys:,} memcpys, {self.memsets:,} memsets. {self.gpu_ops_unattributed:,} GPU ops "
            f"({share:.1f}% of GPU time) are attributed to no op, {self.gpu_ops_without_api_call:,} of "
            f"them because their launching API call is not in the capture. Wrote {self.output}."
        )


def rank_from_name(source: str) -> int | None:
    """A rank spelled in a report's file name: ``rank3``, ``rank_3``, ``rank-3``, ``RANK3``."""
    m = re.search(r"(?:^|[^a-z])rank[_-]?(\d+)", Path(source).stem, re.IGNORECASE)
    return int(m.group(1)) if m else None


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "es" if noun.endswith("s") else "s")


def _gpu_figures(kind: pa.ChunkedArray, start: np.ndarray, end: np.ndarray, op_id: np.ndarray,
                 api_call_id: np.ndarray) -> dict[str, int]:
    """The summary's GPU counts and times (ids -1 where null)."""
    counts = {str(v["values"]): int(v["counts"]) for v in pc.value_counts(kind).to_pylist()}
    dur = end - start
    lost = op_id < 0
    return {"kernels": counts.get("kernel", 0), "memcpys": counts.get("memcpy", 0),
            "memsets": counts.get("memset", 0), "gpu_ops_without_api_call": int((api_call_id < 0).sum()),
            "gpu_ops_unattributed": int(lost.sum()), "gpu_ns_total": int(dur.sum()),
            "gpu_ns_unattributed": int(dur[lost].sum())}


def _summarize(info: SourceInfo, ops: _OpsTally, api_op: np.ndarray, gpu: dict[str, int], output: Path,
               rows_read: int, seconds: float) -> ConversionResult:
    return ConversionResult(
        info=info,
        output=output,
        rows_read=rows_read,
        ops=ops.rows,
        threads=len(ops.threads),
        processes=len({key >> 32 for key in ops.threads}),
        api_calls=len(api_op),
        api_calls_outside_ranges=int((api_op < 0).sum()),
        seconds=seconds,
        **gpu,
    )


class _OpsTally:
    """What the summary needs of the ops, counted as they are written."""

    def __init__(self) -> None:
        self.rows = 0
        self.threads: set[int] = set()

    def add(self, ops: pa.Table) -> None:
        self.rows += ops.num_rows
        keys = (np_col(ops, "process_id") << 32) | np_col(ops, "thread_id", fill=0)
        self.threads.update(np.unique(keys).tolist())


def _check_destination(output: Path, force: bool) -> None:
    if output.exists() and not force:
        raise ExportError(
            f"{output} already exists; choose another output directory or pass --force to replace it."
        )
    if output.exists() and not output.is_dir():
        raise ExportError(f"{output} is a file; pass a directory path for the dataset.")


def _publish(tmp: Path, output: Path) -> None:
    """Move a finished dataset into place, replacing an old one only after it is complete."""
    if output.exists():
        old = output.with_name(output.name + ".nvbridge-old")
        shutil.rmtree(old, ignore_errors=True)
        output.rename(old)
        tmp.rename(output)
        shutil.rmtree(old)
    else:
        tmp.rename(output)


def convert_one(source: str | os.PathLike[str], output: str | os.PathLike[str], *, force: bool = False,
                progress: Progress | None = None, chrome_trace: str | os.PathLike[str] | None = None,
                ) -> ConversionResult:
    """Convert one profiler database into a Parquet dataset directory.

    An Nsight Systems file streams: its NVTX rows are read, correlated and written
    :data:`WINDOW_ROWS` rows at a time, so memory stays bounded whatever the report's size. A
    report whose ranges are out of start order, an nvprof file or another SQLAlchemy URL is
    read whole.

    Args:
        source: an nvprof or Nsight Systems SQLite file, or an SQLAlchemy URL.
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
    _check_destination(out, force)
    if chrome_trace is not None:
        _check_trace_destination(Path(chrome_trace), force)
    report = progress or (lambda _stage, _rows: None)
    expected = estimate_rows(source) if progress else 0
    t0 = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        done = None
        try:
            done = _streamed(source, tmp, report)
        except NotStreamable:
            for part in tmp.iterdir():
                part.unlink()
        if done is None:
            done = _whole(source, tmp, report, expected)
        info, ops, api_op, gpu, rows_read = done
        if chrome_trace is not None:
            report("writing trace", 0)
            chrome.write(load(tmp), chrome_trace, rank=info.rank or 0)
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    report("done", max(expected - rows_read, 0))
    return _summarize(info, ops, api_op, gpu, out, rows_read, time.perf_counter() - t0)


_Done = tuple[SourceInfo, _OpsTally, np.ndarray, dict[str, int], int]  # api_op: op of each API call, -1 none


def _with_rank(info: SourceInfo, source: str | os.PathLike[str]) -> SourceInfo:
    if info.rank is None and (rank := rank_from_name(str(source))) is not None:
        return dataclasses.replace(info, rank=rank)
    return info


def _streamed(source: str | os.PathLike[str], tmp: Path, report: Progress) -> _Done:
    """Convert an Nsight Systems file window by window into ``tmp``.

    Raises:
        NotStreamable: not a local Nsight Systems file, or its ranges are out of start order.
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
            stream_in = Stream(db, WINDOW_ROWS, prepare=with_parsed_names)
            info = _with_rank(stream_in.info, source)
            # The engine's set-up sorts every API call and GPU op (0.15 s at 2M NVTX rows, 0.8-1.1 s
            # at 10M): it runs beside the readers, which fetch windows meanwhile instead of waiting.
            with ThreadPoolExecutor(max_workers=1) as pool:
                building = pool.submit(Correlator, info, stream_in.api_calls, stream_in.gpu_ops,
                                       capture_end(info, stream_in.latest_ns), stream_in.syncs)
                stream_in.read_while(building, INIT_WINDOWS)
                engine = building.result()
            _trim_heap()
            reported = stream_in.rows_read
            report("correlating", reported)
            ops = _OpsTally()
            writer = parquet.TableWriter(tmp / "ops.parquet")
            # API calls and GPU ops are written as their rows become final, a row group at a
            # time built on the writers' threads, beside the next windows.
            api_out = _Finished(tmp / "api_calls.parquet", engine.api_calls)
            gpu_out = _Finished(tmp / "gpu_ops.parquet", engine.gpu_ops)
            try:
                for chunk in stream(engine, stream_in.windows()):
                    writer.write(chunk)
                    ops.add(chunk)
                    api_ready, gpu_ready = engine.final_rows()
                    api_out.write(api_ready)
                    gpu_out.write(gpu_ready)
                    report("correlating", stream_in.rows_read - reported)
                    reported = stream_in.rows_read
                report("writing", 0)
                _trim_heap()  # the windows' buffers: the last writes need less, and fresh
                api_ready, gpu_ready = engine.final_rows()
                api_out.write(api_ready, last=True)
                gpu_out.write(gpu_ready, last=True)
                tables = other_tables(engine, stream_in.marks(), stream_in.threads(),
                                      stream_in.devices)
                _write_tables(tmp, tables)
            finally:
                for out in (writer, api_out.writer, gpu_out.writer):
                    out.close()
        gpu = _gpu_figures(engine.gpu.column("kind"), *engine.gpu_columns())
        rows = {"ops": ops.rows, "api_calls": api_out.writer.rows, "gpu_ops": gpu_out.writer.rows,
                **{name: t.num_rows for name, t in tables.items()}}
        parquet.write_meta(tmp, info, rows, __version__)
        return info, ops, engine.api_op, gpu, stream_in.rows_read


class _Finished:
    """api_calls or gpu_ops, written in row groups of ROW_GROUP_ROWS rows as they become final."""

    def __init__(self, path: Path, build: Callable[[int, int], pa.Table]) -> None:
        self.writer = parquet.TableWriter(path)
        self._build = build
        self._done = 0
        self._queued = False

    def write(self, ready: int, last: bool = False) -> None:
        """Queue the full row groups among the first ``ready`` rows; ``last``: all of them."""
        while ready - self._done >= parquet.ROW_GROUP_ROWS or (last and ready > self._done):
            stop = min(self._done + parquet.ROW_GROUP_ROWS, ready)
            self.writer.write(functools.partial(self._build, self._done, stop))
            self._done, self._queued = stop, True
        if last and not self._queued:  # no rows: the file still holds the table's schema
            self.writer.write(functools.partial(self._build, 0, 0))
            self._queued = True


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


def _whole(source: str | os.PathLike[str], tmp: Path, report: Progress, expected: int) -> _Done:
    """Read, correlate and write a report in one window."""
    report("reading", 0)
    profile = read_profile(source)
    rows_read = profile.rows_read
    expected = expected or rows_read
    info = _with_rank(profile.info, source)
    profile = dataclasses.replace(profile, info=info)
    report("correlating", round(expected * STAGE_SHARE["reading"]))
    model = correlate(profile)
    del profile  # the raw tables: gone before the output is encoded
    pa.default_memory_pool().release_unused()
    report("writing", round(expected * STAGE_SHARE["correlating"]))
    parquet.write(model, tmp, __version__)
    ops = _OpsTally()
    ops.add(model.ops)
    g = model.gpu_ops
    gpu = _gpu_figures(g.column("kind"), np_col(g, "start_ns"), np_col(g, "end_ns"), np_col(g, "op_id", fill=-1),
                       np_col(g, "api_call_id", fill=-1))
    return info, ops, np_col(model.api_calls, "op_id", fill=-1), gpu, rows_read


def _write_tables(tmp: Path, tables: dict[str, pa.Table]) -> None:
    for name, table in tables.items():
        parquet.write_table(table, tmp / f"{name}.parquet")


def _check_trace_destination(path: Path, force: bool) -> None:
    if not path.name.endswith(chrome.SUFFIXES):
        raise ExportError(f"{path.name}: a Chrome trace is written as .json or .json.gz; rename the output.")
    if path.exists() and not force:
        raise ExportError(f"{path} already exists; choose another file or pass --force to replace it.")


def export_chrome_trace(source: str | os.PathLike[str] | Report, dest: str | os.PathLike[str], *,
                        start_ns: int | None = None, end_ns: int | None = None,
                        steps: tuple[int, int] | None = None, processes: set[int] | None = None,
                        force: bool = True) -> chrome.TraceStats:
    """Write a report (or converted dataset) as a Chrome/Perfetto trace.

    Args:
        source: a profiler database, SQLAlchemy URL, dataset directory, or a loaded Report.
        dest: ``.json`` or ``.json.gz`` (compressed while streaming).
        start_ns, end_ns: a time window, in the report's time base.
        steps: ``(first, last)`` ProfilerStep numbers: the window they span.
        processes: host process ids to keep.
        force: replace ``dest`` if it exists.

    Raises:
        InputError: the source cannot be read.
        ExportError: bad destination, or steps the report does not have.
    """
    path = Path(dest)
    _check_trace_destination(path, force)
    report = source if isinstance(source, Report) else load(source)
    if steps is not None:
        try:
            start_ns, end_ns = chrome.step_window(report.ops, *steps)
        except ValueError as exc:
            raise ExportError(str(exc)) from exc
    rank = report.meta.get("rank")
    return chrome.write(report, path, start_ns=start_ns, end_ns=end_ns, processes=processes,
                        rank=int(rank) if rank not in (None, "None") else 0)


def convert(sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
            output: str | os.PathLike[str], *, force: bool = False,
            progress: Progress | None = None,
            chrome_trace: str | os.PathLike[str] | None = None,
            jobs: int = 1, scheduler: str | None = None) -> list[ConversionResult]:
    """Convert one or more reports. One source writes ``output`` itself; several write
    ``output/report=<file stem>/`` each, a layout DuckDB, Polars and Spark read as one
    dataset partitioned by report, skipping reports already converted unless ``force``.

    Args:
        jobs: convert this many reports at once in local processes.
        scheduler: address of a Dask distributed scheduler (``tcp://host:8786``) to convert
            on instead; the workers must see the input and output paths.

    Returns:
        One result per converted report (skipped ones are left out).

    Raises:
        InputError, ExportError: as :func:`convert_one`; nothing of a failed report is left.
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    out = Path(output)
    if len(sources) == 1 and jobs <= 1 and scheduler is None:
        return [convert_one(sources[0], out, force=force, progress=progress, chrome_trace=chrome_trace)]
    if chrome_trace is not None:
        raise ExportError("--chrome writes one trace: convert one report at a time, or use `nvbridge trace`.")
    stems = [Path(os.fspath(s)).stem for s in sources]
    if len(set(stems)) != len(stems):
        raise ExportError("two inputs share a file name; rename one so each report gets its own partition.")
    out.mkdir(parents=True, exist_ok=True)
    todo = [(s, out / f"report={stem}") for s, stem in zip(sources, stems)
            if force or not (out / f"report={stem}" / "meta.parquet").is_file()]
    if scheduler is not None:
        return _on_dask(scheduler, todo, force)
    if jobs > 1 and len(todo) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # Fresh workers, never a fork of this process: a forked child inherits ConnectorX's
        # connection pool without the threads that serve it, and its first read hangs.
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context(method)) as pool:
            futures = [pool.submit(convert_one, s, dest, force=force) for s, dest in todo]
            results = []
            for (s, _), f in zip(todo, futures):
                results.append(f.result())
                if progress:
                    progress(f"converted {Path(os.fspath(s)).name}", results[-1].rows_read)
            return results
    return [convert_one(s, dest, force=force, progress=progress) for s, dest in todo]


def _on_dask(address: str, todo: list[tuple[str | os.PathLike[str], Path]], force: bool) -> list[ConversionResult]:
    """Convert on an existing Dask distributed cluster (the engine NVIDIA's multi-report
    recipes use), one task per report."""
    try:
        from dask.distributed import Client
    except ImportError as exc:
        raise ExportError("--scheduler needs Dask; install it with: pip install 'nvbridge[cluster]'") from exc
    try:
        client = Client(address, timeout="10s")  # type: ignore[no-untyped-call]
    except OSError as exc:
        raise ExportError(f"cannot reach the Dask scheduler at {address} ({exc}); check the address.") from exc
    with client:
        futures = client.map(lambda job: convert_one(job[0], job[1], force=force), todo, pure=False)
        return list(client.gather(futures))  # type: ignore[no-untyped-call]
