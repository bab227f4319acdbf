#!/usr/bin/env python3
"""What ``emit_nvtx(profile_memory=True)`` costs per allocator event, with and without a collector.

    python scripts/bench_annotate.py [--allocs N] [--repeat N]          # test collector
    nsys profile -t nvtx -o /tmp/b -f true python scripts/bench_annotate.py   # under Nsight Systems

Two bodies: ``allocs``, N ``torch.empty(256)`` in a loop (each one allocation and one free: two
events, nothing else), and ``cnn steps``, ten times the three training steps of
scripts/workloads/memory.py's CNN (forward, backward, SGD). Two phases, each in a fresh
interpreter (NVTX reads its injection variable once per process, at the first call):

- collector: nsys when this script runs under ``nsys profile``, else the test collector
  (scripts/workloads/collector.c, logging to /dev/null). ``emit_nvtx(modules=False)`` against
  ``emit_nvtx(modules=False, profile_memory=True)``: the op ranges are paid by both, so the
  difference is the allocator marks alone.
- no collector: no annotation against the reporter started directly (emit_nvtx installs nothing
  without a collector, and then NVTX calls are no-ops: what is left is the reporter's own work:
  formatting the message, c10's size table and counters).

Within a phase the two modes of a pair take turns, round after round, each going first every
other round (a shared machine drifts);
each round collects garbage, enters the mode, runs the body once untimed and once timed. A mode's
number is the median of ``--repeat`` timed runs. Printed per body and phase: the median without
and with, the events one body makes (the reporter's own count), microseconds added per event,
events per second with recording on, and the ratio with/without.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a file: scripts.* and nvbridge from this checkout
Mode = Callable[[], contextlib.AbstractContextManager[Any]]


def _bodies(allocs: int) -> dict[str, Callable[[], None]]:
    import torch

    from scripts.workloads.memory import build

    def alloc_loop() -> None:
        for _ in range(allocs):
            torch.empty(256)

    training = build("cnn")

    def cnn_steps() -> None:
        for _ in range(10):
            training.run()

    return {f"allocs ({allocs})": alloc_loop, "cnn steps (30)": cnn_steps}


def _timed(modes: dict[str, Mode], body: Callable[[], None], repeat: int) -> dict[str, float]:
    """Median seconds of one steady-state ``body()`` per mode, the modes taking turns each round."""
    samples: dict[str, list[float]] = {name: [] for name in modes}
    for round_ in range(repeat):
        order = list(modes.items())
        for name, mode in order if round_ % 2 == 0 else order[::-1]:  # neither mode always goes first
            gc.collect()
            with mode():
                body()
                start = time.perf_counter()
                body()
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


@contextlib.contextmanager
def _reporter() -> Iterator[None]:
    from nvbridge.annotate import _observer

    observer = _observer.load()
    assert observer is not None, _observer.unavailable_reason()
    assert observer.memory_start() == 1
    try:
        yield
    finally:
        observer.memory_stop()


def _pairs(collector: bool) -> dict[str, tuple[Mode, Mode]]:
    from nvbridge.annotate import emit_nvtx

    if collector:
        return {
            "emit_nvtx vs + profile_memory": (
                lambda: emit_nvtx(modules=False),
                lambda: emit_nvtx(modules=False, profile_memory=True),
            )
        }
    return {"none vs reporter": (contextlib.nullcontext, _reporter)}


def _events(body: Callable[[], None]) -> int:
    """Allocator events one ``body()`` makes (the reporter's own count)."""
    from nvbridge.annotate import _observer

    observer = _observer.load()
    assert observer is not None
    with _reporter():
        before = observer.memory_events()
        body()
        return int(observer.memory_events() - before)


def phase(collector: bool, allocs: int, repeat: int) -> list[dict[str, Any]]:
    """Every (body, pair) of one phase: medians without and with, and the events per body."""
    import torch

    torch.set_num_threads(1)
    rows = []
    for body_name, body in _bodies(allocs).items():
        events = _events(body)
        for pair_name, (without, with_) in _pairs(collector).items():
            times = _timed({"without": without, "with": with_}, body, repeat)
            rows.append({"body": body_name, "pair": pair_name, "events": events, **times})
    return rows


def _child(collector: str | None, args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    env = dict(os.environ)
    env.pop("NVTX_INJECTION64_PATH", None)
    if collector is not None:
        env["NVTX_INJECTION64_PATH"] = collector
        env["NVBRIDGE_NVTX_LOG"] = "/dev/null"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    out = workdir / "phase.json"
    argv = [sys.executable, str(Path(__file__).resolve()), "--phase", "collector" if collector else "none"]
    argv += ["--allocs", str(args.allocs), "--repeat", str(args.repeat), "--out", str(out)]
    subprocess.run(argv, env=env, check=True, cwd=ROOT)
    rows: list[dict[str, Any]] = json.loads(out.read_text())
    return rows


def _print(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    print(f"{'body':<16} {'pair':<30} {'without':>11} {'with':>11} {'events':>7} ", end="")
    print(f"{'us/event':>9} {'events/s':>10} {'ratio':>6}")
    for r in rows:
        added_us = (r["with"] - r["without"]) * 1e6 / max(r["events"], 1)
        rate = r["events"] / r["with"] if r["with"] > 0 else float("nan")
        print(
            f"{r['body']:<16} {r['pair']:<30} {r['without'] * 1e3:>9.2f}ms {r['with'] * 1e3:>9.2f}ms "
            f"{r['events']:>7} {added_us:>9.2f} {rate:>10.0f} {r['with'] / r['without']:>6.2f}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--allocs", type=int, default=20000, help="torch.empty calls in the allocation loop")
    ap.add_argument("--repeat", type=int, default=7, help="timed runs per mode (the median is printed)")
    ap.add_argument("--phase", choices=("collector", "none"), help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase is not None:
        args.out.write_text(json.dumps(phase(args.phase == "collector", args.allocs, args.repeat)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        injection = os.environ.get("NVTX_INJECTION64_PATH")
        under_nsys = injection is not None and ("nsight" in injection.lower() or "ToolsInjection" in injection)
        name = "nsys" if under_nsys else "test collector (collector.c)"
        if injection is None or not under_nsys:
            from scripts.workloads.collector import build_injection

            injection = str(build_injection(workdir))
        _print(f"collector: {name}", _child(injection, args, workdir))
        _print("no collector", _child(None, args, workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
