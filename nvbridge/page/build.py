"""Everything a report page shows, gathered once: the embedded data and the chart specs.

A dataset directory is read streamed (a row group at a time: summary, roofline, the step
timeline); advise reads it whole up to a bound (nvbridge/page/focus.py). A report database, or
a :class:`Report` already loaded, is held in memory and every part reads it there.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from nvbridge._version import __version__
from nvbridge.analysis import throughput
from nvbridge.analysis.diff import diff as diff_of
from nvbridge.analysis.diff import diff_reports
from nvbridge.analysis.report import Report, load
from nvbridge.analysis.summarize import Summary, summarize
from nvbridge.analysis.throughput import peaks_of
from nvbridge.dataset.report import is_partitioned, report_dirs
from nvbridge.page import charts, figures
from nvbridge.page.advice_json import advice_json, bounded, diff_json, step_records
from nvbridge.page.focus import ADVISE_OPS, Focus, advised, focus
from nvbridge.page.memory import memory_chart, memory_timeline
from nvbridge.page.timeline import step_timeline
from nvbridge.plot.roofline import streamed_points
from nvbridge.plot.window import extent

Source = str | os.PathLike[str] | Report


@dataclass(frozen=True)
class Page:
    """The page's embedded data (``data``: JSON values) and its charts (id -> Vega spec)."""

    data: dict[str, Any]
    charts: dict[str, dict[str, Any]] = field(default_factory=dict)
    side: dict[str, Any] = field(default_factory=dict)  # what the HTML shows but does not embed twice


def opened(source: Source) -> tuple[Source, Report]:
    """The source each part reads (a report database loaded once, in memory) and its report
    (the first report of a partitioned dataset), opened streamed where it is a dataset."""
    if isinstance(source, Report):
        return source, source
    path = Path(os.fspath(source))
    if path.is_dir():
        first = report_dirs(path)[0] if is_partitioned(path) else path
        return path, load(first, streamed=True)
    report = load(path)
    return report, report


def _reopened(path: str | os.PathLike[str]) -> Report:
    """The first report of the dataset at ``path`` opened again, streamed (readers of its own)."""
    first = report_dirs(path)[0] if is_partitioned(path) else path
    return load(first, streamed=True)


def capture(report: Report, summary: Summary, where: Focus, found: Any) -> dict[str, Any]:
    """The capture's facts: window, processes, steps, GPUs with their peaks."""
    threads = report.threads
    processes: dict[int, dict[str, Any]] = {}
    for row in threads.select([c for c in ("process_id", "process_name") if c in threads.column_names]).to_pylist():
        p = processes.setdefault(int(row["process_id"]), {"process_id": int(row["process_id"]), "threads": 0})
        p["threads"] += 1
        p["name"] = row.get("process_name")
    devices = []
    for d in report.devices.to_pylist():
        peaks = peaks_of(report.devices, [], int(d["device_id"]))
        devices.append({**d, "peaks": peaks.text() if peaks else None})
    n, _, _ = found.steps
    out: dict[str, Any] = figures.clean(
        {
            "source": report.meta.get("source"),
            "producer": f"{report.meta.get('producer') or ''} {report.meta.get('producer_version') or ''}".strip(),
            "first_ns": found.first_ns,
            "last_ns": found.last_ns,
            "span_ns": (found.last_ns or 0) - (found.first_ns or 0),
            "processes": list(processes.values()),
            "rank": report.rank,
            "steps": sorted(set(n.tolist())),
            "devices": devices,
            "focus": {"start_ns": where.start_ns, "end_ns": where.end_ns, "step": where.step, "label": where.label},
            "peaks": summary.peaks.text() if summary.peaks else None,
            "ops": summary.ops,
            "open_at_end": summary.open_at_end,
        }
    )
    return out


def collect(
    source: Source,
    *,
    step: int | None = None,
    compare: Source | None = None,
    advise_ops: int = ADVISE_OPS,
    peak_tflops: float | None = None,
    peak_gbps: float | None = None,
) -> Page:
    """The page of ``source`` (a report database, a dataset directory, a partitioned dataset,
    or a loaded :class:`Report`); ``compare``: a second run, for diff's table and its bars.

    Raises:
        NvbridgeError: an input that cannot be read; OptionError: no such step.
    """
    src, report = opened(source)
    # summary's pass over the ops and advise run beside the step timeline (their reads and
    # Arrow's and NumPy's kernels release the GIL): see docs/report.md for the times
    with ThreadPoolExecutor(2) as pool:
        pending = pool.submit(
            summarize,
            src,
            group_by_input_shape=True,
            group_by_module=True,
            peak_tflops=peak_tflops,
            peak_gbps=peak_gbps,
        )
        found = extent(report)
        where = focus(found, step)
        # a dataset's Parquet readers are not shared between threads: advise opens its own
        own = report if isinstance(src, Report) else _reopened(src)
        advising = pool.submit(advised, src, own, found, where, advise_ops, (peak_tflops, peak_gbps))
        timeline = step_timeline(report, found, where.start_ns, where.end_ns)
        roof = _roofline(report, peak_tflops, peak_gbps)
        advice = advising.result()
        summary = pending.result()
    full = [advice_json(a) for a in advice.results]
    bars = step_records(full)
    results, cuts = zip(*(bounded(a) for a in full)) if full else ((), ())
    tables = figures.op_tables(summary)
    name_rows = tables["name"]["rows"]
    tables["name"]["rows"] = None  # the same rows as summary's: the page reads them there
    data: dict[str, Any] = {
        "nvbridge": __version__,
        "capture": capture(report, summary, where, found),
        "summary": figures.summary_json(summary, name_rows),
        "tables": tables,
        "modules": figures.module_tree(summary),
        "roofline": roof,
        "advise": list(results),
        "advise_cut": list(cuts),
        "advise_window": advice.why,
        "header_lines": throughput.header_lines(summary.peaks, list(summary.flops), 100_000),
        "rank_steps": _rank_steps(summary),
        "memory": memory_timeline(report),  # None: the report recorded no allocator events
        "diff": None,
    }
    side = {"step_bars": bars, "compare_bars": []}
    page_charts = _charts(data, side, timeline, where)
    if compare is not None:
        _add_compare(data, side, page_charts, src, compare, advise_ops, (peak_tflops, peak_gbps))
    return Page(data, page_charts, side)


def _roofline(report: Report, peak_tflops: float | None, peak_gbps: float | None) -> dict[str, Any]:
    # no op with a known cost (the statistics say so without reading): no roofline to draw
    if "flops" not in report.column_names("ops") or report.all_null("ops", "flops"):
        return figures.roofline(pa.table({}), None)
    points, peaks = streamed_points(report, peak_tflops, peak_gbps)
    return figures.roofline(points, peaks)


def _rank_steps(summary: Summary) -> list[dict[str, Any]]:
    """Each rank's step times (ProfilerStep#N), for the cross-rank view."""
    return [
        {"rank": r.label, "step": int(n), "ms": ns / 1e6} for r in summary.ranks for n, ns in sorted(r.steps.items())
    ]


def _charts(
    data: dict[str, Any], side: dict[str, Any], timeline: dict[str, Any], where: Focus
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if side["step_bars"]:
        out["chart-steps"] = charts.step_bars(side["step_bars"], "Each step's time by what the GPU did (ms)")
    if data["modules"]:
        out["chart-modules"] = charts.icicle(data["modules"], "GPU time by module (self CUDA time, children nested)")
    if data["roofline"]["points"]:
        out["chart-roofline"] = charts.roofline(data["roofline"], "Roofline: ops by arithmetic intensity")
    if timeline["bars"]:
        out["chart-timeline"] = charts.timeline(timeline, f"Timeline of {where.label}")
    if data["rank_steps"]:
        out["chart-ranks"] = charts.rank_steps(data["rank_steps"], "Step time per rank (ms)")
    if data["memory"]:
        out["chart-memory"] = memory_chart(data["memory"])
    return out


def _add_compare(
    data: dict[str, Any],
    side: dict[str, Any],
    out: dict[str, dict[str, Any]],
    src: Source,
    compare: Source,
    advise_ops: int,
    peaks: tuple[float | None, float | None],
) -> None:
    """diff's comparison of the two runs and both runs' per-step bars."""
    other, other_report = opened(compare)
    if isinstance(src, Report) or isinstance(other, Report):
        a = src if isinstance(src, Report) else load(src)
        b = other if isinstance(other, Report) else load(other)
        result = diff_reports(a, b)
    else:
        result = diff_of(src, other)
    data["diff"] = diff_json(result)
    found = extent(other_report)
    theirs = advised(other, other_report, found, focus(found), advise_ops, peaks)
    side["compare_bars"] = step_records([advice_json(a) for a in theirs.results])
    width = (charts.WIDTH - 60) // 2
    if side["step_bars"] and side["compare_bars"]:
        sides = []
        for records, title in (
            (side["step_bars"], f"A: {result.a_source}"),
            (side["compare_bars"], f"B: {result.b_source}"),
        ):
            spec = charts.step_bars(records, title, width)
            config = spec.pop("config")
            del spec["$schema"]
            sides.append(spec)
        out["chart-compare"] = {"$schema": charts.SCHEMA, "hconcat": sides, "config": config}
