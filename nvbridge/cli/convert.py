"""``nvbridge convert``: profiler databases -> Parquet dataset (and a trace)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nvbridge.cli._common import errors, progress, shown, wrapped
from nvbridge.conversion.many import convert
from nvbridge.readers import estimate_rows


@click.command("convert")
@click.argument("inputs", nargs=-1, required=True)
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=Path),
    help="Dataset directory to create (one sub-directory per report when several). Its folder must exist.",
)
@click.option(
    "--chrome",
    "chrome_trace",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write a Chrome/Perfetto trace (.json or .json.gz) in the same pass.",
)
@click.option(
    "--chrome-split",
    type=click.Choice(["auto", "rank", "none"]),
    default="auto",
    show_default=True,
    help="With --chrome: one trace per rank (NAME.rank<K>.json.gz, as Holistic Trace Analysis reads them), "
    "or one file (none); auto: per rank when the report holds several ranks.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace the output dataset (and trace) if they exist; with several "
    "reports, convert again the ones already converted. Only a dataset nvbridge wrote is replaced.",
)
@click.option(
    "-j",
    "--jobs",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Reports converted at once (local processes).",
)
@click.option("--scheduler", default=None, help="Convert on a Dask distributed scheduler (tcp://host:8786).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
def convert_cmd(
    inputs: tuple[str, ...],
    output: Path,
    chrome_trace: Path | None,
    chrome_split: str,
    force: bool,
    jobs: int,
    scheduler: str | None,
    quiet: bool,
) -> None:
    """Convert profiler databases (Nsight Systems or nvprof SQLite files, or SQLAlchemy URLs such as
    sqlite:///report.sqlite) into a Parquet dataset.

    Interrupted (Ctrl-C, SIGTERM), it removes what it had not finished and exits at once.
    """
    show = not quiet and sys.stderr.isatty()
    with errors():
        total = sum(estimate_rows(p) for p in inputs) if show else 0
        with progress(show, "converting", total) as report:
            results = convert(
                list(inputs),
                output,
                force=force,
                progress=report,
                chrome_trace=chrome_trace,
                chrome_split=chrome_split,
                jobs=jobs,
                scheduler=scheduler,
            )
    skipped = len(inputs) - len(results)
    if skipped and not quiet:
        click.echo(shown(f"Skipped {skipped} report(s) already in {output} (use --force to convert them again)."))
    if not quiet:
        for result in results:
            click.echo(shown(wrapped(result.describe())))
