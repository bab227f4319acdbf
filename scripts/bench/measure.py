"""One ``python -m nvbridge ...`` run, timed: wall time, CPU time and its own peak RSS.

Peak RSS is the child's (``ru_maxrss`` from ``wait4``), never the benchmark's. The child runs
the nvbridge found in ``tree`` (a checkout: this one, or a baseline's), from ``/`` so that no
other copy on the path is picked up, in its own session so a timeout stops all it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

Measured = tuple[float, float, float]  # wall s, CPU s (user + system), peak RSS MB


def nvbridge_run(
    tree: Path, argv: list[str], timeout: float | None = None, allowed: tuple[int, ...] = (0,)
) -> Measured | None:
    """(wall s, CPU s, peak RSS MB) of ``python -m nvbridge ARGV`` with ``tree``'s nvbridge;
    None when it ran past ``timeout`` seconds (it is killed). An exit status not in ``allowed``
    stops the benchmark."""
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "nvbridge", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/",
        env={**os.environ, "PYTHONPATH": str(tree)},
        start_new_session=True,
    )
    while True:
        pid, status, usage = os.wait4(child.pid, 0 if timeout is None else os.WNOHANG)
        if pid:
            break
        if timeout is not None and time.perf_counter() - start > timeout:
            os.killpg(child.pid, signal.SIGKILL)
            os.wait4(child.pid, 0)
            return None
        time.sleep(0.05)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in allowed:
        raise SystemExit(f"nvbridge {' '.join(argv)} with {tree} exited {code}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024
