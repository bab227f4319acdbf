"""``nvbridge plot``: one step or window as a timeline picture."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click

from nvbridge.cli._common import errors, shown, window
from nvbridge.conversion.many import convert
from nvbridge.conversion.memory import load_tables
from nvbridge.dataset.check import is_partitioned
from nvbridge.dataset.process_ranks import holds_ranks
from nvbridge.dataset.report import DatasetTables
from nvbridge.output import publish as outputs
from nvbridge.plot import memory as memory_plot
from nvbridge.plot import picture as plot
from nvbridge.plot import roofline as roof
from nvbridge.plot.ranks import dataset_steps, summary_stragglers
from nvbridge.plot.ranks_draw import render_ranks
from nvbridge.plot.window import extent


@click.command("plot")
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=Path),
    help="Picture to write: a .png, .svg or .pdf file (timeline.png).",
)
@click.option("--step", type=int, default=None, help="Draw ProfilerStep#N.")
@click.option(
    "--start",
    "start",
    default=None,
    help="Window start, from the first event (1.5s, 200ms; a bare number is microseconds).",
)
@click.option("--end", "end", default=None, help="Window end, from the first event.")
@click.option("--force", is_flag=True, help="Replace the picture if it exists.")
@click.option("--roofline", is_flag=True, help="Draw the roofline instead: ops by arithmetic intensity and TFLOP/s.")
@click.option("--peak-tflops", type=float, default=None, help="Roofline: peak TFLOP/s (default: the GPU table).")
@click.option("--peak-gbps", type=float, default=None, help="Roofline: peak memory bandwidth in GB/s.")
@click.option(
    "--memory",
    is_flag=True,
    help="Draw memory instead: live bytes per device over time, stacked by category, the peak labelled.",
)
@click.option(
    "--memory-blocks",
    is_flag=True,
    help="Draw memory blocks instead: each block of the window as a bar from allocation to free, by category.",
)
def plot_cmd(
    path: Path,
    output: Path,
    step: int | None,
    start: str | None,
    end: str | None,
    force: bool,
    roofline: bool,
    peak_tflops: float | None,
    peak_gbps: float | None,
    memory: bool = False,
    memory_blocks: bool = False,
) -> None:
    """Draw one step or window as a timeline picture: host threads above GPU streams, idle GPU shaded.

    A dataset of many reports is drawn per step: a bar per rank (compute, communication, copies,
    idle), the straggler marked.
    """
    if sum((roofline, memory, memory_blocks)) > 1:
        raise click.BadParameter(
            "draw one picture: pick one of --roofline, --memory, --memory-blocks", param_hint="--memory"
        )
    # one report whose processes marked several ranks: per rank too, unless a timeline is asked for
    with errors():
        several = not (roofline or memory or memory_blocks or start or end) and holds_ranks(path)
    if is_partitioned(path) or several:
        if roofline or memory or memory_blocks or start or end:
            raise click.BadParameter(
                "a dataset of many reports is drawn per step and rank; drop --roofline/--memory/--start/--end "
                "(--step N draws one step)",
                param_hint="PATH",
            )
        with errors():
            outputs.check_file_destination(plot.output_path(output), force, "the picture")
            figures = dataset_steps(path)
            named = summary_stragglers(path, figures)
            picture, steps, marked = render_ranks(figures, output, step=step, title=path.name, named=named)
        late = ", ".join(f"step {n}: rank {r}" for n, r in marked.items())
        click.echo(shown(f"Wrote {picture} ({len(steps)} steps; straggler {late})."))
        return
    if roofline and (step is not None or start or end):
        raise click.BadParameter(
            "the roofline covers the whole report; drop --step/--start/--end", param_hint="--roofline"
        )
    if step is not None and (start or end):
        raise click.BadParameter("give either --step or --start/--end, not both", param_hint="--step")
    with errors():
        outputs.check_file_destination(plot.output_path(output), force, "the picture")
        with _as_dataset(path) as dataset:
            report = load_tables(dataset, streamed=True)  # read a row group at a time
            if memory or memory_blocks:
                start_ns, end_ns = window(start, end, extent(report).first_ns or 0)
                drawn = memory_plot.render(
                    report, output, blocks=memory_blocks, step=step, start_ns=start_ns, end_ns=end_ns
                )
                written = f"Wrote {drawn}."
            else:
                written = _draw(report, output, step, start, end, roofline, peak_tflops, peak_gbps)
    click.echo(shown(written))


@contextlib.contextmanager
def _as_dataset(path: Path) -> Iterator[Path]:
    """``path`` if it is a dataset; a report database converted (streamed, as `convert` does) into
    a temporary dataset otherwise, so that a report of any size is drawn in bounded memory."""
    if path.is_dir():
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="nvbridge-plot-") as tmp:
        convert(path, Path(tmp) / "dataset")
        yield Path(tmp) / "dataset"


def _draw(
    report: DatasetTables,
    output: Path,
    step: int | None,
    start: str | None,
    end: str | None,
    roofline: bool,
    peak_tflops: float | None,
    peak_gbps: float | None,
) -> str:
    """Draw the picture; the line to print."""
    if roofline:
        rows, peaks = roof.streamed_points(report, peak_tflops, peak_gbps)
        drawn = roof.draw(rows, output, peaks)
        return f"Wrote {output} ({drawn} ops)."
    found = extent(report)
    start_ns, end_ns = window(start, end, found.first_ns or 0)
    written = plot.render(report, output, step=step, start_ns=start_ns, end_ns=end_ns, found=found)
    return f"Wrote {written}."
