"""``nvbridge plot``: one step or window as a timeline picture."""

from __future__ import annotations

from pathlib import Path

import click

from nvbridge import output as outputs
from nvbridge.cli._common import errors, shown, window
from nvbridge.dataset import load
from nvbridge.plot_window import extent


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
) -> None:
    """Draw one step or window as a timeline picture: host threads above GPU streams, idle GPU shaded."""
    if roofline and (step is not None or start or end):
        raise click.BadParameter(
            "the roofline covers the whole report; drop --step/--start/--end", param_hint="--roofline"
        )
    if step is not None and (start or end):
        raise click.BadParameter("give either --step or --start/--end, not both", param_hint="--step")
    with errors():
        from nvbridge import plot

        outputs.check_file_destination(plot.output_path(output), force, "the picture")
        report = load(path, streamed=True)  # a dataset is read a row group at a time
        if roofline:
            from nvbridge import roofline as roof

            rows, peaks = roof.streamed_points(report, peak_tflops, peak_gbps)
            drawn = roof.draw(rows, output, peaks)
            click.echo(shown(f"Wrote {output} ({drawn} ops)."))
            return
        found = extent(report)
        start_ns, end_ns = window(start, end, found.first_ns or 0)
        written = plot.render(report, output, step=step, start_ns=start_ns, end_ns=end_ns, found=found)
    click.echo(shown(f"Wrote {written}."))
