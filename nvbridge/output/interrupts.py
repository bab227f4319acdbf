"""Interrupts on the command line: staging files and directories are removed and the process
exits at once (SIGINT, SIGTERM), except while names are being settled (publishing).

The staging names themselves and publishing live in :mod:`nvbridge.output.publish`, which registers what
it creates here (``LIVE``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

LIVE: set[Path] = set()  # staging files and directories of this process
_pending: list[int] = []  # signals that arrived inside deferred_interrupts()
_depth = 0


def remove(path: Path) -> None:
    """Remove a file, a symlink (never what it points to) or a directory tree."""
    if path.is_symlink() or not path.is_dir():
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
        return
    # A writer thread may still create a file in it while it is removed: try a few times.
    for _ in range(5):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT/SIGTERM (as handled by :func:`exit_on_interrupt`) until the block ends."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth and _pending:
            _on_signal(_pending.pop(), None)


def exit_on_interrupt() -> None:
    """Make SIGINT and SIGTERM remove this process's staging files and directories and exit at once.

    For the command line only (``nvbridge.cli.main``): the reader and writer threads are not waited for (a bulk
    read cannot be interrupted, and waiting for them took 3-6 s), nothing they write survives.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    if _depth:
        _pending.append(signum)
        return
    removed = bool(LIVE)
    for tmp in list(LIVE):
        remove(tmp)
    name = "interrupted" if signum == signal.SIGINT else "terminated"
    sys.stderr.write(f"\nnvbridge: {name}" + ("; the unfinished output was removed.\n" if removed else ".\n"))
    sys.stderr.flush()
    os._exit(128 + signum)
