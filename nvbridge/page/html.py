"""The page's HTML: one self-contained document (or a fragment for a notebook's output).

Everything is inline: the styles, the Vega bundle (once), the page's script, the embedded data
(``<script type="application/json" id="nvbridge-data">``, which tests read back) and the chart
specs (``id="nvbridge-charts"``). Nothing is fetched: the page opens from ``file://``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from html import escape
from importlib import resources
from typing import Any

from nvbridge.output.owned import HTML_MARK
from nvbridge.page import tables
from nvbridge.page.build import Page
from nvbridge.page.bundle import safe_inline, script

SHOWN_FINDINGS = 15  # as advise --limit's default; the rest under a disclosure
# (id, heading): the sections in page order; each is present whether or not it has data
SECTIONS = (
    ("capture", "Capture"),
    ("steps", "Steps"),
    ("ops", "Ops"),
    ("modules", "GPU time by module"),
    ("roofline", "Roofline"),
    ("findings", "Findings"),
    ("timeline", "Timeline of one step"),
    ("ranks", "Across ranks"),
    ("memory", "Memory"),
)


def _asset(name: str) -> str:
    return resources.files("nvbridge.page").joinpath("assets").joinpath(name).read_text("utf-8")


def _json(value: Any) -> str:
    return safe_inline(json.dumps(value, separators=(",", ":"), allow_nan=False))


def _chart(page: Page, chart: str, missing: str) -> str:
    if chart in page.charts:
        return f'<div class="chart" id="{chart}" role="figure"></div>'
    return f'<p class="note">{escape(missing)}</p>'


def _capture(page: Page) -> str:
    d = page.data
    cap = d["capture"]
    facts = [
        ("Report", str(cap["source"])),
        ("Recorded by", cap["producer"] or "unknown"),
        ("Capture", tables.t(cap["span_ns"])),
        ("Ops (NVTX ranges)", f"{cap['ops']:,}"),
        (
            "Steps",
            f"{len(cap['steps'])} (ProfilerStep#{cap['steps'][0]}-{cap['steps'][-1]})"
            if cap["steps"]
            else "none recorded",
        ),
        ("Self CPU time total", tables.t(d["tables"]["name"]["self_cpu_total_ns"])),
        ("Self CUDA time total", tables.t(d["tables"]["name"]["self_gpu_total_ns"])),
    ]
    dl = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    lines = "".join(f"<li>{escape(line)}</li>" for line in d.get("header_lines", []))
    open_note = (
        f'<p class="note">{cap["open_at_end"]:,} ranges were still open at the capture end and are cut there.</p>'
        if cap["open_at_end"]
        else ""
    )
    return (
        f'<dl class="facts">{dl}</dl>{open_note}<ul class="header-lines">{lines}</ul>'
        + tables.gpus(d)
        + tables.processes(d)
    )


def _steps(page: Page) -> str:
    d = page.data
    note = f'<p class="note">{escape(d["advise_window"])}</p>' if d["advise_window"] else ""
    if not page.side["step_bars"]:
        return (
            note
            + '<p class="note">No ProfilerStep#N ranges with GPU work: record with nvbridge.emit_nvtx(...).step().</p>'
        )
    return (
        note
        + _chart(page, "chart-steps", "")
        + "<details><summary>The numbers behind the bars</summary>"
        + tables.step_numbers(page.side["step_bars"], "Per step and lane, ms by category")
        + "</details>"
    )


def _ops() -> str:
    return (
        '<div class="controls" id="op-controls">'
        '<label>Group by <select id="op-group"><option value="name">name</option>'
        '<option value="shape">name and input shapes</option><option value="module">name and module</option>'
        "</select></label> "
        '<label>Filter <input id="op-filter" type="search" placeholder="regular expression on the name"></label> '
        '<span id="op-count" aria-live="polite"></span></div>'
        '<div class="scroll"><table id="op-table" class="ops"><caption>Ops: torch\'s key_averages columns and '
        "nvbridge's FLOPs (click a column's heading to sort)</caption><thead></thead><tbody></tbody></table></div>"
        "<noscript><p>The op table is drawn by the page's script.</p></noscript>"
    )


def _findings(page: Page) -> str:
    out = []
    for advice in page.data["advise"]:
        dom = advice.get("dominant")
        if dom and dom.get("of_ns"):
            out.append(f'<p class="headline">{escape(_dominant_line(dom))}</p>')
        if advice.get("startup_ns"):
            out.append(f"<p>Start-up: {tables.t(advice['startup_ns'])} in CUDA calls before the first GPU op.</p>")
        if advice["findings"]:
            out.append(tables.findings(advice, 0, SHOWN_FINDINGS))
            if len(advice["findings"]) > SHOWN_FINDINGS:
                more = len(advice["findings"]) - SHOWN_FINDINGS
                out.append(f"<details><summary>{more} more findings</summary>")
                out.append(tables.findings(advice, SHOWN_FINDINGS, None) + "</details>")
        else:
            out.append(f'<p class="note">No findings for {escape(str(advice["source"]))}.</p>')
    if page.data["advise_window"]:
        out.insert(0, f'<p class="note">{escape(page.data["advise_window"])}</p>')
    return "".join(out)


def _dominant_line(dom: dict[str, Any]) -> str:
    if dom["category"] == "compute":
        return f"Compute dominates: kernels run {100 * dom['share']:.1f}% of the GPU timeline."
    return f"Dominant cost: {dom['category']}, {100 * dom['share']:.1f}% of the GPU timeline."


def _ranks(page: Page) -> str:
    body = tables.ranks(page.data)
    if not body:
        return '<p class="note">One rank: nothing to compare across ranks.</p>'
    return _chart(page, "chart-ranks", "No steps recorded on the ranks.") + body


def _memory(page: Page) -> str:
    if page.data["memory"] is None:
        return (
            '<p class="note">Not recorded: no dataset nvbridge writes holds memory events yet '
            "(nvbridge/page/memory.py is the hook that will draw them).</p>"
        )
    return _chart(page, "chart-memory", "")


def _compare(page: Page) -> str:
    d = page.data["diff"]
    return _chart(page, "chart-compare", "Neither run recorded steps with GPU work.") + tables.diff_tables(d)


def _timeline(page: Page) -> str:
    label = escape(page.data["capture"]["focus"]["label"])
    return (
        f'<p class="note">{label}; bars merged to the pixel, GPU idle time shaded by its share of each column.</p>'
        + _chart(page, "chart-timeline", "Nothing was recorded in this window.")
    )


BODIES: dict[str, Callable[[Page], str]] = {
    "capture": _capture,
    "steps": _steps,
    "ops": lambda page: _ops(),
    "modules": lambda page: _chart(
        page, "chart-modules", "No GPU time was launched inside a module (nn.Module ranges)."
    ),
    "roofline": lambda page: _chart(
        page,
        "chart-roofline",
        "No op has both a known cost (record shapes: emit_nvtx(record_shapes=True)) and GPU time.",
    ),
    "findings": _findings,
    "timeline": _timeline,
    "ranks": _ranks,
    "memory": _memory,
    "compare": _compare,
}


def sections(page: Page, only: tuple[str, ...] | None = None) -> str:
    """The sections' HTML in page order (``only``: these), the comparison where there is one."""
    keys = [k for k, _ in SECTIONS] + (["compare"] if page.data.get("diff") is not None else [])
    titles = dict(SECTIONS) | {"compare": "Compared with B"}
    return "".join(
        f'<section id="{key}"><h2>{escape(titles[key])}</h2>{BODIES[key](page)}</section>'
        for key in keys
        if only is None or key in only
    )


def _scripts(page: Page) -> str:
    return (
        f'<script type="application/json" id="nvbridge-data">{_json(page.data)}</script>'
        f'<script type="application/json" id="nvbridge-charts">{_json(page.charts)}</script>'
        # the bundle runs once per document (notebook outputs share one), in a function of its
        # own so its top-level names never meet another copy's
        f"<script>if (!window.vegaEmbed) (function () {{\n{script()}\n}}).call(window);</script>"
        f"<script>{_asset('page.js')}</script>"
    )


def document(page: Page) -> str:
    """The whole page."""
    source = escape(str(page.data["capture"]["source"]))
    nav = "".join(f'<a href="#{key}">{escape(title)}</a>' for key, title in SECTIONS)
    if page.data["diff"] is not None:
        nav += '<a href="#compare">Compared with B</a>'
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">{HTML_MARK}'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>nvbridge report: {source}</title><style>{_asset('page.css')}</style></head>"
        f'<body><main class="nvbridge-page"><header><h1>nvbridge report: {source}</h1>'
        f"<p>Written by nvbridge {escape(page.data['nvbridge'])}.</p><nav>{nav}</nav></header>"
        f"{sections(page)}{_scripts(page)}</main></body></html>"
    )


def fragment(page: Page, only: tuple[str, ...] | None = None) -> str:
    """The page's sections (``only``: these) for a notebook's output cell (Jupyter, VS Code,
    marimo): scoped styles, the same scripts; charts and the op table find their elements
    inside it, so several outputs share one document."""
    return f'<div class="nvbridge-page"><style>{_asset("page.css")}</style>{sections(page, only)}{_scripts(page)}</div>'
