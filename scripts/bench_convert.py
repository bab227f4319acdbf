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
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

if __package__:  # python -m scripts.bench_convert, or imported by scripts.bench.trace
    from scripts.bench import large_db as make_large_db
else:  # python scripts/bench_convert.py: Python puts this file's folder first on the path
    from bench import large_db as make_large_db  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_SOURCE = ROOT.parent / "shared" / "real_db" / "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"
DEFAULT_NVPROF = ROOT.parent / "shared" / "real_db" / "nvprof-2020-pytorch14-pyprof-lm.sqlite"
DEFAULT_CACHE = ROOT / "bench_out"
FLOOR = "floor (sqlite3 loop)"
RAW = "raw read (ConnectorX)"
DISORDERED = "convert, NVTX out of order"
BASELINE = "convert at baseline"
TWO_GB = 2048.0

# Both print: events, seconds inside the load call, seconds importing (torch for both).
TORCH_CODE = """
import sys, time, warnings
warnings.simplefilter("ignore")
t0 = time.perf_counter()
from torch.autograd.profiler import load_nvprof
t1 = time.perf_counter()
events = load_nvprof(sys.argv[1])
print(len(events), time.perf_counter() - t1, t1 - t0)
"""
NVBRIDGE_LOAD_CODE = """
import sys, time
t0 = time.perf_counter()
import torch.autograd.profiler_util
import nvbridge
t1 = time.perf_counter()
events = nvbridge.load_nvprof(sys.argv[1])
print(len(events), time.perf_counter() - t1, t1 - t0)
"""

FLOOR_CODE = """
import json, sqlite3, sys
conn = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
n = 0
for sql in json.loads(sys.argv[2]):
    for _row in conn.execute(sql):
        n += 1
print(n)
"""

# The read a conversion cannot beat: exactly the columns it needs, straight into Arrow through
# ConnectorX (nvbridge's own bulk path), two queries at a time on the 2 cores.
RAW_CODE = """
import json, sys
from concurrent.futures import ThreadPoolExecutor
import connectorx as cx
url = "sqlite://" + sys.argv[1]
with ThreadPoolExecutor(2) as pool:
    tables = list(pool.map(lambda q: cx.read_sql(url, q, return_type="arrow"), json.loads(sys.argv[2])))
print(sum(t.num_rows for t in tables))
"""


@dataclass
class Run:
    tool: str
    wall: float
    cpu: float
    rss_mb: float
    note: str = ""
    timed_out: bool = False


def floor_queries(db: Path) -> list[str]:
    """SELECTs of exactly the raw columns nvbridge's reader reads, table by table."""
    import sqlite3

    from nvbridge.readers import nsys_tables as nsys
    from nvbridge.readers import nvprof
    from nvbridge.readers._column import Column

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    kind = make_large_db.detect_kind(conn)
    k = make_large_db.K
    if kind == "nsys":
        wanted = (*nsys.RANGE_TYPES, nsys.NVTX_MARK, nsys.NVTX_THREAD_NAME, nsys.NVTX_DOMAIN_CREATE)
        specs = [
            ("StringIds", [Column("id", "id"), Column("value", "value")], ""),
            ("NVTX_EVENTS", nsys.NVTX, f" WHERE eventType IN ({', '.join(map(str, wanted))})"),
            (k + "RUNTIME", nsys.RUNTIME, ""),
            (k + "KERNEL", nsys.KERNEL, ""),
            (k + "MEMCPY", nsys.MEMCPY, ""),
            (k + "MEMSET", nsys.MEMSET, ""),
            (k + "SYNCHRONIZATION", nsys.SYNC, ""),
            (k + "GRAPH_TRACE", nsys.GRAPH_TRACE, ""),
        ]
    else:
        specs = [
            ("StringTable", [Column("id", "_id_"), Column("value", "value")], ""),
            (k + "MARKER", nvprof.MARKER, ""),
            (k + "RUNTIME", nvprof.API, ""),
            (k + "DRIVER", nvprof.API, ""),
            (k + "CONCURRENT_KERNEL", nvprof.KERNEL, ""),
            (k + "KERNEL", nvprof.KERNEL, ""),
            (k + "MEMCPY", nvprof.MEMCPY, ""),
            (k + "MEMCPY2", nvprof.MEMCPY, ""),
            (k + "MEMSET", nvprof.MEMSET, ""),
            (k + "SYNCHRONIZATION", nvprof.SYNC, ""),
        ]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    queries = []
    for table, cols, where in specs:
        if table not in tables:
            continue
        present = set(make_large_db.table_columns(conn, table))
        names = [c.raw for c in cols if c.raw in present]
        q = make_large_db.quote
        queries.append(f"SELECT {', '.join(q(n) for n in names)} FROM {q(table)}{where}")
    conn.close()
    return queries


# Each measured command is started by this small launcher, not by the benchmark itself: a
# child's ru_maxrss includes the memory it had between fork and exec, which would be the
# benchmark's own (nvbridge and pyarrow imported) rather than the command's.
LAUNCHER_CODE = """
import json, os, sys, time
t0 = time.perf_counter()
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_pid, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(sys.argv[1], "w") as fh:
    json.dump({"rc": os.waitstatus_to_exitcode(status), "wall": wall,
               "cpu": ru.ru_utime + ru.ru_stime, "maxrss_kb": ru.ru_maxrss}, fh)
"""


def run(
    tool: str, cmd: list[str], stdout: Path, timeout: float | None = None, env: dict[str, str] | None = None
) -> tuple[Run, int, str]:
    """Run ``cmd``: wall time, user+sys CPU and peak RSS of it and the children it reaped.

    Past ``timeout`` seconds the launcher and the command (one process group) are killed and
    the Run comes back with ``timed_out`` set.
    """
    usage = stdout.with_suffix(".usage.json")
    with stdout.open("wb") as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER_CODE, str(usage), *cmd],
            stdout=out,
            stderr=err,
            start_new_session=True,
            env=env,
            # Not the repository: `python -m` puts the working directory before PYTHONPATH, so a
            # baseline run from the checkout would time this tree's code instead.
            cwd=stdout.parent,
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            usage.unlink(missing_ok=True)
            return (
                Run(
                    tool,
                    float(timeout or 0),
                    float("nan"),
                    float("nan"),
                    f"timeout (killed after {timeout:.0f} s)",
                    timed_out=True,
                ),
                -1,
                "timeout",
            )
        if proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, cmd)
        err.seek(0)
        errors = err.read().decode(errors="replace")
    u = json.loads(usage.read_text())
    usage.unlink()
    return Run(tool, u["wall"], u["cpu"], u["maxrss_kb"] / 1024), u["rc"], errors


def compile_package() -> str:
    """Byte-compile the nvbridge the subprocesses import, as ``pip install .`` does. An editable
    install under PYTHONDONTWRITEBYTECODE (this machine's setting) would otherwise recompile
    every changed module in every timed run: 0.1 s that no installed copy pays."""
    import compileall

    import nvbridge

    package = Path(nvbridge.__file__).parent
    if not compileall.compile_dir(package, quiet=1):
        raise SystemExit(f"{package}: byte-compiling failed")
    return str(package)


def warm(path: Path) -> None:
    with path.open("rb") as fh:
        while fh.read(1 << 24):
            pass


def cached_db(source: Path, nvtx_target: int, cache: Path) -> tuple[Path, int]:
    import sqlite3

    conn = sqlite3.connect(f"file:{source.resolve()}?mode=ro", uri=True)
    kind = make_large_db.detect_kind(conn)
    per_tile = make_large_db.nvtx_rows(conn, kind)
    conn.close()
    if not per_tile:
        raise SystemExit(f"{source.name} has no NVTX rows to scale")
    tiles = -(-nvtx_target // per_tile)
    db = cache / f"{source.stem}.x{tiles}.sqlite"
    if db.exists():
        print(f"using cached {db} ({db.stat().st_size / 1e6:.0f} MB)")
    else:
        make_large_db.build(source, db, tiles=tiles)
    return db, tiles


def baseline_checkout(rev: str, into: Path) -> Path:
    """The repository at ``rev``, exported (``git archive``) into ``into``, its compiled loops
    built as an install builds them (without them the baseline would time the NumPy fallbacks)
    and byte-compiled."""
    import compileall
    import io
    import tarfile

    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    if (into / "native").is_dir():
        build = [sys.executable, "setup.py", "build_ext", "--inplace", "-q"]
        subprocess.run(build, cwd=into, check=True, capture_output=True)
    compileall.compile_dir(into / "nvbridge", quiet=1)
    return into


def disordered_db(db: Path) -> Path:
    """A copy of ``db`` whose NVTX rows are stored out of start order, as two start-ordered runs
    one after the other (odd rowids, then even): rowid windows cannot stream it, so convert reads
    it in slabs of starts (issue 19). Built once beside ``db`` and reused."""
    import sqlite3

    out = db.with_name(db.stem + ".two-runs.sqlite")
    if out.exists():
        return out
    tmp = out.with_suffix(".partial")
    shutil.copyfile(db, tmp)
    con = sqlite3.connect(tmp)
    con.executescript("""
        CREATE TABLE n2 AS SELECT * FROM NVTX_EVENTS ORDER BY rowid % 2, rowid;
        DELETE FROM NVTX_EVENTS; INSERT INTO NVTX_EVENTS SELECT * FROM n2; DROP TABLE n2; VACUUM;""")
    con.close()
    tmp.rename(out)
    return out


def bench(
    db: Path,
    repeat: int,
    skip_nsys: bool,
    convert_only: bool = False,
    baseline: Path | None = None,
    disordered: Path | None = None,
) -> list[Run]:
    nsys = None if skip_nsys or convert_only else shutil.which("nsys")
    runs: list[Run] = []
    queries = json.dumps(floor_queries(db))
    with tempfile.TemporaryDirectory(prefix="nvbridge-bench-") as tmp_s:
        tmp = Path(tmp_s)
        warm(db)
        best: dict[str, Run] = {}

        def keep(r: Run) -> None:
            if r.tool not in best or r.wall < best[r.tool].wall:
                best[r.tool] = r

        for _ in range(repeat):
            r, rc, err = run(FLOOR, [sys.executable, "-c", FLOOR_CODE, str(db), queries], tmp / "floor.txt")
            if rc:
                raise SystemExit(f"floor failed ({rc}): {err}")
            r.note = f"{int((tmp / 'floor.txt').read_text()):,} rows iterated"
            keep(r)
            r, rc, err = run(RAW, [sys.executable, "-c", RAW_CODE, str(db), queries], tmp / "raw.txt")
            if rc:
                raise SystemExit(f"raw read failed ({rc}): {err}")
            r.note = f"{int((tmp / 'raw.txt').read_text()):,} rows into Arrow, 2 queries at a time"
            keep(r)
            if baseline is not None:
                out = tmp / "baseline"
                env = {**os.environ, "PYTHONPATH": str(baseline)}
                r, rc, err = run(
                    BASELINE,
                    [sys.executable, "-m", "nvbridge", "convert", str(db), "-o", str(out), "--force"],
                    tmp / "baseline.txt",
                    env=env,
                )
                if rc:
                    raise SystemExit(f"baseline convert failed ({rc}): {err}")
                r.note = f"the same command at {baseline.name}"
                shutil.rmtree(out)
                keep(r)

            out = tmp / "dataset"
            r, rc, err = run(
                "nvbridge convert",
                [sys.executable, "-m", "nvbridge", "convert", str(db), "-o", str(out), "--force"],
                tmp / "nvbridge.txt",
            )
            if rc:
                raise SystemExit(f"nvbridge convert failed ({rc}): {err}")
            text = (tmp / "nvbridge.txt").read_text()
            m = re.search(r"([\d,]+) rows in ([\d.]+) s", text)
            mb = sum(f.stat().st_size for f in out.iterdir()) / 1e6
            r.note = (f"{m.group(1)} rows, {m.group(2)} s in-process, " if m else "") + f"{mb:.0f} MB Parquet"
            keep(r)
            if disordered is not None:
                two = tmp / "two-runs"
                r, rc, err = run(
                    DISORDERED,
                    [sys.executable, "-m", "nvbridge", "convert", str(disordered), "-o", str(two), "--force"],
                    tmp / "two-runs.txt",
                )
                if rc:
                    raise SystemExit(f"nvbridge convert of the out-of-order copy failed ({rc}): {err}")
                r.note = "the same rows, NVTX stored as two runs (read in slabs of starts)"
                shutil.rmtree(two)
                keep(r)
            if convert_only:
                shutil.rmtree(out)
                continue

            r, rc, err = run(
                "nvbridge summary", [sys.executable, "-m", "nvbridge", "summary", str(out)], tmp / "summary.txt"
            )
            if rc:
                raise SystemExit(f"nvbridge summary failed ({rc}): {err}")
            lines = (tmp / "summary.txt").read_text().count("\n")
            r.note = f"on the dataset just written, {lines} lines printed"
            shutil.rmtree(out)
            keep(r)

            trace = tmp / "trace.json.gz"
            r, rc, err = run(
                "nvbridge trace",
                [sys.executable, "-m", "nvbridge", "trace", str(db), "-o", str(trace)],
                tmp / "trace.txt",
            )
            if rc:
                raise SystemExit(f"nvbridge trace failed ({rc}): {err}")
            r.note = f"{trace.stat().st_size / 1e6:.0f} MB .json.gz, peak " + (
                "under 2 GB" if r.rss_mb < TWO_GB else "OVER 2 GB (issue 4 wants < 2 GB)"
            )
            trace.unlink()
            keep(r)

            if nsys:
                copy = tmp / "copy" / db.name
                copy.parent.mkdir(exist_ok=True)
                shutil.copyfile(db, copy)
                warm(copy)
                r, rc, err = run(
                    "nsys stats nvtxkernsum",
                    [nsys, "stats", "-q", "-r", "nvtxkernsum", "-f", "csv", str(copy)],
                    tmp / "nsys.csv",
                )
                if rc:
                    r.note = f"FAILED rc={rc}: {err.strip().splitlines()[-1] if err.strip() else ''}"
                else:
                    lines = sum(1 for _ in (tmp / "nsys.csv").open("rb"))
                    r.note = (
                        f"{lines - 1:,} CSV rows"
                        if lines
                        else "no output: nsys stats reads only Nsight Systems exports"
                    )
                shutil.rmtree(copy.parent)
                keep(r)
        runs = list(best.values())
    if convert_only:
        print("note: floor and convert only (--convert-only)")
    elif skip_nsys:
        print("note: nsys skipped (--skip-nsys)")
    elif not nsys:
        print("note: nsys not found on PATH; install it with scripts/install_nsys.sh to compare")
    return runs


def version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
        return out.splitlines()[-1] if out else "?"
    except (OSError, subprocess.SubprocessError):
        return "absent"


def row(r: Run, width: int = 24) -> str:
    if r.timed_out:
        return f"{r.tool:<{width}}{'timeout':>9}{'-':>9}{'-':>13}  {r.note}"
    return f"{r.tool:<{width}}{r.wall:>9.2f}{r.cpu:>9.2f}{r.rss_mb:>13.0f}  {r.note}"


def table(runs: list[Run]) -> str:
    by = {r.tool: r for r in runs}
    lines = [f"{'tool':<24}{'wall s':>9}{'cpu s':>9}{'peak RSS MB':>13}  notes"]
    for r in runs:
        lines.append(row(r))
    nvb, flo, nsy = by.get("nvbridge convert"), by.get(FLOOR), by.get("nsys stats nvtxkernsum")
    raw, base = by.get(RAW), by.get(BASELINE)
    if nvb and raw:
        lines.append(
            f"ratio nvbridge/raw read: {nvb.wall / raw.wall:.2f}x wall, {nvb.cpu / raw.cpu:.2f}x CPU, "
            f"{nvb.rss_mb / raw.rss_mb:.2f}x peak RSS"
        )
    if nvb and base:
        lines.append(
            f"ratio nvbridge/baseline: {nvb.wall / base.wall:.2f}x wall, {nvb.cpu / base.cpu:.2f}x CPU, "
            f"{nvb.rss_mb / base.rss_mb:.2f}x peak RSS"
        )
    two = by.get(DISORDERED)
    if two and raw:
        lines.append(
            f"ratio out-of-order convert/raw read: {two.wall / raw.wall:.2f}x wall; "
            f"peak RSS {two.rss_mb:.0f} MB (issue 19: < 600 MB)"
        )
    if nvb:
        lines.append(f"issue 19 memory: convert peak RSS {nvb.rss_mb:.0f} MB (< 600 MB: {nvb.rss_mb < 600})")
    if nvb and flo:
        lines.append(f"ratio nvbridge/floor: {nvb.wall / flo.wall:.2f}x wall, {nvb.rss_mb / flo.rss_mb:.2f}x peak RSS")
    if nvb and nsy:
        lines.append(f"ratio nsys/nvbridge:  {nsy.wall / nvb.wall:.2f}x wall, {nsy.rss_mb / nvb.rss_mb:.2f}x peak RSS")
    return "\n".join(lines)


def real_summary(source: Path, repeat: int) -> str:
    """``nvbridge summary`` on a dataset converted from a real report (issue 3: < 2 s)."""
    with tempfile.TemporaryDirectory(prefix="nvbridge-bench-") as tmp_s:
        tmp = Path(tmp_s)
        out = tmp / "dataset"
        subprocess.run(
            [sys.executable, "-m", "nvbridge", "convert", str(source), "-o", str(out), "--force", "--quiet"], check=True
        )
        for f in out.rglob("*"):
            if f.is_file():
                warm(f)
        best: Run | None = None
        for _ in range(max(repeat, 1)):
            r, rc, err = run(
                "nvbridge summary", [sys.executable, "-m", "nvbridge", "summary", str(out)], tmp / "summary.txt"
            )
            if rc:
                raise SystemExit(f"nvbridge summary failed ({rc}): {err}")
            if best is None or r.wall < best.wall:
                best = r
        assert best is not None
    verdict = "under" if best.wall < 2 else "OVER"
    return (
        f"nvbridge summary on the dataset of real {source.name}: {best.wall:.2f} s wall, "
        f"{best.cpu:.2f} s CPU, {best.rss_mb:.0f} MB peak RSS ({verdict} issue 3's 2 s)"
    )


def nvprof_bench(source: Path, tile_counts: list[int], cache: Path, timeout: float) -> None:
    """torch's load_nvprof against nvbridge convert and nvbridge.load_nvprof, per tiling."""
    import sqlite3

    try:
        import importlib.util

        has_torch = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        has_torch = False
    print(f"\n== torch load_nvprof vs nvbridge on {source.name} tiled {tile_counts} (timeout {timeout:.0f} s each)")
    if not has_torch:
        print("note: torch not installed; only nvbridge convert is timed (pip install 'nvbridge[torch]')")
    width = 26
    summary: list[str] = []
    for tiles in tile_counts:
        db = cache / f"{source.stem}.x{tiles}.sqlite"
        if db.exists():
            print(f"using cached {db}")
        else:
            make_large_db.build(source, db, tiles=tiles)
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        markers = make_large_db.nvtx_rows(conn, "nvprof")
        conn.close()
        print(f"-- x{tiles}: {markers:,} MARKER rows ({markers // 2:,} ranges), {db.stat().st_size / 1e6:.1f} MB")
        print(f"{'tool':<{width}}{'wall s':>9}{'cpu s':>9}{'peak RSS MB':>13}  notes")
        with tempfile.TemporaryDirectory(prefix="nvbridge-bench-") as tmp_s:
            tmp = Path(tmp_s)
            warm(db)
            results: dict[str, Run] = {}
            cases = [
                (
                    "nvbridge convert",
                    [sys.executable, "-m", "nvbridge", "convert", str(db), "-o", str(tmp / "ds"), "--force"],
                )
            ]
            if has_torch:
                cases += [
                    ("nvbridge.load_nvprof", [sys.executable, "-c", NVBRIDGE_LOAD_CODE, str(db)]),
                    ("torch load_nvprof", [sys.executable, "-c", TORCH_CODE, str(db)]),
                ]
            for tool, cmd in cases:
                out = tmp / (tool.replace(" ", "_") + ".txt")
                r, rc, err = run(tool, cmd, out, timeout=timeout)
                if r.timed_out:
                    pass
                elif rc:
                    last = err.strip().splitlines()[-1] if err.strip() else ""
                    r.note = f"FAILED rc={rc}: {last}"
                elif tool == "nvbridge convert":
                    m = re.search(r"([\d,]+) rows in ([\d.]+) s", out.read_text())
                    r.note = f"{m.group(1)} rows, {m.group(2)} s in-process" if m else ""
                else:
                    n, inside, imports = out.read_text().split()
                    r.note = f"{int(n):,} events, {float(inside):.2f} s in the call, {float(imports):.2f} s imports"
                results[tool] = r
                print(row(r, width), flush=True)
        torch_r = results.get("torch load_nvprof")
        if torch_r is None:
            continue
        parts = []
        for other in ("nvbridge convert", "nvbridge.load_nvprof"):
            o = results[other]
            if o.timed_out or o.note.startswith("FAILED"):
                parts.append(f"vs {other}: n/a")
            elif torch_r.timed_out:
                parts.append(f"vs {other}: > {torch_r.wall / o.wall:.1f}x (torch timed out)")
            elif torch_r.note.startswith("FAILED"):
                parts.append(f"vs {other}: n/a (torch failed)")
            else:
                parts.append(f"vs {other}: {torch_r.wall / o.wall:.2f}x")
        line = f"ratio torch/nvbridge at x{tiles} ({markers:,} markers): " + ", ".join(parts)
        print(line)
        summary.append(line)
    if len(summary) > 1:
        print("\n" + "\n".join(summary))


def main(argv: list[str] | None = None) -> int:
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
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    sizes = args.nvtx_rows or [2_000_000]
    tiles_nvprof = (
        []
        if args.nvprof_tiles.strip().lower() in ("", "none", "0")
        else [int(x) for x in args.nvprof_tiles.split(",") if x.strip()]
    )
    if not args.source.is_file():
        raise SystemExit(f"{args.source}: no such file (pass --source)")
    print(
        f"source {args.source.name}; python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"nsys: {version(['nsys', '--version']) if shutil.which('nsys') else 'absent'}"
    )
    print(f"bytecode compiled: {compile_package()}")
    results: list[tuple[int, list[Run]]] = []
    made: list[Path] = []
    base_dir = Path(tempfile.mkdtemp(prefix="nvbridge-baseline-")) if args.baseline else None
    base = baseline_checkout(args.baseline, base_dir / args.baseline) if base_dir and args.baseline else None
    if base is not None:
        print(f"baseline: {args.baseline} ({base})")
    try:
        for n in sizes:
            db, tiles = cached_db(args.source, n, args.cache_dir)
            made.append(db)
            print(f"\n== {n:,} NVTX rows requested: {db.name}, {tiles} tiles, {db.stat().st_size / 1e6:.0f} MB")
            two_runs = disordered_db(db) if args.disorder else None
            if two_runs is not None:
                made.append(two_runs)
            runs = bench(db, args.repeat, args.skip_nsys, args.convert_only, base, two_runs)
            print(table(runs), flush=True)
            results.append((n, runs))
        if len(results) >= 2:
            (n0, r0), (n1, r1) = results[0], results[-1]
            a, b = {r.tool: r for r in r0}, {r.tool: r for r in r1}
            parts = [
                f"{t} {r.wall / a[t].wall:.2f}x time, {r.rss_mb / a[t].rss_mb:.2f}x RSS" for t, r in b.items() if t in a
            ]
            print(f"\nscaling {n0:,} -> {n1:,} NVTX rows ({n1 / n0:.1f}x rows): " + "; ".join(parts))
            # The same plain loop also grows faster or slower than the rows from run to run
            # (4.9x-5.4x for 5x rows on the 2-vCPU VM); divided by its growth, that drift cancels.
            for ref in (FLOOR, RAW):  # issue 19: convert's growth over the raw read's <= 1.05
                if ref in a and ref in b:
                    drift = b[ref].wall / a[ref].wall
                    rel = [f"{t} {b[t].wall / a[t].wall / drift:.2f}x" for t in b if t in a and t != ref]
                    print(f"time growth over the {ref}'s ({drift:.2f}x): " + "; ".join(rel))
        if args.real_summary.is_file():
            print("\n" + real_summary(args.real_summary, args.repeat), flush=True)
        else:
            print(f"\nnote: {args.real_summary}: no such file, real-report summary skipped")
        if tiles_nvprof:
            if args.nvprof_source.is_file():
                made += [args.cache_dir / f"{args.nvprof_source.stem}.x{k}.sqlite" for k in tiles_nvprof]
                nvprof_bench(args.nvprof_source, tiles_nvprof, args.cache_dir, args.timeout)
            else:
                print(f"\nnote: {args.nvprof_source}: no such file, torch load_nvprof comparison skipped")
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
