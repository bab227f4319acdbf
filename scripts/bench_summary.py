"""Time `nvbridge summary` of one dataset with this tree against another checkout, in
alternating rounds, and print the medians and their ratio (this tree / baseline).

    python scripts/bench_summary.py DATASET /path/to/baseline/checkout [--rounds 5] [-- SUMMARY OPTIONS]

Make a large dataset with scripts/make_large_db.py and `nvbridge convert`, under /tmp.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def once(tree: Path, dataset: Path, options: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one summary run in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "nvbridge", "summary", str(dataset), *options],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/",
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("baseline", type=Path, help="a checkout of the revision to compare against")
    parser.add_argument("--rounds", type=int, default=5)
    argv = sys.argv[1:]
    options = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    args.options = options
    times: dict[str, list[tuple[float, float]]] = {"this tree": [], "baseline": []}
    once(ROOT, args.dataset, args.options)  # warm the page cache
    for _ in range(args.rounds):
        times["this tree"].append(once(ROOT, args.dataset, args.options))
        times["baseline"].append(once(args.baseline, args.dataset, args.options))
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in times.items()}
    for name, (wall, cpu) in med.items():
        print(f"{name:10} wall {wall:6.2f} s  CPU {cpu:6.2f} s  (median of {args.rounds})")
    print(
        f"ratio this/baseline: wall {med['this tree'][0] / med['baseline'][0]:.2f}x, "
        f"CPU {med['this tree'][1] / med['baseline'][1]:.2f}x"
    )


if __name__ == "__main__":
    main()
