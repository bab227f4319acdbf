"""``nvbridge trace``: a Chrome/Perfetto trace of a report or dataset."""

from __future__ import annotations

from pathlib import Path

import click

from nvbridge.analysis import parse_time
from nvbridge.cli._common import errors, shown, steps
from nvbridge.export.chrome import Tables
from nvbridge.export.trace import check_destination, export_chrome_trace, first_event_ns


def _window(source: Path | Tables, start: str | None, end: str | None) -> tuple[int | None, int | None]:
    """--start/--end (times from the report's first event) -> absolute ns in the report's time base."""
    try:
        start_us = parse_time(start) if start else None
        end_us = parse_time(end) if end else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--start/--end") from exc
    if start_us is not None and end_us is not None and end_us <= start_us:
        raise click.BadParameter(
            f"--end {end} is not later than --start {start}; the window would be empty", param_hint="--start/--end"
        )
    if start_us is None and end_us is None:
        return None, None
    origin = first_event_ns(source)
    return (
        None if start_us is None else origin + round(start_us * 1e3),
        None if end_us is None else origin + round(end_us * 1e3),
    )


@click.command("trace")
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=Path),
    help="trace.json or trace.json.gz, in an existing folder.",
)
@click.option(
    "--start", "start", default=None, help="Window start, from the first event (e.g. 1.5s, 200ms; a bare number is µs)."
)
@click.option("--end", "end", default=None, help="Window end, from the first event (later than --start).")
@click.option(
    "--steps",
    "step_text",
    default=None,
    help="Only ProfilerStep#A..#B, written A:B (or one step: A); not with --start/--end.",
)
@click.option("--process", "processes", type=int, multiple=True, help="Only this host process id (repeatable).")
@click.option("--force", is_flag=True, help="Replace the output file if it exists.")
def trace_cmd(
    path: Path,
    output: Path,
    start: str | None,
    end: str | None,
    step_text: str | None,
    processes: tuple[int, ...],
    force: bool,
) -> None:
    """Write a Chrome/Perfetto trace of a report or dataset (Kineto conventions, flows included).

    A dataset directory is streamed a row group at a time; a report is converted in memory first.
    """
    step_range = steps(step_text)
    if step_range is not None and (start is not None or end is not None):
        raise click.UsageError("--steps and --start/--end both choose the window; pass one of them.")
    with errors():
        check_destination(output, force)
    start_us_given = start is not None or end is not None
    with errors():
        source: Path | Tables = path
        if start_us_given and not path.is_dir():
            from nvbridge.dataset import load

            source = load(path)  # converted once, for both the window's origin and the trace
        start_ns, end_ns = _window(source, start, end)
        stats = export_chrome_trace(
            source,
            output,
            start_ns=start_ns,
            end_ns=end_ns,
            steps=step_range,
            processes=set(processes) or None,
            force=force,
        )
    parts = ", ".join(f"{v:,} {k}" for k, v in {**stats.slices, **stats.flows}.items())
    click.echo(shown(f"Wrote {output}: {parts}."))
    if stats.overlapping_gpu_ops:
        click.echo(
            f"note: {stats.overlapping_gpu_ops:,} GPU ops overlap an earlier op on their stream; "
            "they are drawn on a separate 'overlap' track.",
            err=True,
        )
