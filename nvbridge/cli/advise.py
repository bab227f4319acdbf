"""``nvbridge advise``: ranked findings, each naming the op, module and step to change."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import click

from nvbridge.analysis import format_time
from nvbridge.analysis.advise import Advice, Finding, advise
from nvbridge.analysis.advise_ranks import ranks_advice, ranks_json, ranks_text, report_skews
from nvbridge.analysis.as_json import advice_json
from nvbridge.analysis.throughput import si
from nvbridge.cli._common import errors
from nvbridge.dataset.collectives_read import report_name
from nvbridge.dataset.report import is_partitioned, report_dirs
from nvbridge.output.names import plural

WIDTH = 100
HEADER = f"{'#':>3}  {'finding':<18}  {'op (module)':<36}  {'step':>5}  {'count':>7}  {'at stake':>10}  {'share':>6}"


def _ms(ns: int) -> str:
    return format_time(ns / 1e3)


def _op(f: Finding) -> str:
    text = f.op if not f.module else f"{f.op} ({f.module})"
    return text if len(text) <= 36 else text[:35] + "~"


def _detail(f: Finding) -> str:
    """Where it happened, its own figures, and the fix, wrapped to the terminal."""
    figs = dict(f.figures)
    parts = [f"on {', '.join(f.lanes)}"]
    if "copies" in figs:
        parts.append(_copies(figs))
    elif "bytes" in figs and f.kind != "below_roofline":
        parts.append(f"{figs['bytes']:,} bytes")
    if "wait_ns" in figs:
        calls = f" + {_ms(figs['call_ns'])} in the copy calls" if figs.get("call_ns") else ""
        parts.append(f"host waited {_ms(figs['wait_ns'])}{calls}")
    if "kernel_ns" in figs:
        parts.append(f"kernels {_ms(figs['kernel_ns'])} vs launches {_ms(figs['launch_ns'])}")
    if f.kind == "below_roofline":
        parts += _roofline(f, figs)
    if f.own_ns != f.time_ns:
        parts.append(f"{_ms(f.own_ns - f.time_ns)} already counted above")
    text = "; ".join(parts) + ". " + f.fix
    return "\n".join(textwrap.wrap(text, WIDTH, initial_indent=" " * 5, subsequent_indent=" " * 5))


def _copies(figs: dict[str, int]) -> str:
    """Direction, volume, count, memory kind and rate of a copy finding."""
    way = "HtoD" if figs.get("htod_bytes") else "DtoH" if figs.get("dtoh_bytes") else "device copies"
    pageable = f", {figs['pageable']:,} from/to pageable memory" if figs.get("pageable") else ", pinned"
    if way == "device copies":
        pageable = ""
    rate = f" at {si(figs['bytes'] / figs['copy_ns'] * 1e9, 'B/s')}" if figs.get("copy_ns") and figs["bytes"] else ""
    n = figs["copies"]
    return f"{way} {si(figs['bytes'], 'B') or '0 B'} in {n:,} cop{'y' if n == 1 else 'ies'}{pageable}{rate}"


def _headline(advice: Advice) -> list[str]:
    """Start-up outside the timeline, and what dominates the timeline."""
    lines = []
    if advice.startup_ns:
        lines.append(f"Start-up: {_ms(advice.startup_ns)} in CUDA calls before the first GPU op, outside the timeline.")
    top = advice.dominant
    if top is None or not top.of_ns:
        return lines
    if top.category == "compute":
        lines.append(f"Compute dominates: kernels run {100 * top.share:.1f}% of the GPU timeline.")
        return lines
    text = f"Dominant cost: {top.category}, {100 * top.share:.1f}% of the GPU timeline"
    if top.category == "copies":
        moved = ", ".join(f"{k} {si(v, 'B')}" for k, v in top.copy_bytes if v)
        rate = f" at {top.copy_gbps:.1f} GB/s" if top.copy_gbps else ""
        peak = (
            f" (link peak {top.link_peak_gbps:g} GB/s)" if top.link_peak_gbps else " (link peak unknown: not recorded)"
        )
        text += f"; {moved}{rate}{peak}"
    return lines + textwrap.wrap(text + ".", WIDTH, subsequent_indent="  ")


def _roofline(f: Finding, figs: dict[str, int]) -> list[str]:
    """Shapes, work, achieved rate and the roofline's time for a below_roofline finding."""
    gpu, roof = figs["gpu_ns"], figs["roof_ns"]
    rate = si(figs["flops"] / gpu * 1e9, "FLOP/s") if figs["flops"] else si(figs["bytes"] / gpu * 1e9, "B/s")
    return [
        f"{f.shapes}",
        f"{plural(f.count, 'call')}: {si(figs['flops'], 'FLOP') or '0 FLOP'}, {si(figs['bytes'], 'B')} in "
        f"{_ms(gpu)} ({rate})",
        f"the roofline allows {_ms(roof)} ({100 * roof / gpu:.1f}%)",
    ]


def render(advice: Advice, limit: int, steps: int) -> str:
    """The findings table and the per-step idle shares, at most 100 columns wide."""
    share = advice.at_stake_ns / advice.span_ns if advice.span_ns else 0.0
    lines = [f"nvbridge advise: {advice.source}"]
    if not advice.lanes:
        return "\n".join(
            lines + ["No GPU work in this report: nothing to advise on (record with nsys profile -t cuda,nvtx)."]
        )
    lanes = f"{len(advice.lanes)} lane" + ("s" if len(advice.lanes) > 1 else "")
    lines.append(
        f"GPU timeline {_ms(advice.span_ns)} ({lanes}); findings cover {_ms(advice.at_stake_ns)} "
        f"({100 * share:.1f}%), each moment counted once."
    )
    lines += _headline(advice)
    lines.append(
        f"Roofline peaks: {advice.peaks}"
        if advice.peaks
        else "Roofline: unknown GPU, no below_roofline findings (give --peak-tflops and --peak-gbps)."
    )
    if not advice.findings:
        return "\n".join(lines + ["No findings above the bound."])
    lines += ["", HEADER]
    shown = advice.findings if limit < 0 else advice.findings[:limit]
    for i, f in enumerate(shown, 1):
        pct = 100 * f.time_ns / advice.span_ns if advice.span_ns else 0.0
        step = "-" if f.step is None else str(f.step)
        lines.append(
            f"{i:>3}  {f.kind:<18}  {_op(f):<36}  {step:>5}  {f.count:>7,}  {_ms(f.time_ns):>10}  {pct:>5.1f}%"
        )
        lines.append(_detail(f))
    if len(shown) < len(advice.findings):
        lines.append(f"... {len(advice.findings) - len(shown)} more (--limit -1 shows all)")
    if advice.steps and steps:
        lines += ["", "GPU idle share per step:"]
        worst = sorted(advice.steps, key=lambda s: -s.idle_share)[: steps if steps > 0 else None]
        for s in sorted(worst, key=lambda s: (s.step, s.lane)):
            lines.append(
                f"  step {s.step:<5} {s.lane:<24} {_ms(s.step_ns):>10}  busy {_ms(s.busy_ns):>10}  "
                f"{100 * s.idle_share:5.1f}% idle"
            )
    return "\n".join(lines)


@click.command("advise")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--limit", default=15, show_default=True, help="Findings to show (-1: all).")
@click.option(
    "--steps",
    "step_lines",
    default=10,
    show_default=True,
    help="Steps to list with their GPU idle share, the idlest first (0: none, -1: all).",
)
@click.option(
    "--min-share", default=0.0, show_default=True, help="Drop findings below this percentage of the GPU timeline."
)
@click.option(
    "--peak-tflops",
    type=float,
    default=None,
    help="Peak TFLOP/s for below_roofline (default: the GPU table, by the report's device name).",
)
@click.option("--peak-gbps", type=float, default=None, help="Peak memory bandwidth in GB/s for below_roofline.")
@click.option("--json", "json_out", is_flag=True, help="Print the findings and steps as JSON.")
def advise_cmd(
    path: Path,
    limit: int,
    step_lines: int,
    min_share: float,
    peak_tflops: float | None,
    peak_gbps: float | None,
    json_out: bool,
) -> None:
    """Ranked findings: the op, module and step to change, the time at stake and a fix."""
    with errors():
        # a dataset of many reports: one answer, with the findings across its ranks; each report's
        # rank_skew is the time the others waited for it (its steps as the straggler)
        many = is_partitioned(path)
        across, found = ranks_advice(path) if many else (None, [])
        names = [report_name(d) for d in report_dirs(path)] if many else []
        results = advise(path, min_share / 100, peak_tflops, peak_gbps, report_skews(across, names))
        if json_out:
            reports = [advice_json(a) for a in results]
            one = ranks_json(reports, across, found) if many else reports[0]
            click.echo(json.dumps(one, indent=1))
            return
        texts = [render(a, limit, step_lines) for a in results]
        across_text = ranks_text(across, found)
        click.echo("\n\n".join([*texts, across_text] if across_text else texts))
