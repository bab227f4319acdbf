"""``nvbridge summary``: torch-style key_averages tables with a GPU header per device."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import click
import pyarrow as pa
import pyarrow.compute as pc

import nvbridge.analysis.throughput as throughput
from nvbridge.analysis import (
    NO_OP,
    GpuHeader,
    Summary,
    check_regex,
    format_time,
    parse_time,
    plural,
    sort_column,
    summarize,
)
from nvbridge.analysis.across_text import lines as across_lines
from nvbridge.analysis.as_json import summary_json
from nvbridge.cli import kernels as kernel_cli
from nvbridge.cli._common import errors, human_bytes, terminal_width, wrapped
from nvbridge.errors import OptionError

SHOWN_THREADS = 3  # launching threads named under the table; the rest are counted
CPU_LABELS = {"self_cpu_ns": "self CPU time", "cpu_total_ns": "CPU total", "cpu_avg_ns": "CPU time avg"}


def _rank_lines(summary: Summary) -> list[str]:
    sources = list(dict.fromkeys(r.source for r in summary.ranks))
    n = plural(len(summary.ranks), "rank")
    if len(sources) == 1:
        lines = [f"{n} in {sources[0]}, one process each:"]
    elif len(sources) == len(summary.ranks):
        lines = [f"{plural(len(sources), 'report')}:"]
    else:
        lines = [f"{n} in {plural(len(sources), 'report')}:"]
    for r in summary.ranks:
        if r.process_id is not None:  # one of several processes of a report
            gpus = ", ".join(str(lane.device_id) for lane in r.lanes)
            name = f"{r.label} (pid {r.process_id}{', GPU ' + gpus if gpus else ''})"
            busy = ", ".join(
                f"GPU {d.device_id} busy {format_time(d.busy_ns / 1e3)} of {format_time(d.span_ns / 1e3)}"
                for d in r.lanes
            )
            cpu = f"self CPU {format_time(r.self_cpu_ns / 1e3)}, self CUDA {format_time(r.self_gpu_ns / 1e3)}, "
            lines.append(f"  {name}: {plural(r.ops, 'op')}, {cpu}{plural(r.kernels, 'kernel')}, {busy or 'no GPU ops'}")
            continue
        busy = ", ".join(f"GPU {d} {format_time(ns / 1e3)}" for d, ns in r.gpu_busy_ns.items()) or "no GPU ops"
        name = r.label if r.label == str(r.source) else f"{r.label} ({r.source})"
        lines.append(f"  {name}: {plural(r.ops, 'op')}, {plural(r.kernels, 'kernel')}, busy {busy}")
    held = {s.step for s in summary.across.steps} if summary.across is not None else set()
    for st in summary.steps:
        if st.step in held:
            continue  # named by who the others waited for (below), not by the longest step
        lines.append(
            f"  step {st.step}: slowest {st.slowest} {format_time(st.max_ns / 1e3)}, "
            f"spread {format_time(st.spread_ns / 1e3)} over {plural(st.ranks, 'rank')}"
        )
    return lines + (across_lines(summary.across) if summary.across is not None else [])


def _summed_line(summary: Summary) -> str:
    return (
        f"The table sums the {len(summary.ranks)} ranks: calls, CPU and CUDA times add up, so averages are per "
        "call over all of them; --rank K shows one rank's."
    )


def _launch_lines(summary: Summary) -> list[str]:
    """Who launched the [no op] row's GPU time: by time (beside each op's own), then by thread."""
    x = summary.launches
    if not x.no_op_ns:
        return []

    def t(ns: int) -> str:
        return format_time(ns / 1e3)

    lines = []
    if x.by_time:
        lines.append(
            f"{NO_OP} holds {t(x.no_op_ns)} of GPU time launched outside every range of its thread; "
            f"{t(x.by_time_ns)} of it while another thread of its process had a range open "
            "(attributed by time, gpu_ops.time_op_id):"
        )
        for b in x.by_time:
            who = ", ".join(f"{t(th.gpu_ns)} launched by {th.name}" for th in b.threads)
            lines.append(f"  {b.name}: {t(b.own_ns)} own + {who} while it was open")
    shown = [
        f"{th.name} (pid {th.process_id}, thread {th.thread_id}) {t(th.gpu_ns)}"
        if th.name != f"thread {th.thread_id}"
        else f"thread {th.thread_id} (pid {th.process_id}) {t(th.gpu_ns)}"
        for th in x.left[:SHOWN_THREADS]
    ]
    more = x.left[SHOWN_THREADS:]
    if more:
        shown.append(f"{plural(len(more), 'more thread')} {t(sum(th.gpu_ns for th in more))}")
    parts = [f"launched by threads with no range open in their process: {', '.join(shown)}"] if shown else []
    if x.no_call_ns:
        parts.append(f"{plural(x.no_call_ops, 'GPU op')} ({t(x.no_call_ns)}) with no launching call in the capture")
    if parts:
        what = "the rest" if x.by_time else "all of it"
        lines.append(f"{NO_OP} {t(x.no_op_ns - x.by_time_ns)}, {what}: " + "; ".join(parts) + ".")
    return lines


def gpu_line(d: GpuHeader, several: bool) -> str:
    """One device's header line (``several``: prefixed with its report's name)."""
    copies = ", ".join(f"{k} {human_bytes(v)}" for k, v in d.memcpy_bytes.items()) or "none"
    where = f"{d.report}: " if d.report and several else ""
    # start-up (CUDA calls before the first GPU op) is beside the span, never in its idle share
    startup = f", start-up {format_time(d.startup_ns / 1e3)} before it" if d.startup_ns else ""
    return (
        f"{where}GPU {d.device_id} ({d.name or 'unnamed'}): busy {format_time(d.busy_ns / 1e3)} of "
        f"{format_time(d.span_ns / 1e3)} ({100 * d.idle_share:.1f}% idle){startup}, {plural(d.kernels, 'kernel')}, "
        f"{plural(d.gpu_ops, 'GPU op')}, memcpy: {copies}"
    )


def _json(summary: Summary, rows: list[dict[str, Any]]) -> str:
    return json.dumps(summary_json(summary, rows), indent=1)


def _check_options(
    sort_by: str,
    limit: int,
    group_by: str,
    stack_depth: int | None,
    min_time: str,
    name_regex: str | None,
    as_csv: bool,
    as_json: bool,
) -> float:
    """Every option on its own and together, before any file is read; the --min-time in us."""

    def bad(message: str, option: str) -> click.BadParameter:
        return click.BadParameter(message, param_hint=option)

    try:
        min_us = parse_time(min_time)
    except ValueError as exc:
        raise bad(str(exc), "--min-time") from exc
    try:
        sort_column(sort_by)
    except ValueError as exc:
        raise bad(str(exc), "--sort") from exc
    if name_regex:
        try:
            check_regex(name_regex)
        except ValueError as exc:
            raise bad(str(exc), "--filter") from exc
    if as_csv and as_json:
        raise bad("--csv and --json both print the rows; pick one", "--csv/--json")
    if limit < -1:
        raise bad(f"{limit} rows cannot be shown; give a count, or -1 for all rows", "--limit")
    if stack_depth is not None and group_by != "stack":
        raise bad("frames are grouped only with --group-by stack; add it or drop --stack-depth", "--stack-depth")
    if stack_depth is not None and stack_depth < 1:
        raise bad(f"{stack_depth} frames group nothing; give 1 or more", "--stack-depth")
    return min_us


@click.command("summary")
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--sort",
    "sort_by",
    default="self_cuda_time_total",
    show_default=True,
    help="torch sort key: self_cuda_time_total, cuda_time_total, self_cpu_time_total, "
    "cpu_time_total, cpu_time, cuda_time, count. CUDA keys sort by CPU time when "
    "nothing ran on a GPU.",
)
@click.option("--limit", default=30, show_default=True, help="Rows to show (-1: all).")
@click.option(
    "--group-by",
    "group_by",
    type=click.Choice(["name", "shape", "module", "stack"]),
    default="name",
    show_default=True,
    help="Group ops by name, or by name and input shape, module or stack.",
)
@click.option("--stack-depth", type=int, default=None, help="Frames to group by with --group-by stack [default: 1].")
@click.option(
    "--min-time",
    default="0",
    help="Hide rows whose CPU and CUDA totals are both below this (10us, 1ms; a bare number is microseconds).",
)
@click.option("--filter", "name_regex", default=None, help="Only rows whose name matches this regular expression.")
@click.option(
    "--device",
    type=int,
    default=None,
    help="Only the processes that ran GPU work on this GPU, and GPU time of it only.",
)
@click.option(
    "--rank",
    type=int,
    default=None,
    help="Only this rank's process: its ops, CPU and CUDA times, GPU header and MFU.",
)
@click.option("--top-level", is_flag=True, help="Only ops without a parent range.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the rows as CSV.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows and the GPU header as JSON.")
@click.option(
    "--peak-tflops",
    type=float,
    default=None,
    help="Peak TFLOP/s for % of peak and MFU (default: the GPU table, by the report's device name).",
)
@click.option("--peak-gbps", type=float, default=None, help="Peak memory bandwidth in GB/s for % of peak.")
@click.option(
    "--kernels",
    is_flag=True,
    help="List kernels instead of ops: per GPU, calls, total, mean, min, max, share and the ops that launch them.",
)
def summary_cmd(
    path: Path,
    sort_by: str,
    limit: int,
    group_by: str,
    stack_depth: int | None,
    min_time: str,
    name_regex: str | None,
    device: int | None,
    rank: int | None,
    top_level: bool,
    as_csv: bool,
    as_json: bool,
    peak_tflops: float | None,
    peak_gbps: float | None,
    kernels: bool = False,
) -> None:
    """Print a torch-style key_averages table for a report or a converted dataset.

    GPU time no op launched is the row [no op], so Self CUDA adds up to all GPU time; notes
    (no NVTX ranges, ranges cut at the capture end) go to stderr.
    """
    min_us = _check_options(sort_by, limit, group_by, stack_depth, min_time, name_regex, as_csv, as_json)
    if kernels:  # the kernel table instead of the op table (cli/kernels.py)
        kernel_cli.check(locals())
        with errors():
            form = "json" if as_json else "csv" if as_csv else "text"
            kernel_cli.show(str(path), device, name_regex, min_us, limit, form)
        return
    with errors():
        try:
            summary = summarize(
                path,
                group_by_input_shape=group_by == "shape",
                group_by_module=group_by == "module",
                group_by_stack_n=(stack_depth or 1) if group_by == "stack" else 0,
                top_level_events_only=top_level,
                device=device,
                peak_tflops=peak_tflops,
                peak_gbps=peak_gbps,
                rank=rank,
            )
        except OptionError as exc:
            hint = "--rank" if "rank" in str(exc).split(":")[0] and rank is not None else "--device"
            raise click.BadParameter(str(exc), param_hint=hint) from exc
        averages = summary.averages
        rows = throughput.rates(averages.sorted(sort_by, limit, name_regex, min_us), summary.peaks)
    notes = summary.notes()
    if averages.sort_column(sort_by) != sort_column(sort_by) and averages.rows.num_rows:
        notes.append(
            f"no GPU time was recorded: rows are sorted by {CPU_LABELS[averages.sort_column(sort_by)]} instead"
        )
    for note in notes:
        click.echo(wrapped(f"note: {note}"), err=True)
    if as_json:
        click.echo(_json(summary, rows.to_pylist()))
    elif as_csv:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=rows.column_names)
        writer.writeheader()
        writer.writerows(rows.to_pylist())
        click.echo(buf.getvalue(), nl=False)
    else:
        _text(summary, rows, sort_by, limit, name_regex, min_us)


def _text(summary: Summary, rows: pa.Table, sort_by: str, limit: int, name_regex: str | None, min_us: float) -> None:
    """The text form: per-rank lines, GPU headers, torch's table, the FLOPs header and table,
    fitted to the terminal (``COLUMNS``) where output goes to one."""
    width = terminal_width()
    averages = summary.averages
    if summary.several:
        for line in _rank_lines(summary):
            click.echo(wrapped(line))
    several_reports = len({d.report for d in summary.gpus}) > 1
    for d in summary.gpus:
        click.echo(wrapped(gpu_line(d, several_reports)))
    if summary.several:
        click.echo(wrapped(_summed_line(summary)))
    click.echo(averages.table(sort_by, limit, name_regex, min_us, max_width=width), nl=False)
    for line in _launch_lines(summary):
        click.echo(wrapped(line))
    for line in throughput.header_lines(summary.peaks, list(summary.flops), width or 100):
        click.echo(line)
    if not _costed(rows).num_rows:
        # none of the rows shown has a known cost: list the ones that have, in the same order
        costed = _costed(throughput.rates(averages.sorted(sort_by, -1, name_regex, min_us), summary.peaks))
        if not costed.num_rows:
            return
        rows = costed.slice(0, limit) if limit >= 0 else costed
        click.echo(
            wrapped(
                f"FLOPs of the {plural(rows.num_rows, 'row')} with a known cost, in the same order (none of the "
                "rows above has one):"
            )
        )
    click.echo(throughput.cost_table(rows, averages.group_by, width), nl=False)


def _costed(rows: pa.Table) -> pa.Table:
    """The rows with a known cost on some call."""
    return rows.filter(pc.less(rows.column("unknown_calls"), rows.column("calls")))
