"""Which step the page looks at closely, and what ``advise`` reads for the page.

The step timeline shows one step: the one asked for, else the median step (the step number
whose duration, first start to last end over every process that ran it, is the median: a
typical step, neither the slow first one nor a short last one), else the whole capture.

``advise`` reads a report whole (load, then every detector): about 11 s for 2M ops on these
machines, 3 s for 500k. Up to ``max_ops`` ops (default :data:`ADVISE_OPS`) the page holds the findings of
the whole report, as ``nvbridge advise --json`` gives them; past it, the findings of the focus
window only, read a row group at a time with the row groups outside it skipped, and the page
says so. Every other section covers the whole report, read streamed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from nvbridge.analysis.advise import Advice, advise, advise_report
from nvbridge.analysis.report import Report, load
from nvbridge.columns import np_col
from nvbridge.dataset.report import is_partitioned, report_dirs
from nvbridge.dataset.schema import TABLES
from nvbridge.dataset.timeline import step_window_of
from nvbridge.errors import OptionError
from nvbridge.plot.window import Extent

ADVISE_OPS = 500_000  # ops advise reads whole for the page; past it, the focus window only
WINDOWED = ("ops", "api_calls", "gpu_ops", "syncs")  # the tables cut to the focus window


@dataclass(frozen=True, slots=True)
class Focus:
    """The window the step timeline shows: ``step`` (None: the whole capture or a slice of it)."""

    start_ns: int
    end_ns: int
    step: int | None
    label: str


def median_step(steps: tuple[np.ndarray, np.ndarray, np.ndarray]) -> int | None:
    """The step number of median duration (the lower median; ties: the lower number)."""
    n, start, end = steps
    if not len(n):
        return None
    numbers = np.unique(n)
    spans = np.array([int(end[n == k].max() - start[n == k].min()) for k in numbers.tolist()], np.int64)
    order = np.lexsort((numbers, spans))
    return int(numbers[order[(len(order) - 1) // 2]])


def focus(found: Extent, step: int | None = None) -> Focus:
    """The focus window of a report (its extent: ``nvbridge.plot.window.extent``).

    Raises:
        OptionError: ``step`` is not a step of the report, or the report holds no rows.
    """
    if found.first_ns is None or found.last_ns is None:
        raise OptionError("the report has no ranges, API calls or GPU ops; profile with NVTX or CUDA tracing.")
    chosen = median_step(found.steps) if step is None else step
    if chosen is None:
        return Focus(found.first_ns, found.last_ns, None, "the whole capture (the report has no ProfilerStep#N ranges)")
    try:
        lo, hi = step_window_of(found.steps, chosen, chosen)
    except ValueError as exc:
        raise OptionError(str(exc)) from exc
    how = "asked for" if step is not None else "the median step by duration"
    return Focus(lo, hi, chosen, f"ProfilerStep#{chosen} ({how})")


def slice_of(found: Extent, share: float) -> tuple[int, int]:
    """The middle ``share`` of the capture: where a report without steps is advised when it is
    too large to read whole (rows assumed spread evenly in time)."""
    first, last = found.first_ns or 0, found.last_ns or 0
    span = last - first
    width = max(int(span * min(share, 1.0)), 1)
    lo = first + (span - width) // 2
    return lo, lo + width


def windowed(report: Report, start_ns: int, end_ns: int) -> Report:
    """The report cut to the rows overlapping [start_ns, end_ns] (marks inside it; threads and
    devices whole), read a row group at a time with the row groups outside it skipped."""
    tables: dict[str, pa.Table] = {}
    for name in TABLES:
        columns = report.column_names(name)
        if name in WINDOWED:
            parts = []
            for chunk in report.chunks(name, columns, (start_ns, end_ns)):
                keep = (np_col(chunk, "end_ns") >= start_ns) & (np_col(chunk, "start_ns") <= end_ns)
                parts.append(chunk.filter(pa.array(keep)))
            table = pa.concat_tables(parts, promote_options="permissive") if parts else None
            if table is not None and name in KEYS:
                table = table.sort_by(KEYS[name])  # in key order, as load reads them
        elif name == "marks":
            table = pa.concat_tables(list(report.chunks(name, columns)), promote_options="permissive")
            ts = np_col(table, "ts_ns") if table.num_rows else np.zeros(0, np.int64)
            table = table.filter(pa.array((ts >= start_ns) & (ts <= end_ns)))
        else:
            table = report.table(name)
        tables[name] = table if table is not None else report.table(name).slice(0, 0)
    return Report(dict(report.meta), renumbered(tables))


# Each table's key, and the columns that point at a key: advise takes an id for the row it names
# (op_id 0..n-1 is row n), so a cut table is numbered again from 0 and its references with it.
KEYS = {"ops": "op_id", "api_calls": "api_call_id", "gpu_ops": "gpu_op_id"}
REFERENCES = {
    "ops": {"parent_id": "ops", "fwd_op_id": "ops"},
    "gpu_ops": {"op_id": "ops", "time_op_id": "ops", "api_call_id": "api_calls"},
    "api_calls": {"op_id": "ops"},
    "syncs": {"api_call_id": "api_calls"},
}


def renumbered(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """Cut tables numbered 0..n-1 again (rows already in key order), every reference mapped to
    the new numbers; a reference to a row outside the cut becomes null."""
    old = {t: np_col(tables[t], k) for t, k in KEYS.items()}
    out = dict(tables)
    for name, refs in REFERENCES.items():
        table = out[name]
        for column, target in refs.items():
            if column not in table.column_names:
                continue
            ids = np_col(table, column, fill=-1)
            at = np.searchsorted(old[target], ids)
            hit = (ids >= 0) & (at < len(old[target]))
            hit[hit] = old[target][at[hit]] == ids[hit]
            values = pa.array(np.where(hit, at, 0), pa.int64(), mask=~hit)
            table = table.set_column(table.column_names.index(column), column, values)
        out[name] = table
    for name, key in KEYS.items():
        table = out[name]
        out[name] = table.set_column(
            table.column_names.index(key), key, pa.array(np.arange(table.num_rows), pa.int64())
        )
    return out


@dataclass(frozen=True, slots=True)
class Advised:
    """advise's results for the page, and the window they cover where not the whole report."""

    results: tuple[Advice, ...]
    window: tuple[int, int] | None = None  # (start_ns, end_ns) of a report too large to read whole
    why: str | None = None


def advised(
    source: str | os.PathLike[str] | Report,
    report: Report,
    found: Extent,
    where: Focus,
    max_ops: int = ADVISE_OPS,
    peaks: tuple[float | None, float | None] = (None, None),
) -> Advised:
    """advise of ``source`` (``report`` is it, or its first report, opened streamed): whole up
    to ``max_ops`` ops (-1: always), else of the focus window (see the module docstring)."""
    if isinstance(source, Report):
        dirs: list[Report] = [source]
    elif is_partitioned(source):
        dirs = [load(d, streamed=True) for d in report_dirs(source)]
    else:
        dirs = [report]
    ops = sum(r.rows("ops") for r in dirs)
    if max_ops < 0 or ops <= max_ops:
        if isinstance(source, Report):
            return Advised((advise_report(source, 0.0, None, *peaks),))
        return Advised(tuple(advise(source, 0.0, *peaks)))
    lo, hi = where.start_ns, where.end_ns
    share = max_ops / max(ops, 1)
    covered = where.label
    if where.step is None:
        lo, hi = slice_of(found, share)
        covered = "a slice"
    else:
        # a step that spans more of the capture than max_ops ops fill (its number repeats, or one
        # step is most of the capture): the middle of it, so advise's read stays bounded
        width = int(((found.last_ns or 0) - (found.first_ns or 0)) * share)
        if hi - lo > width:
            lo, hi = lo + (hi - lo - width) // 2, lo + (hi - lo - width) // 2 + max(width, 1)
            covered = f"the middle of {where.label}"
    why = (
        f"the report has {ops:,} ops, more than the {max_ops:,} the page reads whole for advise "
        f"(--advise-ops); the findings and per-step bars cover {covered}"
        f" only: {(lo - (found.first_ns or 0)) / 1e6:,.3f} ms to {(hi - (found.first_ns or 0)) / 1e6:,.3f} ms. "
        "nvbridge advise reads all of it."
    )
    results = tuple(advise_report(windowed(r, lo, hi), 0.0, None, *peaks) for r in dirs)
    return Advised(results, (lo, hi), why)
