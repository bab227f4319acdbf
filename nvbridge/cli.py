"""The ``nvbridge`` command: parse arguments, call one library function, translate errors."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import click

from nvbridge import __version__
from nvbridge.convert import Progress, convert
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
def _progress(enabled: bool, label: str) -> Iterator[Progress | None]:
    """A spinner with the current stage on stderr, only on a terminal."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress as Bar, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Bar(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
             console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label)
        yield lambda stage: bar.update(task, description=f"{label}: {stage}")


@click.group()
@click.version_option(__version__, prog_name="nvbridge")
def cli() -> None:
    """PyTorch-level answers from Nsight Systems and nvprof profiles."""


@cli.command("convert")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path),
              help="Dataset directory to create (one sub-directory per report when several).")
@click.option("--force", is_flag=True, help="Replace the output directory if it exists.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
def convert_cmd(inputs: tuple[Path, ...], output: Path, force: bool, quiet: bool) -> None:
    """Convert profiler databases (Nsight Systems or nvprof SQLite) into a Parquet dataset."""
    show = not quiet and sys.stderr.isatty()
    with _errors(), _progress(show, "converting") as progress:
        results = convert(list(inputs), output, force=force, progress=progress)
    if not quiet:
        for result in results:
            click.echo(result.describe())


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="nvbridge")
