"""Time `nvbridge summary` of one dataset with this tree against another checkout, in
alternating rounds, and print the medians of wall time, CPU time and peak RSS and their ratios
(this tree / baseline).

    python -m scripts.bench.summary DATASET /path/to/baseline/checkout [--rounds 5] [-- SUMMARY OPTIONS]
    python -m scripts.bench.summary DATASET BASELINE --plot="--start 10s --end 10.2s"   # + nvbridge plot

Peak RSS is each run's own (ru_maxrss from wait4), not the benchmark's. ``--plot ARGS`` also runs
`nvbridge plot DATASET -o TMP.png ARGS` in the same rounds (a plot that exits 1, e.g. a roofline
of a report without FLOPs, is still timed: it has read the report by then). Make a large dataset
with scripts/bench/large_db.py and `nvbridge convert`, under /tmp.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from scripts.bench.measure import Measured, nvbridge_run
from scripts.paths import ROOT


def once(tree: Path, command: list[str], allowed: tuple[int, ...] = (0,)) -> Measured:
    """(wall s, CPU s, peak RSS MB) of one ``python -m nvbridge COMMAND`` in a fresh process."""
    measured = nvbridge_run(tree, command, allowed=allowed)
    assert measured is not None  # no timeout
    return measured


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
