"""``export_chrome_traces``: a report, a loaded Report or a dataset directory -> Chrome traces,
one per rank or one for all (``export_chrome_trace``: one file).

A dataset is streamed row group by row group through :class:`~nvbridge.export.chrome.TraceWriter`
(API calls, then GPU ops, then ops), never read whole: a first pass reads only the time, process
and device columns (and the ``ProfilerStep`` ranges for a step window) to find the window, the
trace's origin, the report's ranks (:mod:`nvbridge.export.trace_ranks`) and whether anything is
left to write, so a trace that would be empty is refused before a file is created. Traces per
rank are written in the same pass, one writer per rank fed every chunk (each keeps its process's
rows), on one clock (the same origin), and published together.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col
from nvbridge.dataset.schema import ReportTables
from nvbridge.dataset.timeline import step_spans, step_window_of
from nvbridge.errors import ExportError
from nvbridge.export.chrome import SUFFIXES, TraceStats, TraceWriter
from nvbridge.export.trace_ranks import SPLITS, rank_path, stale_rank_files
from nvbridge.export.trace_source import (
    COLUMNS,
    EVENT_TABLES,
    Plan,
    first_event_ns,
    memory_chunks,
    open_source,
    plan,
)
from nvbridge.output import publish as outputs

__all__ = [
    "NOTHING_TO_TRACE",
    "Traces",
    "check_arguments",
    "check_destination",
    "check_suffix",
    "export_chrome_trace",
    "export_chrome_traces",
    "first_event_ns",
    "plan",
]

NOTHING_TO_TRACE = (
    "the report has no ranges, API calls or GPU ops: nothing to trace; profile with NVTX or CUDA tracing "
    "(nsys profile -t cuda,nvtx)."
)


def check_suffix(path: Path) -> None:
    """A trace is named ``.json`` or ``.json.gz``.

    Raises:
        ExportError: naming the problem and the fix.
    """
    if not path.name.endswith(SUFFIXES):
        raise ExportError(f"{path.name}: a Chrome trace is written as .json or .json.gz; rename the output.")


def check_destination(path: Path, force: bool) -> None:
    """A trace file may be written at ``path``: right suffix, then the rule of every single-file
    output (:func:`nvbridge.output.publish.check_file_destination`).

    Raises:
        ExportError: naming the problem and the fix.
    """
    check_suffix(path)
    outputs.check_file_destination(path, force, "the trace")


def check_arguments(
    path: Path, split: str, force: bool, start_ns: int | None, end_ns: int | None, steps: tuple[int, int] | None
) -> None:
    """What :func:`export_chrome_traces` checks before it reads anything (and a caller that
    converts a report first, before converting).

    Raises:
        ExportError: naming the problem and the fix.
    """
    if split not in SPLITS:
        raise ExportError(f"split {split!r}: pass one of {', '.join(SPLITS)}.")
    check_suffix(path)
    if split == "none":
        check_destination(path, force)
    if steps is not None and (start_ns is not None or end_ns is not None):
        raise ExportError("a step range and a start/end window both choose the window; pass one of them.")
    if start_ns is not None and end_ns is not None and end_ns <= start_ns:
        raise ExportError("the window is empty; pass an end later than the start.")


@dataclass(frozen=True)
class Traces:
    """What :func:`export_chrome_traces` wrote: one file, or one per rank."""

    files: list[TraceStats]
    per_rank: bool
    left_out: tuple[int, ...] = ()  # host processes with events that are no rank (per rank only)
    stale: tuple[Path, ...] = ()  # other NAME.rank<K> files beside them (an earlier run's)


@dataclass(frozen=True)
class _Target:
    path: Path
    processes: set[int] | None
    distributed: dict[str, object]


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
    """Write a converted dataset (or a report's tables) as one Chrome/Perfetto trace (all its ranks
    in one file: see :func:`export_chrome_traces` for the arguments and for one trace per rank)."""
    return export_chrome_traces(
        source, dest, split="none", start_ns=start_ns, end_ns=end_ns, steps=steps, processes=processes, force=force
    ).files[0]


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
    staged: list[TraceWriter] | None = None,
) -> Traces:
    """Write a converted dataset (or a report's tables) as Chrome/Perfetto traces. A profiler
    database is converted first, above this layer (nvbridge.conversion.trace.export_chrome_traces,
    the public ``nvbridge.export_chrome_trace``).

    Args:
        source: a dataset directory (streamed, never read whole), or a report's tables (a
            loaded Report, a conversion's tables in memory).
        dest: ``.json`` or ``.json.gz`` (compressed while streaming), in an existing folder;
            one trace per rank is written as ``NAME.rank<K>.json.gz`` beside it.
        split: ``"rank"``: one trace per rank (:mod:`nvbridge.export.trace_ranks`), as
            torch.profiler writes them and Holistic Trace Analysis reads them; ``"none"``: one
            file, all ranks in it (for a viewer); ``"auto"``: per rank when the trace holds
            several ranks, else one file.
        start_ns, end_ns: a time window, in the report's time base.
        steps: ``(first, last)`` ProfilerStep numbers: the window they span (not with start/end).
        processes: host process ids to keep.
        force: replace the files if they exist.
        staged: where given, the files are left under their staging names and their writers
            appended here, for the caller to publish (``convert --chrome`` puts them in place
            after the dataset).

    Raises:
        InputError: the source cannot be read.
        ExportError: bad destination, an empty window, steps or processes the report does not
            have, or nothing to write; no file is left behind.
    """
    path = Path(dest)
    check_arguments(path, split, force, start_ns, end_ns, steps)
    src = open_source(source)
    if steps is not None:
        start_ns, end_ns = step_window_in(src, steps)
    found = plan(src, start_ns, end_ns, processes)
    _check_not_empty(found, start_ns, end_ns, processes)
    ranks = found.ranks(src.meta)
    held = ranks.held(found.kept_processes)
    per_rank = split == "rank" or (split == "auto" and len(held) > 1)
    if per_rank and not held:
        raise ExportError("the trace holds no rank (no process that ran GPU work); write it as one file (split none).")
    targets = (
        [_Target(rank_path(path, ranks.of[p]), {p}, ranks.info([p])) for p in held]
        if per_rank
        else [_Target(path, processes, ranks.info(found.kept_processes))]
    )
    for target in targets:
        check_destination(target.path, force)
    try:
        files = _write(src, found, targets, per_rank, staged)
    except OSError as exc:  # disk full, permissions: nothing is left behind
        raise ExportError(
            f"cannot write {path} ({exc.strerror or exc}); free some space or write it elsewhere."
        ) from exc
    left = tuple(sorted(found.kept_processes - set(held))) if per_rank else ()
    stale = tuple(stale_rank_files(path, [t.path for t in targets])) if per_rank else ()
    return Traces(files, per_rank, left, stale)


def _write(
    src: ReportTables, found: Plan, targets: list[_Target], per_rank: bool, staged: list[TraceWriter] | None
) -> list[TraceStats]:
    """One pass over the chunks, each fed to every target's writer; all published (or all left
    in ``staged``), or none."""
    writers: list[TraceWriter] = []
    owners = found.owners if per_rank else {}
    try:
        for t in targets:
            writers.append(
                TraceWriter(
                    t.path,
                    origin_ns=found.origin_ns,
                    meta=src.meta,
                    devices=src.table("devices"),
                    distributed=t.distributed,
                    start_ns=found.start_ns,
                    end_ns=found.end_ns,
                    processes=t.processes,
                )
            )
        feeds = [{"ops": w.ops, "api_calls": w.api_calls, "gpu_ops": w.gpu_ops} for w in writers]
        for name in EVENT_TABLES:
            for chunk in src.chunks(name, list(COLUMNS[name]), (found.start_ns, found.end_ns)):
                if name == "gpu_ops" and owners:
                    chunk = with_owners(chunk, owners)
                for feed in feeds:
                    feed[name](chunk)
        for chunk in memory_chunks(src, found.end_ns):
            for w in writers:
                w.memory(chunk)
        stats = [w.close(src.table("threads"), gpu_rows=src.rows("gpu_ops")) for w in writers]
        if staged is not None:
            staged.extend(writers)
            return stats
        for w in writers:
            w.publish()
        return stats
    except BaseException:
        for w in writers:
            w.abort()
        raise


def with_owners(gpu: pa.Table, owners: Mapping[int, int]) -> pa.Table:
    """GPU ops without a process given to their device's only user (as the timeline's lanes
    have them), so that a trace per rank holds them."""
    if not gpu.column("process_id").null_count:
        return gpu
    pid, dev = np_col(gpu, "process_id", fill=-1).copy(), np_col(gpu, "device_id", fill=-1)
    for d, p in owners.items():
        pid[(pid < 0) & (dev == d)] = p
    at = gpu.column_names.index("process_id")
    return gpu.set_column(at, "process_id", pa.array(pid, pa.int64(), mask=pid < 0))


def step_spans_in(src: ReportTables) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N, start_ns, end_ns) of the report's ``ProfilerStep#N`` ranges, read a chunk at a time."""
    parts = [step_spans(chunk) for chunk in src.chunks("ops", ["op_name", "start_ns", "end_ns"], (None, None))]
    n, start, end = (np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, np.int64) for i in range(3))
    return n, start, end


def step_window_in(src: ReportTables, steps: tuple[int, int]) -> tuple[int, int]:
    """[start, end] of ProfilerStep#first..#last in a report's own time, read a chunk at a time.

    Raises:
        ExportError: the report has no such steps (naming those it has).
    """
    try:
        return step_window_of(step_spans_in(src), *steps)
    except ValueError as exc:
        raise ExportError(str(exc)) from exc


def _check_not_empty(found: Plan, start_ns: int | None, end_ns: int | None, processes: set[int] | None) -> None:
    """An empty trace is refused with what the report does hold."""
    if found.kept_rows:
        return
    if found.first_ns is None or found.last_ns is None:
        raise ExportError(NOTHING_TO_TRACE)
    if processes is not None and not processes & found.processes:
        have = ", ".join(str(p) for p in sorted(found.processes)) or "none"
        raise ExportError(
            f"no host process {', '.join(str(p) for p in sorted(processes))} in the report "
            f"(it has {have}); pass one of those to --process."
        )
    span = found.last_ns - found.first_ns

    def ms(ns: int | None, default: str) -> str:
        return default if ns is None else f"{(ns - (found.first_ns or 0)) / 1e6:,.3f} ms"

    raise ExportError(
        f"nothing to trace from {ms(start_ns, 'the start')} to {ms(end_ns, 'the end')}: the "
        f"report's events span 0 to {span / 1e6:,.3f} ms; choose a window inside it."
    )
