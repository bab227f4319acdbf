"""``nvbridge diff``: what changed between two reports, and a gate for CI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from nvbridge.analysis import format_time
from nvbridge.analysis.as_json import diff_json
from nvbridge.analysis.diff import Diff, OpDelta, diff
from nvbridge.analysis.memory_diff import GATE
from nvbridge.analysis.text_table import cut
from nvbridge.cli._common import errors, human_bytes

OP_WIDTH = 46


class GateFailed(click.ClickException):
    """--fail-above tripped: the comparison was printed; one FAIL line, exit status 1."""

    def show(self, file: Any = None) -> None:
        click.echo(f"FAIL: {self.message}", err=True)


def _t(ns: float) -> str:
    return format_time(ns / 1e3)


def _signed(ns: int) -> str:
    return ("+" if ns > 0 else "-" if ns < 0 else "") + _t(abs(ns))


def _signed_bytes(n: int) -> str:
    return ("+" if n > 0 else "-" if n < 0 else "") + (human_bytes(abs(n)) if n else "0")


def _pct(a: float, b: float) -> str:
    return f"{100 * (b / a - 1):+.1f}%" if a else "new"


def _op_text(d: OpDelta) -> str:
    return d.op + (f" {d.shapes}" if d.shapes else "") + (f" ({d.module})" if d.module else "")


def render(d: Diff, limit: int) -> str:
    """Totals, then op, kernel and step rows by impact, at most 100 columns wide."""
    (ga, gb), (sa, sb) = d.gpu_ns, d.mean_step_ns
    lines = [f"nvbridge diff: A = {d.a_source}, B = {d.b_source}"]
    if ga or gb:
        lines.append(f"GPU time: {_t(ga)} -> {_t(gb)} ({_pct(ga, gb)})")
    if sa is not None and sb is not None:
        lines.append(f"mean step time: {_t(sa)} -> {_t(sb)} ({_pct(sa, sb)})")
    for p in d.peaks:
        a_text, b_text = (human_bytes(x) if x is not None else "-" for x in (p.a_bytes, p.b_bytes))
        change = f" ({_pct(p.a_bytes, p.b_bytes)})" if p.a_bytes is not None and p.b_bytes is not None else ""
        lines.append(f"peak memory {p.device}: {a_text} -> {b_text}{change}")
    if not (d.ops or d.kernels or d.steps):
        return "\n".join(lines + ["No differences."])
    if d.ops:
        memory = bool(d.peaks)  # a self memory column (CPU and CUDA) where either side recorded memory
        width = OP_WIDTH - 12 * memory
        lines += [
            "",
            f"{'op [input shapes] (module)':<{width}}  dir  {'calls':>6}  {'self CPU':>10}  "
            f"{'self GPU':>10}  " + (f"{'self mem':>10}  " if memory else "") + "status",
        ]
        ops = d.ops[:limit] if limit >= 0 else d.ops
        # cut to the column, distinct ops never to the same text (text_table.cut keeps their ends)
        for o, cell in zip(ops, cut([_op_text(o) for o in ops], width, "~")):
            mem = o.delta("self_cpu_memory_usage") + o.delta("self_cuda_memory_usage")
            lines.append(
                f"{cell:<{width}}  {'bwd' if o.backward else 'fwd'}  {o.delta('calls'):>+6}  "
                f"{_signed(o.delta('self_cpu_ns')):>10}  {_signed(o.delta('self_gpu_ns')):>10}  "
                + (f"{_signed_bytes(mem):>10}  " if memory else "")
                + o.status
            )
        if 0 <= limit < len(d.ops):
            lines.append(f"... {len(d.ops) - limit} more op rows (--limit -1 shows all)")
    if d.kernels:
        lines += ["", f"{'kernel':<60}  {'launches':>8}  {'time':>10}  status"]
        kernels = d.kernels[:limit] if limit >= 0 else d.kernels
        for k, name in zip(kernels, cut([k.name for k in kernels], 60, "~")):
            lines.append(f"{name:<60}  {k.b_count - k.a_count:>+8}  {_signed(k.b_ns - k.a_ns):>10}  {k.status}")
    if d.steps:
        lines += ["", "step   A           B           change"]
        for s in d.steps:
            a = "-" if s.a_ns is None else _t(s.a_ns)
            b = "-" if s.b_ns is None else _t(s.b_ns)
            change = _pct(s.a_ns, s.b_ns) if s.a_ns is not None and s.b_ns is not None else "-"
            lines.append(f"{s.step:<5}  {a:<10}  {b:<10}  {change}")
    return "\n".join(lines)


def _bounds(texts: tuple[str, ...]) -> tuple[float | None, float | None]:
    """(time bound, peak memory bound) from the --fail-above values: ``5%`` (or ``time=5%``)
    gates total GPU and mean step time, ``peak_memory=10%`` each device's peak allocated."""
    out: dict[str, float] = {}
    for text in texts:
        key, _, value = text.rpartition("=")
        key = key.strip() or "time"
        if key not in ("time", GATE):
            raise click.BadParameter(
                f"{text!r} gates on {key!r}; write 5% (time) or {GATE}=10%", param_hint="--fail-above"
            )
        try:
            out[key] = float(value.strip().removesuffix("%")) / 100
        except ValueError as exc:
            raise click.BadParameter(
                f"{text!r} is not a percentage; write 5% or 5 (or {GATE}=10%)", param_hint="--fail-above"
            ) from exc
    return out.get("time"), out.get(GATE)


@click.command("diff")
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@click.option("--limit", default=20, show_default=True, help="Op and kernel rows to show (-1: all).")
@click.option(
    "--fail-above",
    multiple=True,
    help="Exit with status 1 when total GPU time or mean step time grew by more than this (5%); "
    f"{GATE}=10% gates each device's peak allocated memory (repeat the option for both).",
)
@click.option("--json", "json_out", is_flag=True, help="Print the comparison as JSON.")
def diff_cmd(a: Path, b: Path, limit: int, fail_above: tuple[str, ...], json_out: bool) -> None:
    """Compare two reports or datasets by (op, input shapes, direction, module)."""
    bound, memory_bound = _bounds(fail_above)
    with errors():
        result = diff(a, b)
    click.echo(json.dumps(diff_json(result, bound, memory_bound), indent=1) if json_out else render(result, limit))
    failed = result.regressions(bound, memory_bound)
    if failed:
        raise GateFailed(f"{', '.join(failed)}, above --fail-above {' '.join(fail_above)}")
