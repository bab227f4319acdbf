"""The runs scripts/bench_convert.py makes once, after the sizes: ``nvbridge summary`` on the
dataset of a real report, and torch's ``load_nvprof`` against nvbridge on a tiled nvprof report.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from . import large_db as make_large_db
from .convert_run import Run, run, warm
from .convert_table import row

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
