"""``nvbridge trace``: a Chrome/Perfetto trace of a report or dataset."""

from __future__ import annotations

from pathlib import Path

import click

from nvbridge.analysis import parse_time
from nvbridge.cli._common import errors, shown, steps
from nvbridge.conversion.memory import load_tables
from nvbridge.dataset.schema import ReportTables
from nvbridge.export.trace import Traces, check_destination, check_suffix, export_chrome_traces, first_event_ns


def _window(source: Path | ReportTables, start: str | None, end: str | None) -> tuple[int | None, int | None]:
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
@click.option(
    "--split",
    type=click.Choice(["auto", "rank", "none"]),
    default="auto",
    show_default=True,
    help="rank: one trace per rank, NAME.rank<K>.json.gz (as torch.profiler writes them and Holistic Trace "
    "Analysis reads them); none: one file; auto: per rank when the trace holds several ranks.",
)
@click.option("--force", is_flag=True, help="Replace the output file(s) if they exist.")
def trace_cmd(
    path: Path,
    output: Path,
    start: str | None,
    end: str | None,
    step_text: str | None,
    processes: tuple[int, ...],
    split: str,
    force: bool,
) -> None:
    """Write a Chrome/Perfetto trace of a report or dataset (Kineto conventions, flows included):
    one per rank for a report of several ranks, as torch.profiler writes them.

    A dataset directory is streamed a row group at a time; a report is converted in memory first.
    """
    step_range = steps(step_text)
    if step_range is not None and (start is not None or end is not None):
        raise click.UsageError("--steps and --start/--end both choose the window; pass one of them.")
    with errors():
        check_suffix(output)
        if split == "none":
            check_destination(output, force)
    with errors():
        source: Path | ReportTables = path
        if not path.is_dir():
            source = load_tables(path)  # a report, converted in memory once (the window's origin, the trace)
        start_ns, end_ns = _window(source, start, end)
        written = export_chrome_traces(
            source,
            output,
            split=split,
            start_ns=start_ns,
            end_ns=end_ns,
            steps=step_range,
            processes=set(processes) or None,
            force=force,
        )
    _say(written)


def _say(written: Traces) -> None:
    """One line per file written (its rank where it holds one), then the notes."""
    for stats in written.files:
        parts = ", ".join(f"{v:,} {k}" for k, v in {**stats.slices, **stats.flows}.items())
        info = stats.distributed
        who = ""
        if "rank" in info and info != {"rank": 0, "world_size": 1}:  # a one-rank report's rank goes unsaid
            who = f" (rank {info['rank']}" + (f" of {info['world_size']}" if "world_size" in info else "") + ")"
        click.echo(shown(f"Wrote {stats.path}{who}: {parts}."))
    overlapping = sum(s.overlapping_gpu_ops for s in written.files)
    if overlapping:
        click.echo(
            f"note: {overlapping:,} GPU ops overlap an earlier op on their stream; "
            "they are drawn on a separate 'overlap' track.",
            err=True,
        )
    if written.per_rank and len(written.files) > 1:
        click.echo(
            f"note: {len(written.files)} ranks, one trace each (Holistic Trace Analysis reads one file per "
            "rank); --split none writes them in one file.",
            err=True,
        )
    if written.left_out:
        pids = ", ".join(str(p) for p in written.left_out)
        click.echo(
            f"note: process {pids} ran no GPU work and is no rank: it is in no rank's trace; "
            "--split none or --process writes it.",
            err=True,
        )
    if written.stale:
        names = ", ".join(p.name for p in written.stale)
        click.echo(f"note: {names} beside them is not this report's; remove it before reading the folder.", err=True)
