"""``nvbridge profile``: from a training script to its summary table in one command."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import click

from nvbridge import output as outputs
from nvbridge.cli._common import errors, shown
from nvbridge.conversion import convert
from nvbridge.profiling import record


@click.command("profile", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=Path),
    help="Dataset directory to create (its folder must exist).",
)
@click.option("--force", is_flag=True, help="Replace the output dataset if it exists.")
@click.option(
    "--keep-report",
    type=click.Path(path_type=Path),
    default=None,
    help="Also keep the .nsys-rep report at this path (by default it is removed after conversion).",
)
@click.option("--limit", default=20, show_default=True, help="Rows of the summary table to print (-1: all).")
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def profile_cmd(
    ctx: click.Context, output: Path, force: bool, keep_report: Path | None, limit: int, argv: tuple[str, ...]
) -> None:
    """Profile a command under Nsight Systems, convert the report and print its summary.

    \b
    nvbridge profile -o out -- python train.py --epochs 1
    nvbridge profile -o out --duration=60 -- python train.py   (nsys options before --)

    Anything before `--` goes to `nsys profile`, after nvbridge's own trace flags (CUDA, NVTX,
    cuBLAS, cuDNN, OS runtime; no CPU sampling), so it wins.
    """
    from nvbridge.cli.summary import summary_cmd

    nsys_options, command = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else ((), argv)
    with errors():
        outputs.check_destination(output, force, [])
        if keep_report is not None:
            outputs.check_file_destination(keep_report.with_suffix(".nsys-rep"), force, "the report")
        if not command:
            raise click.ClickException(
                "give the command to profile after --, e.g. nvbridge profile -o out -- python train.py"
            )
        with tempfile.TemporaryDirectory(prefix="nvbridge-profile-") as work:
            rep = record(list(command), Path(work) / "report", nsys_options)
            [result] = convert(rep, output, force=force)  # exported to SQLite with nsys first
            if keep_report is not None:
                shutil.move(rep, keep_report.with_suffix(rep.suffix))
    click.echo(shown(result.describe()))
    ctx.invoke(summary_cmd, path=output, limit=limit)
