"""``python -m nvbridge`` and the ``nvbridge`` command: Ctrl-C is quiet from the first instant.

Loading the command's modules (pyarrow, numpy, the readers) takes a few tenths of a second; an
interrupt in that time would otherwise print a KeyboardInterrupt traceback from inside an
import. A plain handler takes SIGINT until the command line installs its own
(nvbridge.output.publish.exit_on_interrupt), which also removes unfinished output.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType


def _interrupted(signum: int, _frame: FrameType | None) -> None:
    sys.stderr.write("\nnvbridge: interrupted.\n")
    sys.stderr.flush()
    os._exit(128 + signum)


def main() -> None:
    """Entry point: the quiet handler, then the command line."""
    signal.signal(signal.SIGINT, _interrupted)
    from nvbridge.cli import main as command

    command()


if __name__ == "__main__":
    main()
