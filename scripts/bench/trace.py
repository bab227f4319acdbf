#!/usr/bin/env python3
"""Benchmark ``nvbridge trace DATASET`` and ``convert --chrome`` against ``nvbridge convert`` of the
same report (issue 19).

    python -m scripts.bench.trace                                   # 2M NVTX rows
    python -m scripts.bench.trace --nvtx-rows 2000000 --nvtx-rows 10000000
    python -m scripts.bench.trace --baseline 605c358                # + trace as of that revision
    python -m scripts.bench.trace --split rank                      # one trace per rank (2 ranks)

For each size, the tiled real FSDP export (scripts/bench/large_db.py, cached in bench_out/ as
scripts/bench_convert.py caches it) is converted to a dataset, then traced from that dataset to a
``.json.gz``, then converted again with ``--chrome`` (dataset and trace in one pass); each
subprocess is timed (wall, user+sys CPU) with its own peak RSS, best of
``--repeat``. Printed per size: each run and its ratios to convert (wall and CPU: on a shared
machine CPU time is the steadier figure), against issue 19's targets (trace and convert --chrome
within 2.0x of convert, under 1 GB). ``--baseline REV`` also traces with the code of another revision (git
archive), for a before/after in the same rounds. ``--split`` (default ``none``: one file, as the baseline
writes it) is passed to ``trace --split`` and ``convert --chrome-split``; ``rank`` writes the two
ranks of the FSDP export in two files.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from scripts.bench import convert_run
from scripts.bench.convert_run import Run, run

TARGET_RATIO = 2.0
TARGET_MB = 1024.0


def _best(runs: dict[str, Run], r: Run) -> None:
    if r.tool not in runs or r.wall < runs[r.tool].wall:
        runs[r.tool] = r


def _checked(tool: str, cmd: list[str], out: Path, env: dict[str, str] | None = None) -> Run:
    r, rc, err = run(tool, cmd, out, env=env)
    if rc:
        raise SystemExit(f"{tool} failed ({rc}): {err.strip()}")
    return r


def _size(folder: Path, stem: str) -> str:
    """Size of the trace files named ``stem`` (one, or one per rank)."""
    files = sorted(folder.glob(f"{stem}.json.gz")) + sorted(folder.glob(f"{stem}.rank*.json.gz"))
    return f"{sum(f.stat().st_size for f in files) / 1e6:.0f} MB .json.gz in {len(files)} file(s)"


def bench(db: Path, repeat: int, baseline: Path | None, split: str = "none") -> dict[str, Run]:
    py = [sys.executable, "-m", "nvbridge"]
    runs: dict[str, Run] = {}
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="nvbridge-bench-trace-") as tmp_s:
        tmp = Path(tmp_s)
        os.chdir(tmp)  # ``python -m`` imports from the working directory first: not from the repo's root
        try:
            _rounds(db, repeat, baseline, tmp, py, runs, split)
        finally:
            os.chdir(here)
    return runs


def _rounds(
    db: Path, repeat: int, baseline: Path | None, tmp: Path, py: list[str], runs: dict[str, Run], split: str
) -> None:
    """Convert, trace (and trace at the baseline) ``repeat`` times, this checkout's nvbridge first on the path."""
    now = {**os.environ, "PYTHONPATH": str(convert_run.ROOT)}
    convert_run.warm(db)
    ds = tmp / "dataset"
    for _ in range(repeat):
        shutil.rmtree(ds, ignore_errors=True)
        r = _checked("convert", [*py, "convert", str(db), "-o", str(ds), "-q"], tmp / "convert.txt", env=now)
        r.note = f"{sum(f.stat().st_size for f in ds.iterdir()) / 1e6:.0f} MB Parquet"
        _best(runs, r)
        trace = tmp / "trace.json.gz"
        cmd = [*py, "trace", str(ds), "-o", str(trace), "--force", "--split", split]
        r = _checked("trace", cmd, tmp / "trace.txt", env=now)
        r.note = f"{_size(tmp, 'trace')} from the dataset"
        _best(runs, r)
        shutil.rmtree(ds, ignore_errors=True)
        chrome = tmp / "chrome.json.gz"
        cmd = [
            *py,
            "convert",
            str(db),
            "-o",
            str(ds),
            "--chrome",
            str(chrome),
            "--chrome-split",
            split,
            "--force",
            "-q",
        ]
        r = _checked("convert --chrome", cmd, tmp / "chrome.txt", env=now)
        r.note = f"{_size(tmp, 'chrome')} written with the dataset"
        _best(runs, r)
        if baseline is not None:
            env = {**os.environ, "PYTHONPATH": str(baseline)}
            old = tmp / "old.json.gz"
            old.unlink(missing_ok=True)
            r = _checked("trace at baseline", [*py, "trace", str(ds), "-o", str(old)], tmp / "old.txt", env=env)
            r.note = f"{old.stat().st_size / 1e6:.0f} MB .json.gz, the same command at {baseline.name}"
            _best(runs, r)


def report(label: str, runs: dict[str, Run]) -> bool:
    """Print the runs and ratios; whether trace and convert --chrome meet issue 19's targets."""
    convert = runs["convert"]
    print(f"\n{label}")
    print(f"  {'run':<18} {'wall s':>8} {'CPU s':>8} {'peak MB':>8} {'wall/convert':>13} {'CPU/convert':>12}  note")
    for r in runs.values():
        print(
            f"  {r.tool:<18} {r.wall:8.2f} {r.cpu:8.2f} {r.rss_mb:8.0f} {r.wall / convert.wall:12.2f}x "
            f"{r.cpu / convert.cpu:11.2f}x  {r.note}"
        )
    ok = True
    for name in ("trace", "convert --chrome"):
        r = runs[name]
        met = r.wall / convert.wall <= TARGET_RATIO and r.rss_mb < TARGET_MB
        ok &= met
        print(
            f"  target ({name} <= {TARGET_RATIO}x convert's wall time, < {TARGET_MB:.0f} MB): "
            f"{'met' if met else 'NOT met'} ({r.wall / convert.wall:.2f}x, {r.rss_mb:.0f} MB)"
        )
    trace = runs["trace"]
    if "trace at baseline" in runs:
        old = runs["trace at baseline"]
        print(
            f"  baseline/now: wall {old.wall / trace.wall:.2f}x, CPU {old.cpu / trace.cpu:.2f}x, "
            f"peak {old.rss_mb / trace.rss_mb:.2f}x"
        )
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=convert_run.DEFAULT_SOURCE, help="real nsys export to tile")
    ap.add_argument("--nvtx-rows", type=int, action="append", help="NVTX rows of a tiled report (repeatable)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each command; the fastest is kept")
    ap.add_argument("--baseline", metavar="REV", help="also trace with nvbridge as of this git revision")
    ap.add_argument("--cache", type=Path, default=convert_run.DEFAULT_CACHE, help="where tiled reports are kept")
    ap.add_argument("--split", choices=["none", "rank"], default="none", help="trace --split (default: one file)")
    args = ap.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    convert_run.compile_package()
    ok = True
    with tempfile.TemporaryDirectory(prefix="nvbridge-baseline-") as base_s:
        baseline = convert_run.baseline_checkout(args.baseline, Path(base_s) / args.baseline) if args.baseline else None
        for rows in args.nvtx_rows or [2_000_000]:
            db, tiles = convert_run.cached_db(args.source, rows, args.cache)
            ok &= report(
                f"{db.name}: {tiles} tiles of {args.source.name} (~{rows:,} NVTX rows)",
                bench(db, args.repeat, baseline, args.split),
            )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
