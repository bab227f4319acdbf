"""``python -m nvbridge`` and the ``nvbridge`` command: Ctrl-C is quiet from the first instant.

Loading the command's modules (pyarrow, numpy, the readers) takes a few tenths of a second; an
interrupt in that time would otherwise print a KeyboardInterrupt traceback from inside an
import. A plain handler takes SIGINT until the command line installs its own
(nvbridge.output.publish.exit_on_interrupt), which also removes unfinished output.

This is the process nvbridge owns, so it is where the environment is set (``import nvbridge``
changes nothing): Arrow's mimalloc hands freed pages back to the system at once.
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
    """Entry point: the quiet handler, the allocator's setting, then the command line."""
    signal.signal(signal.SIGINT, _interrupted)
    # Arrow's allocator (mimalloc) hands freed pages back to the system only after a delay: a
    # streamed conversion frees a window's buffers every few milliseconds, and at 10M NVTX rows the
    # delay kept 0.2-0.3 GB of them resident. Read once, when pyarrow loads (the command line
    # loads it next), and inherited by the conversion's worker processes.
    os.environ.setdefault("MIMALLOC_PURGE_DELAY", "0")
    # The command's Arrow pool (jemalloc where pyarrow has it) and malloc's arenas, set before the
    # command's modules load (the readers among them: loaded first, a 2M-row conversion took
    # 600K page faults instead of 250K).
    from nvbridge.output.process import set_up_process

    set_up_process()
    from nvbridge.cli import main as command

    command()


if __name__ == "__main__":
    main()
