"""``nvbridge trace``: a Chrome/Perfetto trace of a report or dataset."""

from __future__ import annotations

from pathlib import Path

import click

from nvbridge.cli._common import errors, steps, window
from nvbridge.conversion import export_chrome_trace
from nvbridge.dataset import load


@click.command("trace")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path), help="trace.json or trace.json.gz")
@click.option("--start", "start", default=None, help="Window start, from the first event (e.g. 1.5s, 200ms).")
@click.option("--end", "end", default=None, help="Window end, from the first event.")
@click.option("--steps", "step_text", default=None, help="Only ProfilerStep#A..#B, written A:B (or one step: A).")
@click.option("--process", "processes", type=int, multiple=True, help="Only this host process id (repeatable).")
def trace_cmd(path: Path, output: Path, start: str | None, end: str | None, step_text: str | None,
              processes: tuple[int, ...]) -> None:
    """Write a Chrome/Perfetto trace of a report or dataset (Kineto conventions, flows included)."""
    step_range = steps(step_text)
    with errors():
        report = load(path)
        start_ns, end_ns = window(report, start, end)
        stats = export_chrome_trace(report, output, start_ns=start_ns, end_ns=end_ns, steps=step_range,
                                    processes=set(processes) or None)
    parts = ", ".join(f"{v:,} {k}" for k, v in {**stats.slices, **stats.flows}.items())
    click.echo(f"Wrote {output}: {parts}.")
    if stats.overlapping_gpu_ops:
        click.echo(f"note: {stats.overlapping_gpu_ops:,} GPU ops overlap an earlier op on their stream; "
                   "they are drawn on a separate 'overlap' track.", err=True)
