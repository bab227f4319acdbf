#!/usr/bin/env python3
"""Many reports into one dataset: serial, local processes (--jobs) and a local Dask cluster.

    python -m scripts.bench.many                  # 16 reports, 2 processes, 2 Dask workers
    python -m scripts.bench.many --reports 32 --workers 2 --rounds 3

The reports are copies (in a temporary directory, never committed) of the real exports in
../shared/real_db/ and the samples, named rank0 ... rankN-1 so each gets its own partition. Each
way converts all of them into a fresh dataset; the best of ``--rounds`` wall times is printed with
its speed-up over serial, and every table of every partition is compared with the serial dataset
(``pyarrow.Table.equals``; meta without its conversion time): the outputs must be identical.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq

import nvbridge
import nvbridge.readers
from scripts.paths import REAL_DB, ROOT


def reports(into: Path, count: int) -> list[Path]:
    """``count`` report files named rank<i>, cycling through the real exports and samples."""
    pool = sorted(p for p in REAL_DB.glob("*") if p.suffix in (".sqlite", ".nvvp"))
    pool += sorted((ROOT / "sample_db").glob("*.sqlite"))
    if not pool:
        raise SystemExit(f"no reports found in {REAL_DB} or sample_db/")
    into.mkdir()
    made = []
    for i in range(count):
        dest = into / f"rank{i}{pool[i % len(pool)].suffix}"
        shutil.copyfile(pool[i % len(pool)], dest)
        made.append(dest)
    return made


def same(a: Path, b: Path) -> bool:
    """Every table of every partition equal (meta without its conversion time)."""
    parts = sorted(p.name for p in a.iterdir())
    if parts != sorted(p.name for p in b.iterdir()):
        return False
    for part in parts:
        for table in sorted(p.name for p in (a / part).glob("*.parquet")):
            ta, tb = pq.read_table(a / part / table), pq.read_table(b / part / table)
            if table == "meta.parquet":
                ta, tb = (t.filter([k != "converted_at_utc" for k in t.column("key").to_pylist()]) for t in (ta, tb))
            if not ta.equals(tb):
                return False
    return True


def best_of(rounds: int, work: Path, name: str, run: Callable[[Path], object]) -> tuple[float, Path]:
    best = float("inf")
    for r in range(rounds):
        out = work / f"{name}{r}"
        t0 = time.perf_counter()
        run(out)
        best = min(best, time.perf_counter() - t0)
        if r:
            shutil.rmtree(out)
    return best, work / f"{name}0"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", type=int, default=16)
    ap.add_argument("--jobs", type=int, default=2, help="local processes for --jobs")
    ap.add_argument("--workers", type=int, default=2, help="Dask workers (one thread each)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    from dask.distributed import LocalCluster

    with tempfile.TemporaryDirectory(prefix="nvbridge-many-") as tmp:
        work = Path(tmp)
        sources = reports(work / "in", args.reports)
        rows = sum(nvbridge.readers.estimate_rows(s) for s in sources)
        print(f"{len(sources)} reports, {rows:,} rows; {os.cpu_count()} cores")
        serial, base = best_of(args.rounds, work, "serial", lambda out: nvbridge.convert(sources, out))
        jobs, jobs_out = best_of(args.rounds, work, "jobs", lambda out: nvbridge.convert(sources, out, jobs=args.jobs))
        with LocalCluster(
            n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster:  # type: ignore[no-untyped-call]
            address = cluster.scheduler_address
            dask, dask_out = best_of(
                args.rounds, work, "dask", lambda out: nvbridge.convert(sources, out, scheduler=address)
            )
        print(f"{'way':<26}{'best s':>8}{'speed-up':>10}  output")
        print(f"{'serial':<26}{serial:>8.2f}{1.0:>10.2f}  (reference)")
        for name, secs, out in (
            (f"--jobs {args.jobs}", jobs, jobs_out),
            (f"Dask, {args.workers} workers", dask, dask_out),
        ):
            print(f"{name:<26}{secs:>8.2f}{serial / secs:>10.2f}  {'identical' if same(base, out) else 'DIFFERS'}")
        return 0 if same(base, jobs_out) and same(base, dask_out) else 1


if __name__ == "__main__":
    sys.exit(main())
