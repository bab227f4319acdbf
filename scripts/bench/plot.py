"""Time `nvbridge plot` of reports or datasets with this tree against another checkout and print
wall time, CPU time, peak RSS and their ratios (baseline / this tree).

    python -m scripts.bench.plot INPUT... --baseline /path/to/checkout [--rounds 3] [--timeout 600] [-- PLOT OPTIONS]

Each run is a fresh ``python -m nvbridge plot INPUT -o TMP.png OPTIONS`` (peak RSS is its own,
ru_maxrss from wait4). A baseline run still going after --timeout seconds is stopped and shown
as ``>TIMEOUT``: the old per-op drawing takes minutes on a large report. Make large inputs with
scripts/bench/large_db.py (and `nvbridge convert` for a dataset), under /tmp, e.g.

    python -m scripts.bench.large_db ../shared/real_db/nsys-2021-pre-metadata.sqlite /tmp/big.sqlite --tiles 11
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from scripts.bench.measure import nvbridge_run
from scripts.paths import ROOT


def _median(runs: list[tuple[float, float, float] | None], i: int) -> float | None:
    done = [r[i] for r in runs if r is not None]
    return statistics.median(done) if len(done) == len(runs) else None


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("inputs", nargs="+", type=Path)
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout of the revision to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before a run is stopped")
    argv = sys.argv[1:]
    options = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    print(f"{'input':<28} {'tree':<9} {'wall s':>9} {'CPU s':>9} {'RSS MB':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.inputs:
            command = ["plot", str(path), "-o", str(Path(tmp) / "p.png"), "--force", *options]
            runs: dict[str, list[tuple[float, float, float] | None]] = {"this": [], "baseline": []}
            for _ in range(args.rounds):  # alternating, so load on the machine hits both alike
                runs["this"].append(nvbridge_run(ROOT, command, args.timeout))
                if not runs["baseline"] or runs["baseline"][-1] is not None:  # a timed-out baseline once is enough
                    runs["baseline"].append(nvbridge_run(args.baseline, command, args.timeout))
            figures = {}
            for tree, done in runs.items():
                figures[tree] = [_median(done, i) for i in range(3)]
                late = [f"{'>' + str(int(args.timeout)):>9}", f"{'-':>9}", f"{'-':>9}"]  # stopped: wall only
                text = [f"{v:9.2f}" if v is not None else late[i] for i, v in enumerate(figures[tree])]
                print(f"{path.name[:28]:<28} {tree:<9} {' '.join(text)}")
            ratios = [
                f"{b / t:9.1f}x"
                if b is not None and t
                else f"{'>' + format(args.timeout / t, '.0f'):>9}x"
                if t and i == 0
                else f"{'-':>10}"
                for i, (b, t) in enumerate(zip(figures["baseline"], figures["this"]))
            ]
            print(f"{'':<28} {'ratio':<9} {' '.join(ratios)}  (baseline / this tree)")


if __name__ == "__main__":
    main()
