#!/usr/bin/env python3
"""Time ``advise`` and ``diff`` on a large dataset, as ratios to loading it and to ``summary``.

    python -m scripts.bench.advise [--tiles 30] [--rounds 3]

Tiles the real FSDP export in time (scripts/bench/large_db.py; cached in bench_out/, never in the
repository), converts it once, then per round times, in this process: ``load`` of the dataset,
the summary tables (key_averages + GPU header), ``advise_report`` on the loaded report, and
``diff_reports`` of the report against itself. It prints the best time of each and the ratios
advise / load, advise / summary and diff / load: the analyses should cost about as much as
reading the data, whatever its size.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import nvbridge
from nvbridge.analysis.advise import advise_report
from nvbridge.analysis.diff import diff_reports
from scripts.bench import large_db
from scripts.paths import BENCH_OUT, REAL_DB

SOURCE = REAL_DB / "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"
CACHE = BENCH_OUT


def best(fn: Callable[[], object], rounds: int) -> float:
    """Fastest of ``rounds`` calls, in seconds."""
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiles", type=int, default=30, help="copies of the FSDP export in time (default 30)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds; the best is kept (default 3)")
    args = ap.parse_args(argv)
    CACHE.mkdir(exist_ok=True)
    db = CACHE / f"fsdp_x{args.tiles}.sqlite"
    out = CACHE / f"fsdp_x{args.tiles}_dataset"
    if not db.exists():
        large_db.build(SOURCE, db, tiles=args.tiles, quiet=True)
    if not out.exists():
        nvbridge.convert(db, out)
    report = nvbridge.load(out)
    n_ops, n_gpu = report.ops.num_rows, report.gpu_ops.num_rows
    load_s = best(lambda: nvbridge.load(out), args.rounds)
    summary_s = best(lambda: (report.key_averages(), report.gpu_summary()), args.rounds)
    advise_s = best(lambda: advise_report(report), args.rounds)
    diff_s = best(lambda: diff_reports(report, report), args.rounds)
    advice = advise_report(report)
    print(f"FSDP x{args.tiles}: {n_ops:,} ops, {n_gpu:,} GPU ops, {len(advice.findings)} findings")
    print(f"load {load_s:.2f} s, summary {summary_s:.2f} s, advise {advise_s:.2f} s, diff A-A {diff_s:.2f} s")
    print(
        f"advise/load {advise_s / load_s:.2f}x, advise/summary {advise_s / summary_s:.2f}x, "
        f"diff/load {diff_s / load_s:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
