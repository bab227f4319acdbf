"""``nvbridge report``: one self-contained HTML page of a report (docs/report.md)."""

from __future__ import annotations

from pathlib import Path

import click

from nvbridge.cli._common import errors, shown
from nvbridge.errors import OptionError
from nvbridge.page import report


@click.command("report")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path), help="The page to write (report.html).")
@click.option("--step", type=int, default=None, help="Draw the timeline of ProfilerStep#N (default: the median step).")
@click.option(
    "--compare",
    type=click.Path(path_type=Path),
    default=None,
    help="A second run (B): add diff's comparison and both runs' per-step bars.",
)
@click.option(
    "--advise-ops",
    type=int,
    default=500_000,
    show_default=True,
    help="Advise a report with more ops over the chosen step only (-1: always the whole report).",
)
@click.option("--peak-tflops", type=float, default=None, help="Peak TFLOP/s for % of peak, MFU and the roofline.")
@click.option(
    "--peak-gbps", type=float, default=None, help="Peak memory bandwidth in GB/s for % of peak and the roofline."
)
@click.option("--force", is_flag=True, help="Replace the page if it exists.")
def report_cmd(
    path: Path,
    output: Path,
    step: int | None,
    compare: Path | None,
    advise_ops: int,
    peak_tflops: float | None,
    peak_gbps: float | None,
    force: bool,
) -> None:
    """Write one self-contained HTML page of a report or dataset: opens from disk, no network."""
    if advise_ops < -1:
        raise click.BadParameter(
            f"{advise_ops} ops cannot be read; give a count, or -1 for always", param_hint="--advise-ops"
        )
    with errors():
        try:
            written = report(
                path,
                output,
                step=step,
                compare=compare,
                advise_ops=advise_ops,
                peak_tflops=peak_tflops,
                peak_gbps=peak_gbps,
                force=force,
            )
        except OptionError as exc:
            if step is None:  # an empty report: errors() prints it as one line
                raise
            raise click.BadParameter(str(exc), param_hint="--step") from exc
    click.echo(shown(f"Wrote {written}."))
