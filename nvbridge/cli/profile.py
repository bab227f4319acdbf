"""``nvbridge profile``: from a training script to its summary table in one command."""

from __future__ import annotations

import shlex
import shutil
import tempfile
from pathlib import Path

import click

from nvbridge.cli._common import errors, shown, wrapped
from nvbridge.cli.summary import summary_cmd
from nvbridge.conversion.many import convert
from nvbridge.conversion.record import REPORT_SUFFIXES, record
from nvbridge.errors import ExportError
from nvbridge.output import publish as outputs


@click.command("profile", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=Path),
    help="Dataset directory to create (its folder must exist).",
)
@click.option("--force", is_flag=True, help="Replace the output dataset (and the kept report) if they exist.")
@click.option(
    "--keep-report",
    type=click.Path(path_type=Path),
    default=None,
    help="Also keep the Nsight Systems report at this path (rep.nsys-rep; by default it is removed).",
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
    nsys_options, command = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else ((), argv)
    with errors():
        outputs.check_destination(output, force, [])
        kept = None if keep_report is None else kept_path(keep_report)
        if kept is not None:
            outputs.check_file_destination(kept, force, "the report")
        if not command:
            raise click.ClickException(
                "give the command to profile after --, e.g. nvbridge profile -o out -- python train.py"
            )
        with tempfile.TemporaryDirectory(prefix="nvbridge-profile-") as work:
            # the report is named as the user will see it: the kept file's name, else the script's
            name = kept.stem if kept is not None else report_name(command)
            rep = record(list(command), Path(work) / name, nsys_options)
            if kept is not None:  # kept first: a conversion that fails leaves the recording to convert again
                rep = keep(rep, kept, force)
            [result] = convert(rep, output, force=force)  # exported to SQLite with nsys first
    what = f"the recording of `{shlex.join(command)}`" + (f" (kept in {kept})" if kept is not None else "")
    click.echo(shown(wrapped(result.describe(what))))
    ctx.invoke(summary_cmd, path=output, limit=limit)


def kept_path(path: Path) -> Path:
    """Where --keep-report keeps the report: ``path`` itself, with ``.nsys-rep`` added when it has
    no suffix.

    Raises:
        ExportError: another suffix (the report is an .nsys-rep, whatever the name says).
    """
    if not path.suffix:
        return path.with_name(path.name + ".nsys-rep")
    if path.suffix.lower() not in REPORT_SUFFIXES:
        raise ExportError(
            f"{path} does not end in .nsys-rep; name the report like {path.with_suffix('.nsys-rep').name}."
        )
    return path


def report_name(command: tuple[str, ...]) -> str:
    """The report's name for a command: its script's (``train`` for ``python train.py``), else
    its program's."""
    script = next((Path(a) for a in command[1:] if Path(a).suffix == ".py"), Path(command[0]))
    return script.stem or "report"


def keep(report: Path, dest: Path, force: bool) -> Path:
    """Move the recorded report to ``dest`` (checked before the run; checked again, as the run
    may have taken hours and something else may have written there since)."""
    outputs.check_file_destination(dest, force, "the report")
    with outputs.writing(dest, "the report"):
        shutil.move(report, dest)
    return dest
