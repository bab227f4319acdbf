"""Time `nvbridge summary` of one dataset with this tree against another checkout, in
alternating rounds, and print the medians of wall time, CPU time and peak RSS and their ratios
(this tree / baseline).

    python scripts/bench_summary.py DATASET /path/to/baseline/checkout [--rounds 5] [-- SUMMARY OPTIONS]
    python scripts/bench_summary.py DATASET BASELINE --plot="--start 10s --end 10.2s"   # + nvbridge plot

Peak RSS is each run's own (ru_maxrss from wait4), not the benchmark's. ``--plot ARGS`` also runs
`nvbridge plot DATASET -o TMP.png ARGS` in the same rounds (a plot that exits 1, e.g. a roofline
of a report without FLOPs, is still timed: it has read the report by then). Make a large dataset
with scripts/make_large_db.py and `nvbridge convert`, under /tmp.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def once(tree: Path, command: list[str], allowed: tuple[int, ...] = (0,)) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one ``python -m nvbridge COMMAND`` in a fresh process."""
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "nvbridge", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/",
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in allowed:
        raise SystemExit(f"nvbridge {' '.join(command)} with {tree} exited {child.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("baseline", type=Path, help="a checkout of the revision to compare against")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--plot", help="also time `nvbridge plot DATASET -o TMP.png` with these options")
    argv = sys.argv[1:]
    options = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    commands: dict[str, tuple[list[str], tuple[int, ...]]] = {
        "summary": (["summary", str(args.dataset), *options], (0,))
    }
    with tempfile.TemporaryDirectory() as tmp:
        if args.plot is not None:
            picture = ["plot", str(args.dataset), "-o", str(Path(tmp) / "p.png"), "--force", *shlex.split(args.plot)]
            commands["plot"] = (picture, (0, 1))
        runs: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
        for command, allowed in commands.values():
            once(ROOT, command, allowed)  # warm the page cache
        for _ in range(args.rounds):
            for name, (command, allowed) in commands.items():
                runs.setdefault((name, "this tree"), []).append(once(ROOT, command, allowed))
                runs.setdefault((name, "baseline"), []).append(once(args.baseline, command, allowed))
    for name in commands:
        med = {
            tree: tuple(statistics.median(run[i] for run in runs[(name, tree)]) for i in range(3))
            for tree in ("this tree", "baseline")
        }
        for tree, (wall, cpu, rss) in med.items():
            rounds = f"(median of {args.rounds})"
            print(f"{name:8} {tree:10} wall {wall:6.2f} s  CPU {cpu:6.2f} s  peak {rss:7.0f} MB  {rounds}")
        this, base = med["this tree"], med["baseline"]
        print(
            f"{name:8} ratio this/baseline: wall {this[0] / base[0]:.2f}x, CPU {this[1] / base[1]:.2f}x, "
            f"peak RSS {this[2] / base[2]:.2f}x"
        )


if __name__ == "__main__":
    main()
