#!/usr/bin/env python3
"""64 ranks on a local Dask cluster: convert, summarize, trace; wall time and peak RSS per worker.

    python -m scripts.bench.ranks64                      # 64 ranks, 2 workers
    python -m scripts.bench.ranks64 --ranks 16 64 --workers 2 --memory-limit 1GiB

The ranks are tiled from the real two-GPU FSDP export (../shared/real_db/, read-only): rank K is a
copy holding only process ``K % 2`` of it (every row of the other process deleted from every table
that names a process), named ``rank<K>.sqlite`` so each is its own partition and records its rank.
They are written under a temporary directory, never in the repository.

Each count of ranks is converted by ``nvbridge.convert(..., scheduler=...)`` on a
``LocalCluster`` of ``--workers`` processes (one thread each, ``--memory-limit`` each: Dask pauses
a worker past 80% of it and restarts it past 95%, so a conversion that needs more fails the run).
The peak RSS of each worker is its ``ru_maxrss`` after the run. Then ``summary --json`` and
``trace`` of the dataset run as children, each measured by /usr/bin/time (wall, CPU, peak RSS;
not scripts/bench/measure.py, whose children start with this process's RSS): the summary reads
the reports one at a time, so its memory should not grow with the number of ranks.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nvbridge
from scripts.paths import REAL_DB, ROOT

FSDP = "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"
PROCESS_COLUMNS = ("globalTid", "globalPid", "processId", "pid")


def _keep_process(path: Path, pid: int) -> None:
    """Delete the rows of every process but ``pid`` from each table that names one."""
    con = sqlite3.connect(path)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            cols = [r[1] for r in con.execute(f"PRAGMA table_info('{table}')")]
            col = next((c for c in PROCESS_COLUMNS if c in cols), None)
            if col is None:
                continue
            # globalTid/globalPid hold the pid in bits 24-47; processId/pid are the pid itself
            value = f"(({col} >> 24) & 16777215)" if col.startswith("global") else col
            con.execute(f"DELETE FROM '{table}' WHERE {value} != ?", (pid,))
        con.commit()
    finally:
        con.close()


def tile(into: Path, ranks: int) -> list[Path]:
    """``ranks`` report files, rank K holding the K % 2-th GPU process of the FSDP export."""
    source = REAL_DB / FSDP
    con = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    pids = [r[0] for r in con.execute("SELECT DISTINCT (globalPid >> 24) & 16777215 FROM CUPTI_ACTIVITY_KIND_KERNEL")]
    con.close()
    into.mkdir(parents=True)
    halves = []
    for i, pid in enumerate(sorted(pids)):
        half = into / f"half{i}.sqlite"
        shutil.copyfile(source, half)
        _keep_process(half, pid)
        halves.append(half)
    made = []
    for k in range(ranks):
        made.append(into / f"rank{k}.sqlite")
        shutil.copyfile(halves[k % len(halves)], made[-1])
    for half in halves:
        half.unlink()
    return made


def _worker_usage() -> tuple[float, float]:
    """(peak RSS MB, CPU s) of the process it runs in (a Dask worker)."""
    import resource

    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_maxrss / 1024, use.ru_utime + use.ru_stime


def measured(argv: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of ``python -m nvbridge ARGV``, through /usr/bin/time: a child
    forked from this process would start with its RSS (Linux keeps ru_maxrss across exec), and
    this one holds Dask and pyarrow; ``time`` is small."""
    out = subprocess.run(
        ["/usr/bin/time", "-f", "%e %U %S %M", sys.executable, "-m", "nvbridge", *argv],
        capture_output=True,
        text=True,
        cwd="/",
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
        timeout=1800,
    )
    wall, user, system, kb = out.stderr.strip().splitlines()[-1].split()
    return float(wall), float(user) + float(system), int(kb) / 1024


def convert_on_dask(
    sources: list[Path], out: Path, workers: int, limit: str
) -> tuple[float, list[tuple[float, float]]]:
    """Wall seconds of the conversion, and each worker's (peak RSS MB, CPU s)."""
    from dask.distributed import Client, LocalCluster

    with LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        memory_limit=limit,
        dashboard_address=None,
        silence_logs=logging.CRITICAL,  # a worker's heartbeat racing the cluster's shutdown logs a traceback
    ) as cluster:  # type: ignore[no-untyped-call]
        with Client(cluster) as client:  # type: ignore[no-untyped-call]
            before = client.run(_worker_usage)  # the workers' start-up, taken off their CPU time
            mine = _worker_usage()[1]
            start = time.perf_counter()
            nvbridge.convert(sources, out, scheduler=cluster.scheduler_address)
            wall = time.perf_counter() - start
            after = client.run(_worker_usage)
            # this process matches the collectives across ranks once the reports are converted
            print(f"  (this process: {_worker_usage()[1] - mine:.1f} s CPU, collectives matched here)")
    return wall, sorted((after[w][0], after[w][1] - before[w][1]) for w in after)


def one_count(work: Path, ranks: int, workers: int, limit: str) -> None:
    sources = tile(work / f"in{ranks}", ranks)
    size = sum(p.stat().st_size for p in sources) / 1e6
    out = work / f"ds{ranks}"
    wall, usage = convert_on_dask(sources, out, workers, limit)
    print(
        f"{ranks} ranks ({size:,.0f} MB of reports): convert on {workers} Dask workers {wall:.1f} s wall; "
        f"per worker peak RSS {', '.join(f'{p:.0f}' for p, _ in usage)} MB (limit {limit}), "
        f"CPU {', '.join(f'{c:.1f}' for _, c in usage)} s"
    )
    for name, argv in (
        ("summary --json", ["summary", str(out), "--json"]),
        ("trace (one file)", ["trace", str(out), "-o", str(work / f"all{ranks}.json.gz"), "--force"]),
        (
            "trace --ranks 0,1",
            ["trace", str(out), "-o", str(work / f"two{ranks}.json.gz"), "--ranks", "0,1", "--force"],
        ),
    ):
        wall_s, cpu_s, rss = measured(argv)
        print(f"  {name}: {wall_s:.1f} s wall, {cpu_s:.1f} s CPU, {rss:.0f} MB peak RSS")
    trace = work / f"all{ranks}.json.gz"
    if trace.exists():
        print(f"  trace file {trace.stat().st_size / 1e6:,.1f} MB")
    shutil.rmtree(out)
    shutil.rmtree(work / f"in{ranks}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[64])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="1GiB", help="per Dask worker")
    args = ap.parse_args()
    if not (REAL_DB / FSDP).is_file():
        raise SystemExit(f"{REAL_DB / FSDP} not found; set NVBRIDGE_REAL_DB")
    print(f"{os.cpu_count()} cores; nvbridge {nvbridge.__version__} from {Path(nvbridge.__file__).parent}")
    with tempfile.TemporaryDirectory(prefix="nvbridge-ranks64-") as tmp:
        for ranks in args.ranks:
            one_count(Path(tmp), ranks, args.workers, args.memory_limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
