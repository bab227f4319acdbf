"""What every command shares: error translation, progress, time windows and formatting."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import textwrap
from collections.abc import Iterator

import click

from nvbridge._version import __version__
from nvbridge.analysis import parse_time
from nvbridge.conversion.pipeline import Progress
from nvbridge.errors import NvbridgeError
from nvbridge.output.names import printable


@contextlib.contextmanager
def errors() -> Iterator[None]:
    """Bad input ends in one line on stderr and exit status 1, never a traceback. The line is
    printable whatever names it holds (a newline or bytes that are not UTF-8 in a file name)."""
    try:
        yield
    except NvbridgeError as exc:
        raise click.ClickException(printable(str(exc))) from exc
    except (KeyboardInterrupt, click.exceptions.Exit, click.ClickException):
        raise
    except Exception as exc:  # a bug of ours: still one line, and say where to send it
        raise click.ClickException(
            printable(
                f"internal error ({type(exc).__name__}: {exc}); please report it with "
                f"nvbridge {__version__} and the command you ran."
            )
        ) from exc


def shown(text: str) -> str:
    """A message naming files, each of its lines printable (a name with a newline, or bytes that are
    not UTF-8, escaped as in error lines)."""
    return "\n".join(printable(line) for line in text.split("\n"))


@contextlib.contextmanager
def progress(enabled: bool, label: str, total_rows: int) -> Iterator[Progress | None]:
    """On a terminal: stage, rows done of the estimate, rows/s and time left, on stderr."""
    if not enabled:
        yield None
        return
    import time

    from rich.console import Console
    from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    with Bar(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(bar_width=BAR_WIDTH),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=max(total_rows, 1), rate="")
        start = time.perf_counter()

        def update(stage: str, rows: int) -> None:
            bar.update(task, advance=rows)
            done, total = bar.tasks[task].completed, bar.tasks[task].total or 1
            description, rate = status(label, stage, done, total, time.perf_counter() - start)
            bar.update(task, description=description, rate=rate)

        yield update


BAR_WIDTH = 16  # with the spinner, elapsed time and status, a line fits an 80-column terminal


def status(label: str, stage: str, done: float, total: float, elapsed: float) -> tuple[str, str]:
    """The progress line's description and rate text: rows, rows/s and time left where the stage
    is counted in rows; nothing where it is not (the trace), rather than a wrong estimate."""
    description = stage if stage else label
    if stage.startswith("writing trace") or not done or elapsed <= 0:
        return description, ""
    rate = done / elapsed
    left = max(total - done, 0) / rate
    return description, f"{_short(done)}/{_short(total)}, {_short(rate)} rows/s, {left:,.0f} s left"


def _short(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def window(start: str | None, end: str | None, origin: int) -> tuple[int | None, int | None]:
    """--start/--end (times from the report's first event, ``origin``; a bare number is
    microseconds) -> absolute ns in the report's time base."""
    try:
        start_us = parse_time(start) if start else None
        end_us = parse_time(end) if end else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--start/--end") from exc
    return (
        None if start_us is None else origin + int(start_us * 1e3),
        None if end_us is None else origin + int(end_us * 1e3),
    )


def steps(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    first, _, last = text.replace("-", ":", 1).partition(":") if ":" not in text else text.partition(":")
    try:
        return int(first), int(last or first)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a step range; write it like 3:5, 3-5 or 4", param_hint="--steps"
        ) from None


def human_bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} B"


def terminal_width() -> int | None:
    """The columns output should fit: ``COLUMNS`` where set, else the terminal's width when
    stdout is one; None for a pipe or file (a script reads whole lines)."""
    text = os.environ.get("COLUMNS", "").strip()
    if text.isdigit() and int(text) > 0:
        return int(text)
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def wrapped(text: str) -> str:
    """A paragraph wrapped to :func:`terminal_width` (one line where there is none); an indented
    line's continuations are indented two more spaces, so a list still reads as one."""
    width = terminal_width()
    if not width:
        return text
    indent = text[: len(text) - len(text.lstrip(" "))]
    return textwrap.fill(
        text, width, break_on_hyphens=False, break_long_words=False, subsequent_indent=indent + "  " if indent else ""
    )
