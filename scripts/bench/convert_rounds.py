"""The rounds scripts/bench_convert.py runs on one database: in each round every tool once, in
turn (floor, raw read, baseline, convert, the out-of-order copy, summary, trace, nsys); the
fastest run of each tool is kept."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from .convert_run import BASELINE, DISORDERED, FLOOR, FLOOR_CODE, RAW, RAW_CODE, TWO_GB, Run, floor_queries, run, warm

NVBRIDGE = [sys.executable, "-m", "nvbridge"]
# The runs start in a temporary folder, where `python -m nvbridge` would import the installed
# nvbridge (perhaps another checkout's): this tree's code is put first unless a run says otherwise.
THIS_TREE = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def _checked(tool: str, cmd: list[str], out: Path, what: str, env: dict[str, str] | None = None) -> Run:
    """``cmd`` run and timed; a failure ends the benchmark naming ``what`` failed."""
    r, rc, err = run(tool, cmd, out, env=THIS_TREE if env is None else env)
    if rc:
        raise SystemExit(f"{what} failed ({rc}): {err}")
    return r


def _reads(db: Path, queries: str, tmp: Path) -> list[Run]:
    """The floor (a plain sqlite3 loop) and the raw read (ConnectorX into Arrow)."""
    floor = _checked(FLOOR, [sys.executable, "-c", FLOOR_CODE, str(db), queries], tmp / "floor.txt", "floor")
    floor.note = f"{int((tmp / 'floor.txt').read_text()):,} rows iterated"
    raw = _checked(RAW, [sys.executable, "-c", RAW_CODE, str(db), queries], tmp / "raw.txt", "raw read")
    raw.note = f"{int((tmp / 'raw.txt').read_text()):,} rows into Arrow, 2 queries at a time"
    return [floor, raw]


def _baseline(db: Path, baseline: Path, tmp: Path) -> Run:
    out = tmp / "baseline"
    env = {**os.environ, "PYTHONPATH": str(baseline)}
    cmd = [*NVBRIDGE, "convert", str(db), "-o", str(out), "--force"]
    r = _checked(BASELINE, cmd, tmp / "baseline.txt", "baseline convert", env=env)
    r.note = f"the same command at {baseline.name}"
    shutil.rmtree(out)
    return r


def _convert(db: Path, out: Path, tmp: Path) -> Run:
    """``nvbridge convert`` into ``out``, left for summary."""
    cmd = [*NVBRIDGE, "convert", str(db), "-o", str(out), "--force"]
    r = _checked("nvbridge convert", cmd, tmp / "nvbridge.txt", "nvbridge convert")
    m = re.search(r"([\d,]+) rows in ([\d.]+) s", (tmp / "nvbridge.txt").read_text())
    mb = sum(f.stat().st_size for f in out.iterdir()) / 1e6
    r.note = (f"{m.group(1)} rows, {m.group(2)} s in-process, " if m else "") + f"{mb:.0f} MB Parquet"
    return r


def _disordered(disordered: Path, tmp: Path) -> Run:
    two = tmp / "two-runs"
    cmd = [*NVBRIDGE, "convert", str(disordered), "-o", str(two), "--force"]
    r = _checked(DISORDERED, cmd, tmp / "two-runs.txt", "nvbridge convert of the out-of-order copy")
    r.note = "the same rows, NVTX stored as two runs (read in slabs of starts)"
    shutil.rmtree(two)
    return r


def _summary(out: Path, tmp: Path) -> Run:
    r = _checked("nvbridge summary", [*NVBRIDGE, "summary", str(out)], tmp / "summary.txt", "nvbridge summary")
    lines = (tmp / "summary.txt").read_text().count("\n")
    r.note = f"on the dataset just written, {lines} lines printed"
    return r


def _trace(db: Path, tmp: Path) -> Run:
    trace = tmp / "trace.json.gz"
    # One file for every rank (--split none), as the baseline wrote it: a multi-rank source
    # would otherwise give one file per rank and no trace.json.gz.
    cmd = [*NVBRIDGE, "trace", str(db), "-o", str(trace), "--split", "none"]
    r = _checked("nvbridge trace", cmd, tmp / "trace.txt", "nvbridge trace")
    r.note = f"{trace.stat().st_size / 1e6:.0f} MB .json.gz, peak " + (
        "under 2 GB" if r.rss_mb < TWO_GB else "OVER 2 GB (issue 4 wants < 2 GB)"
    )
    trace.unlink()
    return r


def _nsys(nsys: str, db: Path, tmp: Path) -> Run:
    """``nsys stats`` on a copy of ``db`` (nsys may add tables to its input); a failure is a note."""
    copy = tmp / "copy" / db.name
    copy.parent.mkdir(exist_ok=True)
    shutil.copyfile(db, copy)
    warm(copy)
    r, rc, err = run(
        "nsys stats nvtxkernsum", [nsys, "stats", "-q", "-r", "nvtxkernsum", "-f", "csv", str(copy)], tmp / "nsys.csv"
    )
    if rc:
        r.note = f"FAILED rc={rc}: {err.strip().splitlines()[-1] if err.strip() else ''}"
    else:
        lines = sum(1 for _ in (tmp / "nsys.csv").open("rb"))
        r.note = f"{lines - 1:,} CSV rows" if lines else "no output: nsys stats reads only Nsight Systems exports"
    shutil.rmtree(copy.parent)
    return r


def _round(
    db: Path,
    queries: str,
    tmp: Path,
    nsys: str | None,
    convert_only: bool,
    baseline: Path | None,
    disordered: Path | None,
) -> list[Run]:
    """Every tool once, in turn."""
    runs = _reads(db, queries, tmp)
    if baseline is not None:
        runs.append(_baseline(db, baseline, tmp))
    out = tmp / "dataset"
    runs.append(_convert(db, out, tmp))
    if disordered is not None:
        runs.append(_disordered(disordered, tmp))
    if convert_only:
        shutil.rmtree(out)
        return runs
    runs.append(_summary(out, tmp))
    shutil.rmtree(out)
    runs.append(_trace(db, tmp))
    if nsys:
        runs.append(_nsys(nsys, db, tmp))
    return runs


def bench(
    db: Path,
    repeat: int,
    skip_nsys: bool,
    convert_only: bool = False,
    baseline: Path | None = None,
    disordered: Path | None = None,
) -> list[Run]:
    """``repeat`` rounds on ``db``; each tool's fastest run, in the order the tools run."""
    nsys = None if skip_nsys or convert_only else shutil.which("nsys")
    queries = json.dumps(floor_queries(db))
    best: dict[str, Run] = {}
    with tempfile.TemporaryDirectory(prefix="nvbridge-bench-") as tmp_s:
        warm(db)
        for _ in range(repeat):
            for r in _round(db, queries, Path(tmp_s), nsys, convert_only, baseline, disordered):
                if r.tool not in best or r.wall < best[r.tool].wall:
                    best[r.tool] = r
    if convert_only:
        print("note: floor and convert only (--convert-only)")
    elif skip_nsys:
        print("note: nsys skipped (--skip-nsys)")
    elif not nsys:
        print("note: nsys not found on PATH; install it with scripts/install_nsys.sh to compare")
    return list(best.values())
