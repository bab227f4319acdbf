"""``nvbridge summary --kernels``: the kernel table as text (one table per GPU), CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

import click

from nvbridge.analysis import format_time
from nvbridge.analysis.kernels import KernelRow, kernel_table
from nvbridge.analysis.text_table import Column, fit
from nvbridge.cli._common import terminal_width, wrapped

# the options that shape the op table: refused with --kernels rather than silently ignored
OP_TABLE_OPTIONS = {
    "sort_by": ("--sort", "self_cuda_time_total"),
    "group_by": ("--group-by", "name"),
    "stack_depth": ("--stack-depth", None),
    "top_level": ("--top-level", False),
    "peak_tflops": ("--peak-tflops", None),
    "peak_gbps": ("--peak-gbps", None),
}


def check(options: dict[str, Any]) -> None:
    """With --kernels, the op table's options are an error, not ignored."""
    given = [flag for name, (flag, default) in OP_TABLE_OPTIONS.items() if options.get(name, default) != default]
    if given:
        raise click.BadParameter(
            f"{', '.join(given)} shape{'s' if len(given) == 1 else ''} the op table; --kernels lists kernels "
            "(by total time, with --limit, --filter, --min-time and --device)",
            param_hint="--kernels",
        )


def show(path: str, device: int | None, name_regex: str | None, min_us: float, limit: int, form: str) -> None:
    """Print the kernel table of ``path`` as ``form`` (text, csv or json)."""
    rows = kernel_table(path, device=device, name_regex=name_regex, min_time_ns=int(min_us * 1e3), limit=limit)
    if form == "json":
        click.echo(json.dumps({"kernels": [_record(r, nested=True) for r in rows]}, indent=1))
    elif form == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(_record(KernelRow(None, 0, None, "", 1, 0, 0, 0, 0, ()))))
        writer.writeheader()
        writer.writerows(_record(r, nested=False) for r in rows)
        click.echo(buf.getvalue(), nl=False)
    else:
        _text(rows)


def _record(r: KernelRow, nested: bool = True) -> dict[str, Any]:
    ops: Any = [{"op": o.op, "ns": o.ns} for o in r.ops]
    return {
        "report": r.report,
        "device_id": r.device_id,
        "device": r.device,
        "name": r.name,
        "calls": r.calls,
        "total_ns": r.total_ns,
        "mean_ns": r.mean_ns,
        "min_ns": r.min_ns,
        "max_ns": r.max_ns,
        "share": r.share,
        "gpu_kernel_ns": r.gpu_kernel_ns,
        "ops": ops if nested else json.dumps(ops),  # CSV: the list as JSON text, unambiguous
    }


def _text(rows: Sequence[KernelRow]) -> None:
    """One table per GPU under a line naming it, fitted to the terminal."""
    if not rows:
        click.echo("No kernels (no GPU kernel matched, or the report traced none).")
        return
    width = terminal_width()
    columns = [
        Column("Kernel", left=True, cap=80, narrows=True),
        Column("Calls"),
        Column("Total"),
        Column("Mean", drop=3),
        Column("Min", drop=1),
        Column("Max", drop=2),
        Column("Share"),
        Column("Launched by (share of its time)", left=True, cap=60, narrows=True),
    ]
    gpus = list(dict.fromkeys((r.report, r.device_id, r.device) for r in rows))
    for report, dev, name in gpus:
        mine = [r for r in rows if (r.report, r.device_id) == (report, dev)]
        where = f"{report}: " if report else ""
        total = format_time(mine[0].gpu_kernel_ns / 1e3)
        click.echo(wrapped(f"{where}GPU {dev} ({name or 'unnamed'}): {total} in kernels, the whole of Share"))
        body = [
            [
                r.name,
                f"{r.calls:,}",
                format_time(r.total_ns / 1e3),
                format_time(r.mean_ns / 1e3),
                format_time(r.min_ns / 1e3),
                format_time(r.max_ns / 1e3),
                f"{100 * r.share:.1f}%",
                ", ".join(f"{o.op} {100 * o.ns / r.total_ns:.0f}%" if r.total_ns else o.op for o in r.ops),
            ]
            for r in mine
        ]
        table = fit(columns, body, width)
        click.echo("\n".join(table.lines))
        if (note := table.note(width)) is not None:
            click.echo(note)
