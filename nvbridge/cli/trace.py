"""``nvbridge trace``: a Chrome/Perfetto trace of a report or dataset."""

from __future__ import annotations

from pathlib import Path

import click

from nvbridge.analysis import parse_time
from nvbridge.cli._common import errors, shown, steps
from nvbridge.conversion.memory import load_tables
from nvbridge.dataset.check import is_partitioned
from nvbridge.dataset.schema import ReportTables
from nvbridge.errors import ExportError
from nvbridge.export.trace import (
    Traces,
    check_destination,
    check_suffix,
    export_chrome_traces,
    first_event_ns,
    step_spans_in,
)
from nvbridge.export.trace_cuts import AUTO_STEP_EVENTS, ManyTraces, export_many, holds_ranks, step_path
from nvbridge.export.trace_source import open_source, plan


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
    help="Only ProfilerStep#A..#B, written A:B or A-B (or one step: A), each rank's own steps; not with --start/--end.",
)
@click.option("--process", "processes", type=int, multiple=True, help="Only this host process id (repeatable).")
@click.option("--ranks", "rank_text", default=None, help="Only these ranks, e.g. 0,3 (a report's or a dataset's).")
@click.option(
    "--split",
    type=click.Choice(["auto", "rank", "none", "step"]),
    default="auto",
    show_default=True,
    help="rank: one trace per rank, NAME.rank<K>.json.gz (as torch.profiler writes them and Holistic Trace "
    "Analysis reads them); none: one file; step: one per ProfilerStep, NAME.step<N>.json.gz (a run of many "
    "ranks too large for a browser); auto: per rank when a report holds several ranks, one file for a "
    "dataset of many reports.",
)
@click.option("--force", is_flag=True, help="Replace the output file(s) if they exist.")
def trace_cmd(
    path: Path,
    output: Path,
    start: str | None,
    end: str | None,
    step_text: str | None,
    processes: tuple[int, ...],
    rank_text: str | None,
    split: str,
    force: bool,
) -> None:
    """Write a Chrome/Perfetto trace of a report or dataset (Kineto conventions, flows included):
    one per rank for a report of several ranks, as torch.profiler writes them.

    A dataset directory is streamed a row group at a time; a report is converted in memory first.
    A dataset of many reports is one trace: each rank its own processes on the aligned clock,
    each collective joined across its ranks by flows.
    """
    step_range = steps(step_text)
    ranks = _ranks(rank_text)
    if step_range is not None and (start is not None or end is not None):
        raise click.UsageError("--steps and --start/--end both choose the window; pass one of them.")
    with errors():
        check_suffix(output)
        if split == "none":
            check_destination(output, force)
        # one report of several ranks drawn as one file: as a dataset of many (collectives, flows)
        many = is_partitioned(path) or (split in ("none", "step") and not processes and holds_ranks(path))
    if many:
        if processes:
            raise click.UsageError("a dataset of many reports is cut by rank: pass --ranks, not --process.")
        with errors():
            _say_many(
                export_many(
                    path, output, split=split, ranks=ranks, steps=step_range, start=_relative(start, end), force=force
                )
            )
        return
    with errors():
        source: Path | ReportTables = path
        if not path.is_dir():
            source = load_tables(path)  # a report, converted in memory once (the window's origin, the trace)
        start_ns, end_ns = _window(source, start, end)
        chosen = set(processes) | _rank_processes(source, ranks)
        jobs = [(output, step_range)]
        if split == "step":
            jobs = [(step_path(output, n), (n, n)) for n in _report_steps(source, step_range)]
            for dest, _ in jobs:
                check_destination(dest, force)
        for dest, window in jobs:
            written = export_chrome_traces(
                source,
                dest,
                split="none" if split == "step" else split,
                start_ns=start_ns,
                end_ns=end_ns,
                steps=window,
                processes=chosen or None,
                force=force,
            )
            _say(written)


def _ranks(text: str | None) -> set[int] | None:
    if text is None:
        return None
    try:
        return {int(t) for t in text.split(",") if t.strip()} or None
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a list of ranks; write it like 0,3", param_hint="--ranks") from None


def _relative(start: str | None, end: str | None) -> tuple[int | None, int | None]:
    """--start/--end as ns from the first event."""
    try:
        lo, hi = (None if t is None else round(parse_time(t) * 1e3) for t in (start, end))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--start/--end") from exc
    if lo is not None and hi is not None and hi <= lo:
        raise click.BadParameter(f"--end {end} is not later than --start {start}", param_hint="--start/--end")
    return lo, hi


def _rank_processes(source: Path | ReportTables, ranks: set[int] | None) -> set[int]:
    """The host processes of these ranks of one report (nvbridge.export.trace_ranks' rule)."""
    if ranks is None:
        return set()
    src = open_source(source)
    of = plan(src, None, None, None).ranks(src.meta).of
    missing = ranks - set(of.values())
    if missing:
        have = ", ".join(str(r) for r in sorted(set(of.values()))) or "none"
        raise ExportError(
            f"no rank {', '.join(map(str, sorted(missing)))} in the report (it has ranks {have}); "
            "pass those to --ranks."
        )
    return {p for p, r in of.items() if r in ranks}


def _report_steps(source: Path | ReportTables, within: tuple[int, int] | None) -> list[int]:
    n = sorted(set(step_spans_in(open_source(source))[0].tolist()))
    got = [k for k in n if within is None or within[0] <= k <= within[1]]
    if not got:
        raise ExportError("--split step: the report has no ProfilerStep#N ranges (in that range); split by rank.")
    return got


def _say_many(written: ManyTraces) -> None:
    if written.auto_step:
        click.echo(
            f"note: the whole run is more than {AUTO_STEP_EVENTS:,} events, too large for a browser: one trace "
            "per step; --split none writes one file.",
            err=True,
        )
    for stats in written.files:
        slices = [f"{v:,} {k}" for k, v in stats.slices.items()]
        parts = ", ".join([*slices, *(f"{v:,} {k} flows" for k, v in stats.flows.items())])
        click.echo(shown(f"Wrote {stats.path}: {parts}."))
        left = written.left_out.get(stats.path.name)
        if left:
            click.echo(
                f"note: rank {', '.join(map(str, left))} ran none of these steps; not in {stats.path.name}.", err=True
            )


def _say(written: Traces) -> None:
    """One line per file written (its rank where it holds one), then the notes."""
    for stats in written.files:
        counters = {"memory counters": stats.counters} if stats.counters else {}
        parts = ", ".join(f"{v:,} {k}" for k, v in {**stats.slices, **stats.flows, **counters}.items())
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
