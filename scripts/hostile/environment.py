"""Special files, output destinations, concurrency, signals and broken datasets for
scripts/hostile/inputs.py."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from scripts.hostile.cases import (
    REAL_DB,
    SAMPLE_DB,
    TIMEOUT,
    Case,
    Run,
    convert_run,
    copy_to,
    env,
    judge,
    nvbridge,
    snapshot,
)


def special_cases(sample: Path) -> list[Case]:
    def fifo(work: Path) -> Run:
        p = work / "in" / "pipe.sqlite"
        os.mkfifo(p)
        return convert_run(p, work, "error")

    def directory(work: Path) -> Run:
        (work / "in" / "d.sqlite").mkdir()
        return convert_run(work / "in" / "d.sqlite", work, "error")

    def empty(work: Path) -> Run:
        (work / "in" / "e.sqlite").touch()
        return convert_run(work / "in" / "e.sqlite", work, "error")

    def missing(work: Path) -> Run:
        return convert_run(work / "in" / "nope.sqlite", work, "error")

    def url(work: Path) -> Run:
        # a str: Path("sqlite:///x") would fold the slashes into "sqlite:/x"
        return convert_run("sqlite:///" + str(copy_to(sample, work)), work, "ok")

    def odd_name(work: Path) -> Run:
        return convert_run(copy_to(sample, work, "a #?%20 b.sqlite"), work, "ok")

    def rep(work: Path) -> Run:
        p = work / "in" / "r.nsys-rep"
        p.write_bytes(b"\x00QDSTRM junk" * 10)
        return convert_run(p, work, "error")

    def wal(work: Path) -> Run:
        dst = copy_to(sample, work)
        con = sqlite3.connect(dst)
        con.execute("PRAGMA journal_mode=WAL")
        con.close()
        return convert_run(dst, work, "ok")

    def hot_journal(work: Path) -> Run:
        dst = copy_to(sample, work)
        code = (
            "import sqlite3,os,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA cache_size=1');"
            "c.execute('BEGIN'); c.execute('DELETE FROM StringIds'); c.execute('UPDATE NVTX_EVENTS SET start=0');"
            "os._exit(9)"
        )
        subprocess.run([sys.executable, "-c", code, str(dst)], check=False)
        return convert_run(dst, work, "any")

    def symlink_loop(work: Path) -> Run:
        p = work / "in" / "loop.sqlite"
        p.symlink_to(p)
        return convert_run(p, work, "error")

    return [
        Case(f"special/{n}", "special files", b)
        for n, b in (
            ("fifo", fifo),
            ("directory", directory),
            ("empty", empty),
            ("missing", missing),
            ("url", url),
            ("odd-name", odd_name),
            ("nsys-rep-junk", rep),
            ("wal-mode", wal),
            ("hot-journal", hot_journal),
            ("symlink-loop", symlink_loop),
        )
    ] + [Case("special/locked", "special files", lambda w: Run([]), runner=locked_runner(sample))]


def locked_runner(sample: Path) -> Callable[[Case, Path], tuple[str, str]]:
    """Another program holds an exclusive lock on the database while we convert it."""

    def run(case: Case, work: Path) -> tuple[str, str]:
        dst = copy_to(sample, work)
        code = (
            "import sqlite3,sys,time; c=sqlite3.connect(sys.argv[1], isolation_level=None);"
            "c.execute('BEGIN EXCLUSIVE'); c.execute('DELETE FROM StringIds'); print('locked', flush=True);"
            "time.sleep(30)"
        )
        holder = subprocess.Popen([sys.executable, "-c", code, str(dst)], stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None
            holder.stdout.readline()
            r = convert_run(dst, work, "error")
            r.timeout = 20
            before = snapshot(work / "in")
            try:
                proc: subprocess.CompletedProcess[str] | None = subprocess.run(
                    r.argv, capture_output=True, text=True, timeout=r.timeout, env=env()
                )
            except subprocess.TimeoutExpired:
                proc = None
            verdict = judge(r, proc, before, snapshot(work / "in"))
            if verdict[0] == "clean error" and "damaged" in verdict[1]:
                return "unclear error", "a locked database is called damaged: " + verdict[1]
            return verdict
        finally:
            holder.kill()
            holder.wait()

    return run


def output_cases(sample: Path) -> list[Case]:
    def under_file(work: Path) -> Run:
        (work / "out" / "f").write_text("x")
        return Run(nvbridge("convert", copy_to(sample, work), "-o", work / "out" / "f" / "ds", "-q"), "error")

    def chrome_nodir(work: Path) -> Run:
        out = work / "out" / "ds"
        return Run(
            nvbridge("convert", copy_to(sample, work), "-o", out, "--chrome", work / "out" / "nodir" / "t.json", "-q"),
            "any",
            [out],
        )

    def existing_file(work: Path) -> Run:
        (work / "out" / "ds").write_text("keep me")
        return Run(nvbridge("convert", copy_to(sample, work), "-o", work / "out" / "ds", "-q"), "error", check=None)

    def force_foreign(work: Path) -> Run:
        """--force on a folder that is not a dataset (it holds the input and notes): refuse."""
        inp = copy_to(sample, work)
        (work / "in" / "notes.txt").write_text("mine")
        return Run(nvbridge("convert", inp, "-o", work / "in", "--force", "-q"), "error")

    def force_foreign_file(command: str, name: str) -> Callable[[Path], Run]:
        """--force onto a file nvbridge did not write (the user's, beside the input): refuse."""

        def run(work: Path) -> Run:
            inp = copy_to(sample, work)
            (work / "in" / name).write_text("mine")
            return Run(nvbridge(command, inp, "-o", work / "in" / name, "--force"), "error")

        return run

    def trace_nodir(work: Path) -> Run:
        return Run(nvbridge("trace", copy_to(sample, work), "-o", work / "out" / "nodir" / "t.json"), "any")

    def same_as_input(work: Path) -> Run:
        inp = copy_to(sample, work)
        return Run(nvbridge("convert", inp, "-o", inp, "--force", "-q"), "error")

    return [
        Case(f"output/{n}", "output destinations", b)
        for n, b in (
            ("under-a-file", under_file),
            ("chrome-nodir", chrome_nodir),
            ("existing-file", existing_file),
            ("force-on-foreign-dir", force_foreign),
            ("force-on-foreign-trace", force_foreign_file("trace", "notes.json")),
            ("force-on-foreign-picture", force_foreign_file("plot", "photo.png")),
            ("force-on-foreign-page", force_foreign_file("report", "index.html")),
            ("trace-nodir", trace_nodir),
            ("onto-input", same_as_input),
        )
    ]


def concurrency_runner(case: Case, work: Path) -> tuple[str, str]:
    """Two converts to one new -o at once: one wins, the other says the output exists."""
    inp = copy_to(SAMPLE_DB / "transformer_shapes_cpu.sqlite", work)
    out = work / "out" / "ds"
    procs = [
        subprocess.Popen(
            nvbridge("convert", inp, "-o", out, "-q"),
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    res = [p.communicate(timeout=TIMEOUT) for p in procs]
    codes = sorted(p.returncode for p in procs)
    if any("Traceback" in e for _, e in res):
        return "traceback", res[0][1][-200:] + res[1][1][-200:]
    if codes != [0, 1]:
        return "wrong but silent", f"exit codes {codes}: both claim the output"
    left = [p.name for p in out.parent.iterdir() if p.name.startswith(".ds.")]
    if left:
        return "partial output", f"left {left}"
    return "ok", "one run wrote, the other refused"


def signal_runner(sig: int) -> Callable[[Case, Path], tuple[str, str]]:
    def run(case: Case, work: Path) -> tuple[str, str]:
        inp = (
            copy_to(REAL_DB / "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite", work)
            if REAL_DB.is_dir()
            else copy_to(SAMPLE_DB / "transformer_shapes_cpu.sqlite", work)
        )
        out = work / "out" / "ds"
        before = snapshot(work / "in")
        p = subprocess.Popen(
            nvbridge("convert", inp, "-o", out, "--chrome", work / "out" / "t.json.gz", "-q"),
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Under way (its staging directory made), not still importing: a signal during the imports of
        # a loaded machine is a Python traceback before nvbridge's handler exists (see the report).
        deadline = time.monotonic() + TIMEOUT
        while not list(out.parent.glob(".ds.nvbridge-staging*")) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        p.send_signal(sig)
        t0 = time.monotonic()
        try:
            _, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            return "hang", f"still running 10 s after {signal.Signals(sig).name}"
        took = time.monotonic() - t0
        if "Traceback" in err:
            return "traceback", err.strip().splitlines()[-1][:200]
        if snapshot(work / "in") != before:
            return "input modified", ""
        second = subprocess.run(
            nvbridge("convert", inp, "-o", out, "--force", "-q"),
            env=env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        if second.returncode != 0:
            return "wrong refusal", "second run: " + second.stderr.strip()[:200]
        left = [q.name for q in out.parent.iterdir() if q.name.startswith(".ds.")]
        if left:
            return "partial output", f"temporary dirs left after the second run: {left}"
        if took > 2 and sig != signal.SIGKILL:
            return "hang", f"took {took:.1f} s to exit after {signal.Signals(sig).name}"
        return "ok", f"exit {p.returncode} in {took:.1f} s; the second run converted"

    return run


def dataset_cases(sample: Path) -> list[Case]:
    """Broken datasets for summary, trace and plot."""

    def breaker(how: str, cmd: str) -> Callable[[Path], Run]:
        def build(work: Path) -> Run:
            ds = work / "in" / "ds"
            subprocess.run(nvbridge("convert", sample, "-o", ds, "-q"), env=env(), check=True, timeout=TIMEOUT)
            files = sorted(ds.rglob("*.parquet"))
            # the ops table itself (gpu_ops sorts first and is empty in a CPU recording: swapping
            # its columns damages nothing)
            target = next((f for f in files if f.name == "ops.parquet"), files[0])
            if how == "missing":
                target.unlink()
            elif how == "truncated":
                target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
            elif how == "junk":
                target.write_bytes(b"not parquet at all" * 50)
            elif how == "empty":
                target.write_bytes(b"")
            elif how == "wrong-schema":
                import pyarrow as pa
                import pyarrow.parquet as pq

                pq.write_table(pa.table({"x": [1, 2, 3]}), target)
            elif how == "no-meta":
                for f in files:
                    if "meta" in f.name:
                        f.unlink()
            elif how == "swapped":
                import pyarrow.parquet as pq

                t = pq.read_table(target)
                if "start_ns" in t.column_names and "end_ns" in t.column_names:
                    names = [
                        "end_ns" if n == "start_ns" else "start_ns" if n == "end_ns" else n for n in t.column_names
                    ]
                    pq.write_table(t.rename_columns(names), target)
            out = work / "out" / ("t.json" if cmd == "trace" else "p.png")
            argv = nvbridge(cmd, ds) if cmd == "summary" else nvbridge(cmd, ds, "-o", out)
            expect = "error" if how != "no-meta" else "any"
            return Run(argv, expect, [] if cmd == "summary" else [out], timeout=120)

        return build

    return [
        Case(f"dataset/{how}/{cmd}", "broken datasets", breaker(how, cmd))
        for how in ("missing", "truncated", "junk", "empty", "wrong-schema", "no-meta", "swapped")
        for cmd in ("summary", "trace", "plot")
    ]
