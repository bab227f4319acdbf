#!/usr/bin/env python3
"""Benchmark ``nvbridge convert`` on a large real-shaped database against a floor and nsys.

    python scripts/bench_convert.py                       # 2M NVTX rows, nsys 2026.2 export
    python scripts/bench_convert.py --nvtx-rows 2000000 --nvtx-rows 10000000   # + scaling line
    python scripts/bench_convert.py --skip-nsys --nvprof-tiles none              # quick
    python scripts/bench_convert.py --convert-only --nvprof-tiles none --nvtx-rows 2000000 --nvtx-rows 10000000

For each size, the tiled database is built once (scripts/bench/large_db.py) into the cache
directory (default bench_out/, git-ignored) and reused by later runs; ``--clean`` deletes it
afterwards. nvbridge's bytecode is compiled once, as ``pip install .`` does. Then, on that same
file, with the page cache warmed first, these subprocesses run
one after the other, each timed (wall, CPU) with its own peak RSS (``os.wait4``, which covers
the process and the children it reaped):

  floor    a plain Python ``sqlite3`` loop iterating every row of the columns nvbridge reads
           (taken from the readers' Column declarations, so it follows them)
  raw      the same columns read straight into Arrow by ConnectorX, two queries at a time:
           the read a conversion cannot beat (issue 19's floor)
  baseline ``nvbridge convert`` as of ``--baseline REV`` (git archive of that revision, its native/
           loops built as an install builds them), so a
           change is compared with what it replaced in the same rounds
  convert  ``python -m nvbridge convert DB -o TMP`` (Parquet written to a temporary directory)
  two-runs with ``--disorder``: convert of a copy of DB whose NVTX rows are stored as two runs out
           of start order (built once beside DB), which streams in slabs of starts
  summary  ``python -m nvbridge summary TMP`` on the dataset convert just wrote
  trace    ``python -m nvbridge trace DB -o TMP/trace.json.gz`` (Chrome trace of the whole report)
  nsys     ``nsys stats -q -r nvtxkernsum -f csv`` on a copy of DB (nsys may add tables to
           its input), skipped with a note when ``nsys`` is not on PATH

Then, once per run:

  - ``nvbridge summary`` on a dataset converted from the real report ``--real-summary``
    (default the nsys 2026.2 FSDP export, the largest real report), on its own line;
  - torch's ``torch.autograd.profiler.load_nvprof`` against ``nvbridge convert`` and
    ``nvbridge.load_nvprof`` on the real nvprof report tiled ``--nvprof-tiles`` times (default
    1, 10 and 100), each in a subprocess killed after ``--timeout`` seconds (printed "timeout"),
    with the ratio torch/nvbridge at each tiling.

Everything but the cached database lives in a temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __package__:  # python -m scripts.bench_convert
    from scripts.bench import convert_nvprof, convert_rounds, convert_table
    from scripts.bench.convert_run import (
        DEFAULT_CACHE,
        DEFAULT_NVPROF,
        DEFAULT_SOURCE,
        Run,
        baseline_checkout,
        cached_db,
        compile_package,
        disordered_db,
    )
else:  # python scripts/bench_convert.py: Python puts this file's folder first on the path
    from bench import convert_nvprof, convert_rounds, convert_table  # type: ignore[no-redef]
    from bench.convert_run import (  # type: ignore[no-redef]
        DEFAULT_CACHE,
        DEFAULT_NVPROF,
        DEFAULT_SOURCE,
        Run,
        baseline_checkout,
        cached_db,
        compile_package,
        disordered_db,
    )


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--nvtx-rows",
        "--rows",
        type=int,
        action="append",
        metavar="N",
        help="NVTX rows of the tiled database (repeat for a scaling line; default 2000000)",
    )
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real export to tile")
    ap.add_argument(
        "--cache-dir",
        type=Path,
        default=DEFAULT_CACHE,
        help="where tiled databases are built and reused (default bench_out/)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="rounds (each runs every tool once, in turn); each tool's fastest is reported. The VM's "
        "speed drifts by up to 25%% between runs: best of three keeps floor and convert comparable",
    )
    ap.add_argument("--skip-nsys", action="store_true", help="do not run nsys stats")
    ap.add_argument(
        "--convert-only",
        action="store_true",
        help="time only the floor and nvbridge convert on each size (no summary, trace, nsys)",
    )
    ap.add_argument(
        "--baseline",
        metavar="REV",
        default=None,
        help="also time 'nvbridge convert' as of this git revision, in the same rounds (ratio printed)",
    )
    ap.add_argument(
        "--disorder",
        action="store_true",
        help="also convert a copy whose NVTX rows are stored as two runs, out of start order (built once, cached)",
    )
    ap.add_argument("--clean", action="store_true", help="delete the tiled databases afterwards (cached ones too)")
    ap.add_argument(
        "--real-summary",
        type=Path,
        default=DEFAULT_SOURCE,
        metavar="REPORT",
        help="real report whose converted dataset 'nvbridge summary' is timed on "
        "(default the nsys 2026.2 FSDP export, the largest real one)",
    )
    ap.add_argument("--nvprof-source", type=Path, default=DEFAULT_NVPROF, help="real nvprof report to tile")
    ap.add_argument(
        "--nvprof-tiles",
        default="1,10,100",
        metavar="K,K,...",
        help="tilings of the nvprof report for torch's load_nvprof vs nvbridge (default 1,10,100; 'none' skips)",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds before a torch/nvbridge nvprof run is killed (default 600)",
    )
    return ap


def _sizes(args: argparse.Namespace, base: Path | None, made: list[Path]) -> list[tuple[int, list[Run]]]:
    """The rounds on the tiled database of each size, each size's table printed as it ends."""
    results: list[tuple[int, list[Run]]] = []
    for n in args.nvtx_rows or [2_000_000]:
        db, tiles = cached_db(args.source, n, args.cache_dir)
        made.append(db)
        print(f"\n== {n:,} NVTX rows requested: {db.name}, {tiles} tiles, {db.stat().st_size / 1e6:.0f} MB")
        two_runs = disordered_db(db) if args.disorder else None
        if two_runs is not None:
            made.append(two_runs)
        runs = convert_rounds.bench(db, args.repeat, args.skip_nsys, args.convert_only, base, two_runs)
        print(convert_table.table(runs), flush=True)
        results.append((n, runs))
    return results


def _once(args: argparse.Namespace, made: list[Path]) -> None:
    """The runs made once: summary on a real report's dataset, torch's load_nvprof against nvbridge."""
    if args.real_summary.is_file():
        print("\n" + convert_nvprof.real_summary(args.real_summary, args.repeat), flush=True)
    else:
        print(f"\nnote: {args.real_summary}: no such file, real-report summary skipped")
    tiles_nvprof = (
        []
        if args.nvprof_tiles.strip().lower() in ("", "none", "0")
        else [int(x) for x in args.nvprof_tiles.split(",") if x.strip()]
    )
    if not tiles_nvprof:
        return
    if args.nvprof_source.is_file():
        made += [args.cache_dir / f"{args.nvprof_source.stem}.x{k}.sqlite" for k in tiles_nvprof]
        convert_nvprof.nvprof_bench(args.nvprof_source, tiles_nvprof, args.cache_dir, args.timeout)
    else:
        print(f"\nnote: {args.nvprof_source}: no such file, torch load_nvprof comparison skipped")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    t_start = time.perf_counter()
    if not args.source.is_file():
        raise SystemExit(f"{args.source}: no such file (pass --source)")
    print(
        f"source {args.source.name}; python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"nsys: {convert_table.version(['nsys', '--version']) if shutil.which('nsys') else 'absent'}"
    )
    print(f"bytecode compiled: {compile_package()}")
    made: list[Path] = []
    base_dir = Path(tempfile.mkdtemp(prefix="nvbridge-baseline-")) if args.baseline else None
    base = baseline_checkout(args.baseline, base_dir / args.baseline) if base_dir and args.baseline else None
    if base is not None:
        print(f"baseline: {args.baseline} ({base})")
    try:
        for line in convert_table.scaling(_sizes(args, base, made)):
            print(line)
        _once(args, made)
    finally:
        if base_dir is not None:
            shutil.rmtree(base_dir, ignore_errors=True)
        if args.clean:
            for db in made:
                db.unlink(missing_ok=True)
    print(f"\nwhole run: {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
