"""``nvbridge trace`` of a dataset of many reports: which ranks and steps, one file or one per
rank or per step (:func:`export_many`); the file itself is :func:`nvbridge.export.trace_many.write_many`'s.

``--split step`` writes ``NAME.step<N>.json.gz`` per step: a step of every rank is a few seconds
of trace, where a whole run of many ranks is more than a browser's memory holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nvbridge.columns import np_col
from nvbridge.dataset.process_ranks import holds_ranks
from nvbridge.dataset.timeline import step_numbers
from nvbridge.errors import ExportError
from nvbridge.export.chrome import TraceStats, TraceWriter
from nvbridge.export.trace import NOTHING_TO_TRACE, check_destination, check_suffix, step_spans_in
from nvbridge.export.trace_many import Part, open_parts, rank_parts, write_many
from nvbridge.export.trace_ranks import rank_path
from nvbridge.export.trace_source import plan

__all__ = ["AUTO_STEP_EVENTS", "MANY_SPLITS", "ManyTraces", "export_many", "holds_ranks", "step_path", "write_many"]

MANY_SPLITS = ("auto", "none", "rank", "step")
# A whole run's events past which ``auto`` writes a file per step: at about 200 bytes of JSON an
# event, 5M events are 1 GB, where browsers' trace viewers fail (Perfetto's UI: 1-2 GB).
AUTO_STEP_EVENTS = 5_000_000


@dataclass
class ManyTraces:
    """What :func:`export_many` wrote, and the ranks it left out of a file (no such steps)."""

    files: list[TraceStats] = field(default_factory=list)
    left_out: dict[str, list[int]] = field(default_factory=dict)  # file name -> ranks
    auto_step: bool = False  # split per step because one file would be too large


def step_path(dest: Path, step: int) -> Path:
    """``NAME.json.gz`` -> ``NAME.step<N>.json.gz`` (``.json`` likewise)."""
    suffix = ".json.gz" if dest.name.endswith(".json.gz") else ".json"
    return dest.with_name(f"{dest.name[: -len(suffix)]}.step{step}{suffix}")


def set_windows(
    parts: list[Part], steps: tuple[int, int] | None, start_ns: int | None, end_ns: int | None
) -> list[int]:
    """Each part's window in its own time (steps: its own ProfilerSteps, of a report of several
    ranks each process's own; start/end: aligned times from the first event) and plan; the
    ranks that hold none of the steps (left out)."""
    left = []
    for part in parts:
        lo, hi = None, None
        part.process_windows = None
        keep = None if part.only is None else set(part.only)
        if steps is not None and part.several and part.of is not None:
            windows = process_step_windows(part, steps)
            left += sorted({r for p, r in part.of.of.items() if p not in windows and (keep is None or p in keep)})
            if not windows:
                part.found = None
                continue
            part.process_windows = windows
            keep = set(windows)
            lo, hi = min(w[0] for w in windows.values()), max(w[1] for w in windows.values())
        elif steps is not None:
            n, s, e = step_spans_in(part.source)
            sel = (n >= steps[0]) & (n <= steps[1])
            if not sel.any():
                left.append(part.rank)
                part.found = None
                continue
            lo, hi = int(s[sel].min()), int(e[sel].max())
        elif start_ns is not None or end_ns is not None:
            lo = None if start_ns is None else start_ns - part.offset_ns
            hi = None if end_ns is None else end_ns - part.offset_ns
        part.window, part.steps = (lo, hi), steps
        part.found = plan(part.source, lo, hi, keep)
    return left


def process_step_windows(part: Part, steps: tuple[int, int]) -> dict[int, tuple[int, int]]:
    """Per rank process of a report of several ranks (those kept), the span of its own
    ``ProfilerStep#first..#last`` ranges: each rank is cut on its own timeline."""
    pids, starts, ends = [], [], []
    for chunk in part.source.chunks("ops", ["op_name", "start_ns", "end_ns", "process_id"], (None, None)):
        n = step_numbers(chunk.column("op_name"))
        sel = (n >= steps[0]) & (n <= steps[1])
        pids.append(np_col(chunk, "process_id", fill=-1)[sel])
        starts.append(np_col(chunk, "start_ns")[sel])
        ends.append(np_col(chunk, "end_ns")[sel])
    if not pids:
        return {}
    pid, start, end = np.concatenate(pids), np.concatenate(starts), np.concatenate(ends)
    ranks = part.of.of if part.of is not None else {}
    return {
        int(p): (int(start[pid == p].min()), int(end[pid == p].max()))
        for p in np.unique(pid).tolist()
        if p in ranks and (part.only is None or p in part.only)
    }


def first_aligned_ns(parts: list[Part]) -> int:
    """The earliest event of all the reports on the aligned clock (what --start/--end count from)."""
    firsts = [(plan(p.source, None, None, None).first_ns, p.offset_ns) for p in parts]
    return min((f + o for f, o in firsts if f is not None), default=0)


def export_many(
    root: Path,
    dest: Path,
    *,
    split: str = "auto",
    ranks: set[int] | None = None,
    steps: tuple[int, int] | None = None,
    start: tuple[int | None, int | None] = (None, None),
    force: bool = False,
) -> ManyTraces:
    """Write the trace(s) of a dataset of many reports.

    Args:
        split: ``none``: one file; ``auto``: one file, or one per step where the whole run holds
            more than :data:`AUTO_STEP_EVENTS` events and has steps; ``rank``: ``NAME.rank<K>`` per rank; ``step``:
            ``NAME.step<N>`` per ProfilerStep (those of ``steps`` where given).
        ranks: keep these ranks; steps: ``(first, last)`` ProfilerSteps, each rank's own.
        start: ``(start, end)`` ns from the first event on the aligned clock (not with steps).

    Raises:
        ExportError: an unknown rank, no such steps on any rank, nothing to trace, a file that
            exists (without ``force``); no file is left (a split's files are published together).
    """
    if split not in MANY_SPLITS:
        raise ExportError(f"split {split!r}: pass one of {', '.join(MANY_SPLITS)}.")
    check_suffix(dest)
    parts, world_size = open_parts(root, ranks)
    if start != (None, None):
        origin = first_aligned_ns(parts)
        start = tuple(None if t is None else origin + t for t in start)  # type: ignore[assignment]
    jobs: list[tuple[Path, list[Part], tuple[int, int] | None]]
    auto_step = split == "auto" and steps is None and start == (None, None) and too_large(parts) and _has_steps(parts)
    if auto_step:
        split = "step"
    if split == "rank":
        jobs = [(rank_path(dest, p.rank), [p], steps) for p in rank_parts(parts)]
    elif split == "step":
        jobs = [(step_path(dest, n), parts, (n, n)) for n in _steps_of(parts, steps)]
    else:
        jobs = [(dest, parts, steps)]
    for path, _, _ in jobs:
        check_destination(path, force)
    out = ManyTraces(auto_step=auto_step)
    written: list[TraceWriter] = []
    try:
        for path, group, window in jobs:
            left = set_windows(group, window, *start)
            if not any(p.found is not None and p.found.kept_rows for p in group):
                if window is not None and len(left) == len(group):
                    raise ExportError(f"no rank has ProfilerStep#{window[0]}..#{window[1]}; choose steps they ran.")
                raise ExportError(NOTHING_TO_TRACE if start == (None, None) else "nothing to trace in that window.")
            written.append(write_many(group, root, path, world_size))
            if left:
                out.left_out[path.name] = left
        for writer in written:  # every file, or none
            writer.publish()
            out.files.append(writer.stats)
    except BaseException as exc:
        for writer in written:
            writer.abort()
        if isinstance(exc, OSError):  # disk full, permissions: nothing is left behind
            raise ExportError(
                f"cannot write {dest} ({exc.strerror or exc}); free some space or write it elsewhere."
            ) from exc
        raise
    return out


def too_large(parts: list[Part]) -> bool:
    """A whole trace of these reports holds more events than a browser loads (:data:`AUTO_STEP_EVENTS`)."""
    return sum(p.source.rows(t) for p in parts for t in ("ops", "api_calls", "gpu_ops")) > AUTO_STEP_EVENTS


def _has_steps(parts: list[Part]) -> bool:
    return any(len(step_spans_in(p.source)[0]) for p in parts)


def _steps_of(parts: list[Part], steps: tuple[int, int] | None) -> list[int]:
    """The ProfilerStep numbers any part ran (within ``steps``)."""
    seen = np.unique(np.concatenate([step_spans_in(p.source)[0] for p in parts] or [np.zeros(0, np.int64)]))
    if steps is not None:
        seen = seen[(seen >= steps[0]) & (seen <= steps[1])]
    if not len(seen):
        raise ExportError("--split step: the ranks have no ProfilerStep#N ranges (in that range); split by rank.")
    return [int(n) for n in seen]
