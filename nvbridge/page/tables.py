"""The page's static tables, as HTML ``<table>`` elements written from the embedded data.

Real tables (with ``<caption>``, ``<th scope>``) so screen readers and copy-and-paste work;
times are formatted as ``nvbridge summary`` prints them (1.234ms). The op table is the one
table drawn in the browser (nvbridge/page/assets/page.js), since it sorts, filters and groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from nvbridge.analysis.op_table import format_time


def t(ns: float | None) -> str:
    """ns as summary prints times (1.234ms); '-' for none."""
    return "-" if ns is None else format_time(ns / 1e3)


def nbytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def table(caption: str, head: Sequence[str], rows: Sequence[Sequence[str]], css: str = "") -> str:
    """One table; cells are escaped here (pass text, not HTML). Numeric-looking cells align right."""
    cls = f' class="{css}"' if css else ""
    th = "".join(f'<th scope="col">{escape(h)}</th>' for h in head)
    body = []
    for r in rows:
        cells = []
        for i, c in enumerate(r):
            num = ' class="num"' if i and _numeric(c) else ""
            tag = 'th scope="row"' if i == 0 else "td"
            cells.append(f"<{tag}{num}>{escape(c)}</{tag.split()[0]}>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f"<table{cls}><caption>{escape(caption)}</caption><thead><tr>{th}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _numeric(text: str) -> bool:
    return bool(text) and (text[0].isdigit() or text[0] in "+-") and text != "-"


def gpus(data: dict[str, Any]) -> str:
    """The GPU header of summary (busy, span, idle, start-up, kernels, copies) with the peaks."""
    peaks = {d["device_id"]: d.get("peaks") for d in data["capture"]["devices"]}
    rows = [
        [
            f"GPU {g['device_id']}" + (f" ({g['report']})" if g.get("several") and g.get("report") else ""),
            g.get("name") or "unnamed",
            t(g["busy_ns"]),
            t(g["span_ns"]),
            pct(g["idle_share"]),
            t(g["startup_ns"]),
            f"{g['kernels']:,}",
            f"{g['gpu_ops']:,}",
            ", ".join(f"{k} {nbytes(v)}" for k, v in g["memcpy_bytes"].items()) or "none",
            peaks.get(g["device_id"]) or "unknown",
        ]
        for g in data["summary"]["gpu"]
    ]
    head = [
        "GPU",
        "name",
        "busy",
        "GPU timeline",
        "idle",
        "start-up before it",
        "kernels",
        "GPU ops",
        "memcpy",
        "peaks",
    ]
    return table("GPUs (summary's header)", head, rows)


def processes(data: dict[str, Any]) -> str:
    cap = data["capture"]
    ranks = {r["process_id"]: r for r in (data["summary"]["ranks"] or {}).get("ranks", [])}
    rows = [
        [
            str(p["process_id"]),
            p.get("name") or "",
            str(p["threads"]),
            ranks[p["process_id"]]["rank"]
            if p["process_id"] in ranks
            else (str(cap["rank"]) if cap["rank"] is not None else "-"),
        ]
        for p in cap["processes"]
    ]
    return table("Processes", ["pid", "name", "threads", "rank"], rows)


def ranks(data: dict[str, Any]) -> str:
    """summary's per-rank lines and its per-step spread, where there are several ranks."""
    block = data["summary"]["ranks"]
    if not block:
        return ""
    rows = [
        [
            r["rank"],
            str(r["process_id"] if r["process_id"] is not None else r["source"]),
            f"{r['ops']:,}",
            f"{r['kernels']:,}",
            t(r["self_cpu_ns"]) if r["process_id"] is not None else "-",
            ", ".join(f"GPU {d} {t(ns)}" for d, ns in r["gpu_busy_ns"].items()) or "no GPU ops",
        ]
        for r in block["ranks"]
    ]
    out = table("Ranks", ["rank", "process or report", "ops", "kernels", "self CPU", "GPU busy"], rows)
    steps = [
        [str(s["step"]), s["slowest"], t(s["max_ns"]), t(s["min_ns"]), t(s["spread_ns"]), str(s["ranks"])]
        for s in block["steps"]
    ]
    if steps:
        out += table("Steps across ranks", ["step", "slowest", "slowest time", "fastest", "spread", "ranks"], steps)
    return out


def findings(advice: dict[str, Any], first: int = 0, last: int | None = None) -> str:
    """advise's findings ``first`` to ``last`` for one report: kind, op, step, count, time at
    stake and its share, the figures behind it and the fix."""
    span = advice["span_ns"] or 1
    rows = []
    for i, f in enumerate(advice["findings"][first:last], first + 1):
        op = f["op"] + (f" ({f['module']})" if f.get("module") else "")
        figs = "; ".join([*(f"{k} {_figure(k, v)}" for k, v in f["figures"].items()), *_by_step(f)])
        rows.append(
            [
                str(i),
                f["kind"],
                op + (f" {f['shapes']}" if f.get("shapes") else ""),
                "-" if f["step"] is None else str(f["step"]),
                f"{f['count']:,}",
                t(f["time_ns"]),
                f"{100 * f['time_ns'] / span:.1f}%",
                ", ".join(f["lanes"]),
                figs,
                f["fix"],
            ]
        )
    head = ["#", "finding", "op (module)", "step", "count", "at stake", "share", "where", "figures", "fix"]
    return table(f"Findings: {advice['source']}", head, rows, "findings")


def _by_step(finding: dict[str, Any], shown: int = 4) -> list[str]:
    """The time at stake in each step (advise's by_step), largest first: where the step column's
    one step came from."""
    by_step = sorted((finding.get("by_step") or {}).items(), key=lambda kv: (-kv[1], int(kv[0])))
    if len(by_step) < 2:
        return []
    more = f", {len(by_step) - shown} more" if len(by_step) > shown else ""
    return ["by step " + ", ".join(f"{k}: {t(v)}" for k, v in by_step[:shown]) + more]


def _figure(key: str, value: int) -> str:
    if key.endswith("_ns"):
        return t(value)
    if "bytes" in key:
        return nbytes(value)
    return f"{value:,}"


def step_numbers(records: list[dict[str, Any]], caption: str) -> str:
    """The numbers behind the per-step bars: one row per lane and step, ms per category."""
    cats = list(dict.fromkeys(r["category"] for r in records))
    cells: dict[tuple[str, str], dict[str, float]] = {}
    for r in records:
        cells.setdefault((r["lane"], r["step"]), {})[r["category"]] = r["ms"]
    rows = [[lane, step, *(f"{v.get(c, 0):,.3f}" for c in cats)] for (lane, step), v in cells.items()]
    return table(caption, ["lane", "step", *(f"{c} (ms)" for c in cats)], rows)


def diff_tables(d: dict[str, Any], limit: int = 50) -> str:
    """diff's op, kernel and step rows, largest change first."""
    (ga, gb), (sa, sb) = d["gpu_ns"], d["mean_step_ns"]
    head = table(
        "Totals",
        ["figure", "A", "B", "change"],
        [["GPU time", t(ga), t(gb), _change(ga, gb)], ["mean step time", t(sa), t(sb), _change(sa, sb)]],
    )
    ops = [
        [
            o["op"] + (f" {o['shapes']}" if o["shapes"] else "") + (f" ({o['module']})" if o["module"] else ""),
            "bwd" if o["backward"] else "fwd",
            o["status"],
            f"{o['a']['calls']:,} -> {o['b']['calls']:,}",
            f"{t(o['a']['self_gpu_ns'])} -> {t(o['b']['self_gpu_ns'])}",
            _signed(o["delta"]["self_gpu_ns"]),
            _signed(o["delta"]["self_cpu_ns"]),
        ]
        for o in d["ops"][:limit]
    ]
    kernels = [
        [
            k["name"],
            k["status"],
            f"{k['a_count']:,} -> {k['b_count']:,}",
            f"{t(k['a_ns'])} -> {t(k['b_ns'])}",
            _signed(k["b_ns"] - k["a_ns"]),
        ]
        for k in d["kernels"][:limit]
    ]
    steps = [[str(s["step"]), t(s["a_ns"]), t(s["b_ns"]), _change(s["a_ns"], s["b_ns"])] for s in d["steps"]]
    out = head
    if ops:
        out += table(
            f"Ops that changed ({len(ops)} of {len(d['ops'])})",
            ["op [input shapes] (module)", "dir", "status", "calls", "self GPU", "self GPU change", "self CPU change"],
            ops,
        )
    if kernels:
        out += table(
            f"Kernels that changed ({len(kernels)} of {len(d['kernels'])})",
            ["kernel", "status", "launches", "time", "change"],
            kernels,
        )
    if steps:
        out += table("Steps", ["step", "A", "B", "change"], steps)
    return out


def _change(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "-"
    return f"{100 * (b / a - 1):+.1f}%" if a else "new"


def _signed(ns: int) -> str:
    return ("+" if ns > 0 else "-" if ns < 0 else "") + t(abs(ns))
