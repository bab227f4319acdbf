"""Rich display in notebooks: the ``_repr_html_`` of Report, Summary, Advice and Diff.

Jupyter, VS Code and marimo show an object's ``_repr_html_`` in its output cell. Each is the
part of the report page that object holds (a Report: the whole page), as a fragment with the
page's styles, the Vega bundle and its own data, so its charts render inline, offline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nvbridge.output import rich
from nvbridge.page import charts, figures
from nvbridge.page.advice_json import advice_json, bounded, diff_json, step_records
from nvbridge.page.build import Page, collect
from nvbridge.page.html import fragment

if TYPE_CHECKING:
    from nvbridge.analysis.advise import Advice
    from nvbridge.analysis.diff import Diff
    from nvbridge.analysis.report import Report
    from nvbridge.analysis.summarize import Summary


def report_html(report: Report) -> str:
    """The whole report page of a loaded report."""
    return fragment(collect(report))


def summary_html(summary: Summary) -> str:
    """The op table (grouped by name, shapes or module), GPU time by module and the FLOPs lines."""
    tables = figures.op_tables(summary)
    rows = tables["name"]["rows"]
    tables["name"]["rows"] = None
    modules = figures.module_tree(summary)
    data: dict[str, Any] = {
        "summary": figures.summary_json(summary, rows),
        "tables": tables,
        "modules": modules,
    }
    page_charts = {"chart-modules": charts.icicle(modules, "GPU time by module")} if modules else {}
    return fragment(Page(data, page_charts), ("ops", "modules"))


def advice_html(advice: Advice) -> str:
    """advise's findings for one report and its per-step bars."""
    full = advice_json(advice)
    bars = step_records([full])
    shown, cut = bounded(full)
    data = {"advise": [shown], "advise_cut": [cut], "advise_window": None}
    page_charts = {"chart-steps": charts.step_bars(bars, "Each step's time by what the GPU did (ms)")} if bars else {}
    return fragment(Page(data, page_charts, {"step_bars": bars}), ("steps", "findings"))


def diff_html(d: Diff) -> str:
    """diff's tables and each step's time in A and B."""
    records = [
        {"step": s.step, "run": run, "ms": ns / 1e6}
        for s in d.steps
        for run, ns in (("A", s.a_ns), ("B", s.b_ns))
        if ns is not None
    ]
    page_charts: dict[str, dict[str, Any]] = {}
    if records:
        spec = charts.rank_steps(
            [{"rank": r["run"], "step": r["step"], "ms": r["ms"]} for r in records], "Step time, A and B (ms)"
        )
        page_charts["chart-compare"] = spec
    return fragment(Page({"diff": diff_json(d)}, page_charts), ("compare",))


# the analysis' _repr_html_ asks nvbridge/output/rich.py, which cannot import this layer above it
rich.register("report", report_html)
rich.register("summary", summary_html)
rich.register("advice", advice_html)
rich.register("diff", diff_html)
