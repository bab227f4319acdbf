"""Ctrl-C while the command line loads its modules ends quietly (issue 25, item 15): an
interrupt in the first tenths of a second printed a 26-line KeyboardInterrupt traceback from
inside an import."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.conftest import SAMPLE_DB

# The interpreter's own start-up (site) is not ours to handle: the child says when it is done,
# then runs the command as `python -m nvbridge` does, and the interrupts come after that.
CHILD = (
    "import sys; print('ready', flush=True); sys.argv = ['nvbridge', 'summary', sys.argv[1]]; "
    "from nvbridge.__main__ import main; main()"
)


def test_interrupt_while_loading_prints_no_traceback() -> None:
    sample = str(SAMPLE_DB / "cnn_cpu.sqlite")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    for delay in (0.02, 0.1, 0.2, 0.3, 0.45):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, sample], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        text = err.decode()
        assert "Traceback" not in text and "KeyboardInterrupt" not in text, (delay, text)
        assert proc.returncode in (0, 128 + signal.SIGINT, -signal.SIGINT), (delay, proc.returncode, text)
