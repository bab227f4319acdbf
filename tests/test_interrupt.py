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


def test_interrupt_while_loading_prints_no_traceback() -> None:
    """Ctrl-C in the command's first tenths of a second (its modules loading) ends quietly."""
    sample = str(SAMPLE_DB / "cnn_cpu.sqlite")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    for delay in (0.1, 0.2, 0.3, 0.45):
        proc = subprocess.Popen(
            [sys.executable, "-m", "nvbridge", "summary", sample],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=env,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        text = err.decode()
        assert "Traceback" not in text and "KeyboardInterrupt" not in text, (delay, text)
        assert proc.returncode in (0, 128 + signal.SIGINT, -signal.SIGINT), (delay, proc.returncode, text)
