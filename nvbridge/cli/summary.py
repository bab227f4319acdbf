"""``nvbridge summary``: torch-style key_averages tables with a GPU header per device."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import click

import nvbridge.analysis.throughput as throughput
from nvbridge.analysis import SUMMARY_COLUMNS, format_time, merge_averages, parse_time, rank_facts, rank_summary
from nvbridge.cli._common import errors, human_bytes
from nvbridge.dataset import is_partitioned, load, report_dirs


def _rank_lines(ranks: dict[str, Any]) -> list[str]:
    lines = [f"{len(ranks['ranks'])} reports:"]
    for r in ranks["ranks"]:
        busy = ", ".join(f"GPU {d} {format_time(ns / 1e3)}" for d, ns in r["gpu_busy_ns"].items()) or "no GPU ops"
        lines.append(f"  {r['rank']} ({r['source']}): {r['ops']:,} ops, {r['kernels']:,} kernels, busy {busy}")
    for st in ranks["steps"]:
        lines.append(f"  step {st['step']}: slowest {st['slowest']} {format_time(st['max_ns'] / 1e3)}, "
                     f"spread {format_time(st['spread_ns'] / 1e3)} over {st['ranks']} ranks")
    return lines


def _gpu_lines(summary: list[dict[str, object]]) -> list[str]:
    lines = []
    for d in summary:
        copies = ", ".join(f"{k} {human_bytes(v)}" for k, v in d["memcpy_bytes"].items()) or "none"  # type: ignore[attr-defined]
        where = f"{d['report']}: " if d.get("report") and d.get("several") else ""
        lines.append(
            f"{where}GPU {d['device_id']} ({d['name'] or 'unnamed'}): busy {format_time(d['busy_ns'] / 1e3)} of "  # type: ignore[operator]
            f"{format_time(d['span_ns'] / 1e3)} ({100 * d['idle_share']:.1f}% idle), "  # type: ignore[operator]
            f"{d['kernels']:,} kernels, {d['gpu_ops']:,} GPU ops, memcpy: {copies}")
    return lines


@click.command("summary")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--sort", "sort_by", default="self_cuda_time_total", show_default=True,
              help="torch sort key: self_cuda_time_total, cuda_time_total, self_cpu_time_total, "
                   "cpu_time_total, cpu_time, cuda_time, count.")
@click.option("--limit", default=30, show_default=True, help="Rows to show (-1: all).")
@click.option("--group-by", "group_by", type=click.Choice(["name", "shape", "module", "stack"]), default="name",
              show_default=True, help="Group ops by name, or by name and input shape, module or stack.")
@click.option("--stack-depth", default=1, show_default=True, help="Frames to group by with --group-by stack.")
@click.option("--min-time", default="0", help="Hide rows whose CPU and CUDA totals are both below this (10us, 1ms).")
@click.option("--filter", "name_regex", default=None, help="Only rows whose name matches this regular expression.")
@click.option("--device", type=int, default=None, help="Count GPU time of this device only.")
@click.option("--top-level", is_flag=True, help="Only ops without a parent range.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the rows as CSV.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows and the GPU header as JSON.")
@click.option("--peak-tflops", type=float, default=None,
              help="Peak TFLOP/s for %% of peak and MFU (default: the GPU table, by the report's device name).")
@click.option("--peak-gbps", type=float, default=None, help="Peak memory bandwidth in GB/s for %% of peak.")
def summary_cmd(path: Path, sort_by: str, limit: int, group_by: str, stack_depth: int, min_time: str,
                name_regex: str | None, device: int | None, top_level: bool, as_csv: bool, as_json: bool,
                peak_tflops: float | None, peak_gbps: float | None) -> None:
    """Print a torch-style key_averages table for a report or a converted dataset."""
    with errors():
        try:
            min_us = parse_time(min_time)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--min-time") from exc
        # A partitioned dataset is read one report at a time: memory holds the largest report
        # and the per-report aggregates, however many ranks the run had.
        sources: list[Path] = report_dirs(path) if is_partitioned(path) else [path]
        several = len(sources) > 1
        parts, facts, gpu, flop_figures = [], [], [], []
        peaks = None
        for source in sources:
            report = load(source, SUMMARY_COLUMNS, in_order=False)
            parts.append(report.key_averages(
                group_by_input_shape=group_by == "shape", group_by_module=group_by == "module",
                group_by_stack_n=stack_depth if group_by == "stack" else 0,
                top_level_events_only=top_level, device=device))
            header = report.gpu_summary()
            if several:
                facts.append(rank_facts(report, header))
            gpu += [dict(d, report=report.meta.get("source"), several=several) for d in header]
            peaks = peaks or throughput.device_peaks(report.devices, report.gpu_ops, device, peak_tflops, peak_gbps)
            label = (f"rank {report.meta['rank']}" if report.meta.get("rank") not in (None, "None")
                     else str(report.meta.get("source"))) if several else ""
            flop_figures.append((label, throughput.mfu(report.ops, report.gpu_ops, peaks)))
            del report
        averages = parts[0] if len(parts) == 1 else merge_averages(parts)
        ranks = rank_summary(facts) if several else None
        try:
            rows = throughput.rates(averages.sorted(sort_by, limit, name_regex, min_us), peaks)
            text = averages.table(sort_by, limit, name_regex, min_us)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--sort") from exc
    if as_json:
        click.echo(json.dumps({"gpu": gpu, "ranks": ranks, "flops": dict(flop_figures) if several else
                               flop_figures[0][1], "rows": rows.to_pylist()}, indent=1, default=_jsonable))
    elif as_csv:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=rows.column_names)
        writer.writeheader()
        writer.writerows(rows.to_pylist())
        click.echo(buf.getvalue(), nl=False)
    else:
        if ranks is not None:
            for line in _rank_lines(ranks):
                click.echo(line)
        for line in _gpu_lines(gpu):
            click.echo(line)
        click.echo(text, nl=False)
        for line in throughput.header_lines(peaks, flop_figures):
            click.echo(line)
        if any(r < c for r, c in zip(rows.column("unknown_calls").to_pylist(), rows.column("calls").to_pylist())):
            click.echo(throughput.cost_table(rows, averages.group_by), nl=False)


def _jsonable(value: object) -> object:
    """NaN-free JSON: numpy floats as floats."""
    return float(value) if isinstance(value, float | int) else str(value)
