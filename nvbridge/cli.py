"""The ``nvbridge`` command: parse arguments, call one library function, translate errors."""

from __future__ import annotations

import contextlib
import csv
import importlib.abc
import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pyarrow.compute as pc

from nvbridge import __version__
from nvbridge.analysis import SUMMARY_COLUMNS, format_time, merge_averages, parse_time, rank_facts, rank_summary
from nvbridge.convert import Progress, convert, estimate_rows, export_chrome_trace
from nvbridge.dataset import Report, is_partitioned, load, report_dirs
from nvbridge.errors import NvbridgeError


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """Bad input ends in one line on stderr and exit status 1, never a traceback."""
    try:
        yield
    except NvbridgeError as exc:
        raise click.ClickException(str(exc)) from exc
    except (KeyboardInterrupt, click.exceptions.Exit, click.ClickException):
        raise
    except Exception as exc:  # a bug of ours: still one line, and say where to send it
        raise click.ClickException(
            f"internal error ({type(exc).__name__}: {exc}); please report it with "
            f"nvbridge {__version__} and the command you ran."
        ) from exc


@contextlib.contextmanager
def _progress(enabled: bool, label: str, total_rows: int) -> Iterator[Progress | None]:
    """On a terminal: stage, rows done of the estimate, rows/s and time left, on stderr."""
    if not enabled:
        yield None
        return
    import time

    from rich.console import Console
    from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    with Bar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
             TextColumn("{task.completed:,.0f}/{task.total:,.0f} rows"), TextColumn("{task.fields[rate]}"),
             TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=max(total_rows, 1), rate="")
        start = time.perf_counter()

        def update(stage: str, rows: int) -> None:
            bar.update(task, description=f"{label}: {stage}", advance=rows)
            done, total = bar.tasks[task].completed, bar.tasks[task].total or 1
            elapsed = time.perf_counter() - start
            if done and elapsed > 0:
                rate = done / elapsed
                left = max(total - done, 0) / rate
                bar.update(task, rate=f"{rate:,.0f} rows/s, about {left:,.0f} s left")
        yield update


@click.group()
@click.version_option(__version__, prog_name="nvbridge")
def cli() -> None:
    """PyTorch-level answers from Nsight Systems and nvprof profiles."""


@cli.command("convert")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path),
              help="Dataset directory to create (one sub-directory per report when several).")
@click.option("--chrome", "chrome_trace", type=click.Path(path_type=Path), default=None,
              help="Also write a Chrome/Perfetto trace (.json or .json.gz) in the same pass.")
@click.option("--force", is_flag=True, help="Replace the output directory (and trace) if they exist; with several "
              "reports, convert again the ones already converted.")
@click.option("-j", "--jobs", default=1, show_default=True, help="Reports converted at once (local processes).")
@click.option("--scheduler", default=None, help="Convert on a Dask distributed scheduler (tcp://host:8786).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
def convert_cmd(inputs: tuple[Path, ...], output: Path, chrome_trace: Path | None, force: bool, jobs: int,
                scheduler: str | None, quiet: bool) -> None:
    """Convert profiler databases (Nsight Systems or nvprof SQLite) into a Parquet dataset."""
    show = not quiet and sys.stderr.isatty()
    total = sum(estimate_rows(p) for p in inputs) if show else 0
    with _errors(), _progress(show, "converting", total) as progress:
        results = convert(list(inputs), output, force=force, progress=progress, chrome_trace=chrome_trace,
                          jobs=jobs, scheduler=scheduler)
    skipped = len(inputs) - len(results)
    if skipped and not quiet:
        click.echo(f"Skipped {skipped} report(s) already in {output} (use --force to convert them again).")
    if not quiet:
        for result in results:
            click.echo(result.describe())


def _window(report: Report, start: str | None, end: str | None) -> tuple[int | None, int | None]:
    """--start/--end (times from the report's first event) -> absolute ns in the report's time base."""
    try:
        start_us = parse_time(start) if start else None
        end_us = parse_time(end) if end else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--start/--end") from exc
    origin = min((int(pc.min(t.column("start_ns")).as_py()) for t in (report.ops, report.api_calls, report.gpu_ops)
                  if t.num_rows), default=0)
    return (None if start_us is None else origin + int(start_us * 1e3),
            None if end_us is None else origin + int(end_us * 1e3))


def _steps(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    first, _, last = text.partition(":")
    try:
        return int(first), int(last or first)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a step range; write it like 3:5 or 4",
                                 param_hint="--steps") from None


@cli.command("trace")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path), help="trace.json or trace.json.gz")
@click.option("--start", "start", default=None, help="Window start, from the first event (e.g. 1.5s, 200ms).")
@click.option("--end", "end", default=None, help="Window end, from the first event.")
@click.option("--steps", default=None, help="Only ProfilerStep#A..#B, written A:B (or one step: A).")
@click.option("--process", "processes", type=int, multiple=True, help="Only this host process id (repeatable).")
def trace_cmd(path: Path, output: Path, start: str | None, end: str | None, steps: str | None,
              processes: tuple[int, ...]) -> None:
    """Write a Chrome/Perfetto trace of a report or dataset (Kineto conventions, flows included)."""
    step_range = _steps(steps)
    with _errors():
        report = load(path)
        start_ns, end_ns = _window(report, start, end)
        stats = export_chrome_trace(report, output, start_ns=start_ns, end_ns=end_ns, steps=step_range,
                                    processes=set(processes) or None)
    parts = ", ".join(f"{v:,} {k}" for k, v in {**stats.slices, **stats.flows}.items())
    click.echo(f"Wrote {output}: {parts}.")
    if stats.overlapping_gpu_ops:
        click.echo(f"note: {stats.overlapping_gpu_ops:,} GPU ops overlap an earlier op on their stream; "
                   "they are drawn on a separate 'overlap' track.", err=True)


@cli.command("plot")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path), help="Picture to write (timeline.png).")
@click.option("--step", type=int, default=None, help="Draw ProfilerStep#N.")
@click.option("--start", "start", default=None, help="Window start, from the first event (e.g. 1.5s, 200ms).")
@click.option("--end", "end", default=None, help="Window end, from the first event.")
def plot_cmd(path: Path, output: Path, step: int | None, start: str | None, end: str | None) -> None:
    """Draw one step or window as a timeline picture: host threads above GPU streams, idle GPU shaded."""
    if step is not None and (start or end):
        raise click.BadParameter("give either --step or --start/--end, not both", param_hint="--step")
    with _errors():
        from nvbridge import plot

        report = load(path)
        start_ns, end_ns = _window(report, start, end)
        plot.render(report, output, step=step, start_ns=start_ns, end_ns=end_ns)
    click.echo(f"Wrote {output}.")


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} B"


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
        copies = ", ".join(f"{k} {_bytes(v)}" for k, v in d["memcpy_bytes"].items()) or "none"  # type: ignore[attr-defined]
        where = f"{d['report']}: " if d.get("report") and d.get("several") else ""
        lines.append(
            f"{where}GPU {d['device_id']} ({d['name'] or 'unnamed'}): busy {format_time(d['busy_ns'] / 1e3)} of "  # type: ignore[operator]
            f"{format_time(d['span_ns'] / 1e3)} ({100 * d['idle_share']:.1f}% idle), "  # type: ignore[operator]
            f"{d['kernels']:,} kernels, {d['gpu_ops']:,} GPU ops, memcpy: {copies}")
    return lines


@cli.command("summary")
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
def summary_cmd(path: Path, sort_by: str, limit: int, group_by: str, stack_depth: int, min_time: str,
                name_regex: str | None, device: int | None, top_level: bool, as_csv: bool, as_json: bool) -> None:
    """Print a torch-style key_averages table for a report or a converted dataset."""
    with _errors():
        try:
            min_us = parse_time(min_time)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--min-time") from exc
        # A partitioned dataset is read one report at a time: memory holds the largest report
        # and the per-report aggregates, however many ranks the run had.
        sources: list[Path] = report_dirs(path) if is_partitioned(path) else [path]
        several = len(sources) > 1
        parts, facts, gpu = [], [], []
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
            del report
        averages = parts[0] if len(parts) == 1 else merge_averages(parts)
        ranks = rank_summary(facts) if several else None
        try:
            rows = averages.sorted(sort_by, limit, name_regex, min_us)
            text = averages.table(sort_by, limit, name_regex, min_us)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--sort") from exc
    if as_json:
        click.echo(json.dumps({"gpu": gpu, "ranks": ranks, "rows": rows.to_pylist()}, indent=1))
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


def _use_system_allocator() -> None:
    """Let Arrow allocate through malloc, as NumPy does, instead of its bundled mimalloc.

    mimalloc backs its arenas with transparent huge pages and hands freed ones back to the
    kernel, so a conversion that allocates and frees hundreds of MB makes the kernel zero
    fresh 2 MB pages over and over: on a 2-core VM that was a third of all CPU time (perf:
    ``clear_page_erms``). With malloc, system time at 2M NVTX rows fell from 4-6 s to 2-3 s.
    Only the command's own process is changed; the library leaves a host program's pool alone.
    """
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    # One malloc arena for every thread: the reader threads' buffers, freed by the main
    # thread, are then reused by the next window instead of lingering in per-thread arenas
    # (at 10M NVTX rows: 12 s instead of 14-16 s, and 300 MB less peak memory).
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-8, 1)  # M_ARENA_MAX (glibc)


class _NoPandas(importlib.abc.MetaPathFinder):
    """An import hook that reports pandas as absent."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas":
            raise ModuleNotFoundError("pandas is not used by nvbridge's commands", name=name)


def _skip_pandas_integration() -> None:
    """Keep pyarrow from importing pandas in the command's process.

    pyarrow imports all of pandas, when it is installed, at its first array conversion, to
    recognise pandas objects: 0.4 s of CPU at every start and 40 MB (at 2M NVTX rows, 5.4 s of
    CPU for a conversion became 5.0 s). No command hands pandas objects to pyarrow. pyarrow
    asks once and keeps the answer; ``import pandas`` and ``to_pandas()`` still work after.
    """
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(finder)


def main() -> None:
    """Console-script entry point.

    After the command finishes, the process exits without tearing down the interpreter: freeing
    millions of table rows one buffer at a time took 0.3-0.4 s after a large conversion, and
    every file is already closed and every output flushed by then.
    """
    _use_system_allocator()
    _skip_pandas_integration()
    try:
        cli(prog_name="nvbridge", standalone_mode=False)
        code = 0
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
