#!/usr/bin/env python3
"""Run ``python -m nvbridge`` on a corpus of broken inputs and classify what it does with each.

    python scripts/hostile_inputs.py [--quick] [--jobs 2] [--only SUBSTRING] [--show-ok]

The corpus is built at run time in a temporary directory (removed afterwards) from the real
exports in ../shared/real_db/ and the recordings in sample_db/: truncations, byte flips, dropped
tables and columns, hostile values, special files, output destinations, concurrency, signals and
broken datasets. Every input is **synthetic damage** done to a copy; nothing is written into the
repository and the originals are opened read-only.

Each case runs the CLI as a subprocess with a timeout and ends in one class:

    ok               exit 0 where success is right (the case's own check passed)
    clean error      exit 1 with one ``Error: ...`` line on stderr and nothing else written
    internal error   "internal error" in the message: a bug of ours reached the user
    traceback        a Python traceback on stderr
    hang             the timeout expired
    partial output   a failed run left its output (or a temporary directory) behind
    input modified   the input file, or its directory's listing, changed
    wrong but silent exit 0 where the input holds impossible rows (they must be refused or
                     reported) or where the case's check of the output failed
    unclear error    a non-zero exit without one ``Error:`` line (usage text, no message)
    wrong refusal    an error where success is right

Everything but "ok" and "clean error" is a failure; the script prints the table, the failing
cases, and exits 1 when there are any. ``--quick`` runs a fixed subset (under a minute) that
tests/test_hostile.py uses.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REAL_DB = Path(os.environ.get("NVBRIDGE_REAL_DB", ROOT.parent / "shared" / "real_db"))
SAMPLE_DB = ROOT / "sample_db"
TIMEOUT = 60.0
FAILURES = ("internal error", "traceback", "hang", "partial output", "input modified",
            "wrong but silent", "unclear error", "wrong refusal")
# Words a successful convert prints when it kept and reported impossible rows.
FLAG_WORDS = ("impossible", "flagged", "excluded")
K = "CUPTI_ACTIVITY_KIND_"
BIG = 1 << 62
MAX = (1 << 63) - 1


@dataclass
class Run:
    """One subprocess: what a case asks for and what it expects."""

    argv: list[str]
    expect: str = "any"  # "ok", "error", "refuse_or_flag" (impossible rows), "any"
    outputs: list[Path] = field(default_factory=list)  # must not exist after a failure
    check: Callable[[subprocess.CompletedProcess[str]], str | None] | None = None
    timeout: float = TIMEOUT


@dataclass
class Case:
    name: str
    family: str
    build: Callable[[Path], Run]  # given an empty work dir, make the input and say what to run
    watched: str = "in"  # the work sub-directory whose files must stay unchanged
    runner: Callable[[Case, Path], tuple[str, str]] | None = None  # custom cases
    quick: bool = False


def nvbridge(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "nvbridge", *map(str, args)]


CODE = ROOT  # the repository whose nvbridge runs (--code: measure another revision)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(CODE), "COLUMNS": "200"}


def snapshot(folder: Path) -> dict[str, str]:
    """Names and content hashes of every file under ``folder``."""
    out: dict[str, str] = {}
    if not folder.exists():
        return out
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_fifo() or p.is_dir():
            out[rel] = "special"
        elif p.is_file():
            try:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            except OSError:
                out[rel] = "unreadable"
    return out


def leftovers(outputs: Iterable[Path]) -> list[str]:
    """Outputs, or temporary siblings of them (``.name.*``), that exist."""
    found = []
    for out in outputs:
        if out.exists():
            found.append(str(out))
        if out.parent.is_dir():
            found += [str(p) for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
    return found


def judge(run: Run, proc: subprocess.CompletedProcess[str] | None, before: dict[str, str],
          after: dict[str, str]) -> tuple[str, str]:
    if proc is None:
        return "hang", f"no exit after {run.timeout:.0f} s"
    err = proc.stderr.strip()
    last = err.splitlines()[-1] if err else ""
    if "Traceback (most recent call last)" in err:
        return "traceback", last[:200]
    if "internal error" in err:
        return "internal error", last[:200]
    if before != after:
        return "input modified", f"{sorted(set(before.items()) ^ set(after.items()))[:3]}"
    if proc.returncode != 0:
        left = leftovers(run.outputs)
        if left:
            return "partial output", f"{left[:2]} after: {last[:150]}"
        if not (len(err.splitlines()) == 1 and err.startswith("Error:")):
            return "unclear error", err.replace("\n", " | ")[:200]
        if run.expect == "ok":
            return "wrong refusal", last[:200]
        return "clean error", last[:200]
    text = proc.stdout + proc.stderr
    if run.expect == "error":
        return "wrong but silent", "exit 0: " + proc.stdout.strip()[:150]
    if run.expect == "refuse_or_flag" and not any(w in text.lower() for w in FLAG_WORDS):
        return "wrong but silent", "exit 0 without a notice: " + proc.stdout.strip()[:150]
    if run.check is not None:
        problem = run.check(proc)
        if problem:
            return "wrong but silent", problem
    return "ok", proc.stdout.strip()[:150]


def execute(case: Case, root: Path) -> tuple[str, str]:
    work = root / case.name.replace("/", "_")
    (work / "in").mkdir(parents=True)
    (work / "out").mkdir()
    try:
        if case.runner is not None:
            return case.runner(case, work)
        run = case.build(work)
        before = snapshot(work / case.watched)
        try:
            proc: subprocess.CompletedProcess[str] | None = subprocess.run(
                run.argv, capture_output=True, text=True, timeout=run.timeout, env=env(), cwd=work,
                stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            proc = None
        return judge(run, proc, before, snapshot(work / case.watched))
    except Exception as exc:  # the harness itself: report, never hide
        return "harness error", f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------------- inputs

def bases() -> list[Path]:
    real = sorted(p for p in REAL_DB.glob("*") if p.suffix in (".sqlite", ".nvvp")) if REAL_DB.is_dir() else []
    return real + sorted(SAMPLE_DB.glob("*.sqlite"))


def is_nsys(path: Path) -> bool:
    return tables(path).__contains__("StringIds")


_TABLES: dict[Path, set[str]] = {}


def tables(path: Path) -> set[str]:
    if path not in _TABLES:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            _TABLES[path] = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            con.close()
    return _TABLES[path]


def rows(path: Path, table: str, where: str = "1") -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(con.execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchone()[0])
    finally:
        con.close()


def copy_to(src: Path, work: Path, name: str | None = None) -> Path:
    dst = work / "in" / (name or src.name)
    shutil.copyfile(src, dst)
    return dst


def convert_run(inp: Path, work: Path, expect: str = "any", check: Callable[..., str | None] | None = None,
                extra: Iterable[str] = ()) -> Run:
    out = work / "out" / "ds"
    return Run(nvbridge("convert", inp, "-o", out, "-q", *extra), expect, [out], check)


def mutated(src: Path, sql: Iterable[str], expect: str, check: Callable[..., str | None] | None = None
            ) -> Callable[[Path], Run]:
    def build(work: Path) -> Run:
        dst = copy_to(src, work)
        con = sqlite3.connect(dst)
        try:
            for stmt in sql:
                if "NULL" in stmt and stmt.startswith("UPDATE"):
                    relax(con, stmt.split()[1])
                con.execute(stmt)
            con.commit()
        finally:
            con.close()
        return convert_run(dst, work, expect, check)
    return build


def relax(con: sqlite3.Connection, table: str) -> None:
    """Copy ``table`` without its NOT NULL constraints (same columns, types and rows), so a
    case can store the NULLs a damaged or hand-made export could hold."""
    cols = ", ".join(f'"{name}" {typ}' for _, name, typ, *_ in con.execute(f"PRAGMA table_info({table})"))
    con.executescript(f"CREATE TABLE nvb_relaxed ({cols}); INSERT INTO nvb_relaxed SELECT * FROM {table};"
                      f"DROP TABLE {table}; ALTER TABLE nvb_relaxed RENAME TO {table};")


def byte_build(src: Path, edit: Callable[[bytes], bytes], expect: str = "any") -> Callable[[Path], Run]:
    def build(work: Path) -> Run:
        dst = work / "in" / src.name
        dst.write_bytes(edit(src.read_bytes()))
        return convert_run(dst, work, expect)
    return build


def first(table: str, where: str = "1") -> str:
    return f"rowid = (SELECT min(rowid) FROM {table} WHERE {where})"


NVTX_RANGE = "eventType IN (59, 60, 70, 71) AND \"end\" IS NOT NULL AND \"end\" > start"


def value_cases(src: Path) -> list[Case]:
    """Hostile values in the event tables the readers take (refuse or flag expected)."""
    have = tables(src)
    tag = src.stem
    plans: list[tuple[str, str, str]] = []  # (table, row filter, kind)
    if "NVTX_EVENTS" in have and rows(src, "NVTX_EVENTS", NVTX_RANGE):
        plans.append(("NVTX_EVENTS", NVTX_RANGE, "nvtx"))
    for table in (K + "RUNTIME", K + "KERNEL", K + "MEMCPY", K + "DRIVER", K + "CONCURRENT_KERNEL"):
        if table in have and rows(src, table):
            plans.append((table, "1", "event"))
    if K + "MARKER" in have and rows(src, K + "MARKER", "flags = 2"):
        plans.append((K + "MARKER", "flags = 2", "marker"))
    cases: list[Case] = []

    def add(name: str, sql: list[str], expect: str) -> None:
        cases.append(Case(f"value/{tag}/{name}", "hostile values", mutated(src, sql, expect)))

    for table, where, kind in plans:
        row = first(table, where)
        t = table.replace(K, "")
        start, end = ("timestamp", None) if kind == "marker" else ("start", '"end"')
        add(f"{t}.{start}=NULL", [f"UPDATE {table} SET {start} = NULL WHERE {row}"], "error")
        add(f"{t}.{start}<0", [f"UPDATE {table} SET {start} = -5 WHERE {row}"], "refuse_or_flag")
        add(f"{t}.{start}=BLOB", [f"UPDATE {table} SET {start} = x'00ff' WHERE {row}"], "error")
        add(f"{t}.{start}=text", [f"UPDATE {table} SET {start} = 'soon' WHERE {row}"], "error")
        add(f"{t}.{start}=2^62", [f"UPDATE {table} SET {start} = {BIG} WHERE {row}"], "refuse_or_flag")
        if end is None:
            add(f"{t}.objectId=short", [f"UPDATE {table} SET objectId = x'0102' WHERE {row}"], "error")
            add(f"{t}.name=missing-string", [f"UPDATE {table} SET name = 987654321 WHERE {row}"], "error")
            continue
        add(f"{t}.end=NULL", [f"UPDATE {table} SET {end} = NULL WHERE {row}"], "any" if kind == "nvtx" else "error")
        add(f"{t}.end=2^63-1", [f"UPDATE {table} SET {end} = {MAX} WHERE {row}"], "refuse_or_flag")
        add(f"{t}.end<start", [f"UPDATE {table} SET {end} = start - 1000 WHERE {row}"], "refuse_or_flag")
        add(f"{t}.swapped", [f"UPDATE {table} SET start = {end}, {end} = start WHERE {where} AND {end} > start"],
            "refuse_or_flag")
        if kind == "nvtx":
            add("NVTX.eventType=NULL", [f"UPDATE {table} SET eventType = NULL WHERE {row}"], "error")
            add("NVTX.globalTid=NULL", [f"UPDATE {table} SET globalTid = NULL WHERE {row}"], "error")
            add("NVTX.end-column-dropped", [f'ALTER TABLE {table} DROP COLUMN "end"'], "error")
            add("NVTX.textId=missing", [f"UPDATE {table} SET text = NULL, textId = 987654321 WHERE {row}"],
                "error")
            cases.append(Case(f"value/{tag}/NVTX.rowid=2^62", "hostile values", rowid_gap(src)))
            continue
        add(f"{t}.correlationId=NULL", [f"UPDATE {table} SET correlationId = NULL WHERE {row}"], "error")
        add(f"{t}.correlationId=text", [f"UPDATE {table} SET correlationId = 'x7' WHERE {row}"], "error")
        add(f"{t}.duplicated", [f"INSERT INTO {table} SELECT * FROM {table} WHERE {row}"], "refuse_or_flag")
        add(f"{t}.sum>int64", [f"UPDATE {table} SET start = 0, {end} = {BIG - 1}"], "refuse_or_flag")
        if "KERNEL" in table and is_nsys(src):
            add(f"{t}.demangledName=missing", [f"UPDATE {table} SET demangledName = 987654321 WHERE {row}"],
                "error")
        if table.endswith("RUNTIME") and is_nsys(src):
            add(f"{t}.nameId=missing", [f"UPDATE {table} SET nameId = 987654321 WHERE {row}"], "error")
            add(f"{t}.globalTid=NULL", [f"UPDATE {table} SET globalTid = NULL WHERE {row}"], "error")
    return cases


def rowid_gap(src: Path) -> Callable[[Path], Run]:
    """The last NVTX row moved to rowid 2^62: same dataset as the original, in time."""
    def build(work: Path) -> Run:
        dst = copy_to(src, work)
        con = sqlite3.connect(dst)
        con.execute(f"UPDATE NVTX_EVENTS SET rowid = {BIG} WHERE rowid = (SELECT max(rowid) FROM NVTX_EVENTS)")
        con.commit()
        con.close()
        ref = work / "out" / "ref"
        subprocess.run(nvbridge("convert", src, "-o", ref, "-q"), env=env(), check=True, capture_output=True,
                       timeout=TIMEOUT)
        out = work / "out" / "ds"

        def same(_proc: subprocess.CompletedProcess[str]) -> str | None:
            return compare_datasets(ref, out)
        return Run(nvbridge("convert", dst, "-o", out, "-q"), "ok", [out], same, timeout=30)
    return build


def compare_datasets(a: Path, b: Path) -> str | None:
    import pyarrow.parquet as pq

    names = sorted(p.relative_to(a) for p in a.rglob("*.parquet"))
    if names != sorted(p.relative_to(b) for p in b.rglob("*.parquet")):
        return "the dataset's files differ"
    for rel in names:
        ta, tb = pq.read_table(a / rel), pq.read_table(b / rel)
        if "meta" in str(rel):
            continue
        if not ta.equals(tb):
            return f"{rel} differs from the original's"
    return None


def structure_cases(src: Path) -> list[Case]:
    tag = src.stem
    have = tables(src)
    cases = []
    for table in ("StringIds", "NVTX_EVENTS", K + "RUNTIME", K + "KERNEL", K + "MEMCPY", "META_DATA_EXPORT",
                  "EXPORT_META_DATA", "TARGET_INFO_SESSION_START_TIME", "ThreadNames", "PROCESSES",
                  "StringTable", K + "MARKER", "Version", K + "NAME"):
        if table in have:
            cases.append(Case(f"drop-table/{tag}/{table}", "dropped tables",
                              mutated(src, [f"DROP TABLE {table}"], "any")))
    for table, cols in (("NVTX_EVENTS", ("start", "eventType", "text", "globalTid", "textId", "domainId")),
                        (K + "RUNTIME", ("start", "nameId", "correlationId", "globalTid", "cbid")),
                        (K + "KERNEL", ("start", "end", "demangledName", "correlationId", "name", "deviceId")),
                        (K + "MARKER", ("timestamp", "objectId", "flags", "id")),
                        ("StringIds", ("value",)), ("StringTable", ("value",))):
        if table not in have:
            continue
        con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
        present = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
        con.close()
        for col in cols:
            if col in present:
                cases.append(Case(f"drop-column/{tag}/{table}.{col}", "dropped columns",
                                  mutated(src, [f'ALTER TABLE {table} DROP COLUMN "{col}"'], "any")))
    if "StringIds" in have:
        cases.append(Case(f"value/{tag}/StringIds-emptied", "hostile values",
                          mutated(src, ["DELETE FROM StringIds"], "error")))
    for table, col in (("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"), ("ANALYSIS_DETAILS", "duration"),
                       ("TARGET_INFO_GPU", "id"), ("PROCESSES", "globalPid"), ("Version", "version")):
        if table in have:
            cases.append(Case(f"value/{tag}/{table}.{col}=text", "hostile values",
                              mutated(src, [f"UPDATE {table} SET {col} = 'n/a'"], "any")))
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in have:
            cases.append(Case(f"value/{tag}/{table}.value=BLOB", "hostile values",
                              mutated(src, [f"UPDATE {table} SET value = x'ff00fe'"], "any")))
    return cases


def _cut(data: bytes, n: int) -> bytes:
    return data[:n]


def byte_cases(src: Path, rng: random.Random) -> list[Case]:
    tag = src.stem
    size = src.stat().st_size
    cases = []
    for frac in (0.001, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.999):
        cut = max(1, int(size * frac))
        cases.append(Case(f"truncate/{tag}/{cut}", "truncations", byte_build(src, functools.partial(_cut, n=cut))))
    cases.append(Case(f"truncate/{tag}/header", "truncations", byte_build(src, lambda b: b[:50])))
    for i in range(12):
        pos = rng.randrange(0, size) if i else rng.randrange(0, 100)

        def flip(b: bytes, p: int = pos) -> bytes:
            return b[:p] + bytes([b[p] ^ 0xFF]) + b[p + 1:]
        cases.append(Case(f"flip/{tag}/{pos}", "byte flips", byte_build(src, flip)))
    return cases


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
        return convert_run(Path("sqlite:///" + str(copy_to(sample, work))), work, "ok")

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
        code = ("import sqlite3,os,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA cache_size=1');"
                "c.execute('BEGIN'); c.execute('DELETE FROM StringIds'); c.execute('UPDATE NVTX_EVENTS SET start=0');"
                "os._exit(9)")
        subprocess.run([sys.executable, "-c", code, str(dst)], check=False)
        return convert_run(dst, work, "any")

    def symlink_loop(work: Path) -> Run:
        p = work / "in" / "loop.sqlite"
        p.symlink_to(p)
        return convert_run(p, work, "error")

    return [Case(f"special/{n}", "special files", b) for n, b in (
        ("fifo", fifo), ("directory", directory), ("empty", empty), ("missing", missing), ("url", url),
        ("odd-name", odd_name), ("nsys-rep-junk", rep), ("wal-mode", wal), ("hot-journal", hot_journal),
        ("symlink-loop", symlink_loop))] + [Case("special/locked", "special files", lambda w: Run([]),
                                                 runner=locked_runner(sample))]


def locked_runner(sample: Path) -> Callable[[Case, Path], tuple[str, str]]:
    """Another program holds an exclusive lock on the database while we convert it."""
    def run(case: Case, work: Path) -> tuple[str, str]:
        dst = copy_to(sample, work)
        code = ("import sqlite3,sys,time; c=sqlite3.connect(sys.argv[1], isolation_level=None);"
                "c.execute('BEGIN EXCLUSIVE'); c.execute('DELETE FROM StringIds'); print('locked', flush=True);"
                "time.sleep(30)")
        holder = subprocess.Popen([sys.executable, "-c", code, str(dst)], stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None
            holder.stdout.readline()
            r = convert_run(dst, work, "error")
            r.timeout = 20
            before = snapshot(work / "in")
            try:
                proc: subprocess.CompletedProcess[str] | None = subprocess.run(
                    r.argv, capture_output=True, text=True, timeout=r.timeout, env=env())
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
        return Run(nvbridge("convert", copy_to(sample, work), "-o", out, "--chrome", work / "out" / "nodir" / "t.json",
                            "-q"), "any", [out])

    def existing_file(work: Path) -> Run:
        (work / "out" / "ds").write_text("keep me")
        return Run(nvbridge("convert", copy_to(sample, work), "-o", work / "out" / "ds", "-q"), "error",
                   check=None)

    def force_foreign(work: Path) -> Run:
        """--force on a folder that is not a dataset (it holds the input and notes): refuse."""
        inp = copy_to(sample, work)
        (work / "in" / "notes.txt").write_text("mine")
        return Run(nvbridge("convert", inp, "-o", work / "in", "--force", "-q"), "error")

    def trace_nodir(work: Path) -> Run:
        return Run(nvbridge("trace", copy_to(sample, work), "-o", work / "out" / "nodir" / "t.json"), "any")

    def same_as_input(work: Path) -> Run:
        inp = copy_to(sample, work)
        return Run(nvbridge("convert", inp, "-o", inp, "--force", "-q"), "error")

    return [Case(f"output/{n}", "output destinations", b) for n, b in (
        ("under-a-file", under_file), ("chrome-nodir", chrome_nodir), ("existing-file", existing_file),
        ("force-on-foreign-dir", force_foreign), ("trace-nodir", trace_nodir), ("onto-input", same_as_input))]


def concurrency_runner(case: Case, work: Path) -> tuple[str, str]:
    """Two converts to one new -o at once: one wins, the other says the output exists."""
    inp = copy_to(SAMPLE_DB / "transformer_shapes_cpu.sqlite", work)
    out = work / "out" / "ds"
    procs = [subprocess.Popen(nvbridge("convert", inp, "-o", out, "-q"), env=env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
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
        inp = copy_to(REAL_DB / "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite", work) if REAL_DB.is_dir() else \
            copy_to(SAMPLE_DB / "transformer_shapes_cpu.sqlite", work)
        out = work / "out" / "ds"
        before = snapshot(work / "in")
        p = subprocess.Popen(nvbridge("convert", inp, "-o", out, "--chrome", work / "out" / "t.json.gz", "-q"),
                             env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.8)
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
        second = subprocess.run(nvbridge("convert", inp, "-o", out, "--force", "-q"), env=env(),
                                capture_output=True, text=True, timeout=TIMEOUT)
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
            target = next((f for f in files if "ops" in f.name), files[0])
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
                    names = ["end_ns" if n == "start_ns" else "start_ns" if n == "end_ns" else n
                             for n in t.column_names]
                    pq.write_table(t.rename_columns(names), target)
            out = work / "out" / ("t.json" if cmd == "trace" else "p.png")
            argv = nvbridge(cmd, ds) if cmd == "summary" else nvbridge(cmd, ds, "-o", out)
            expect = "error" if how != "no-meta" else "any"
            return Run(argv, expect, [] if cmd == "summary" else [out], timeout=120)
        return build
    return [Case(f"dataset/{how}/{cmd}", "broken datasets", breaker(how, cmd))
            for how in ("missing", "truncated", "junk", "empty", "wrong-schema", "no-meta", "swapped")
            for cmd in ("summary", "trace", "plot")]


def corpus() -> list[Case]:
    rng = random.Random(14)
    cases: list[Case] = []
    for src in bases():
        cases += byte_cases(src, rng) + structure_cases(src) + value_cases(src)
    sample = SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite"
    cases += special_cases(sample) + output_cases(sample) + dataset_cases(SAMPLE_DB / "cnn_cpu.sqlite")
    cases.append(Case("concurrency/two-converts-one-output", "concurrency", lambda w: Run([]),
                      runner=concurrency_runner))
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        cases.append(Case(f"signal/{sig.name}", "signals", lambda w: Run([]), runner=signal_runner(sig)))
    return cases


def quick_subset(cases: list[Case]) -> list[Case]:
    """Every case on the synthetic-GPU sample's hostile values, the special files and outputs,
    plus a few of every other family: under a minute on two cores."""
    keep = [c for c in cases if c.family in ("special files", "output destinations")
            or (c.family == "hostile values" and "cnn_cpu+synthetic_gpu" in c.name)]
    rng = random.Random(18)
    for family in ("truncations", "byte flips", "dropped tables", "dropped columns"):
        members = [c for c in cases if c.family == family]
        keep += rng.sample(members, min(4, len(members)))
    return keep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the fast subset tests/test_hostile.py runs")
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once")
    ap.add_argument("--only", help="run the cases whose name contains this")
    ap.add_argument("--show-ok", action="store_true", help="list passing cases too")
    ap.add_argument("--code", type=Path, default=ROOT, help="run the nvbridge of this checkout (default: this one)")
    args = ap.parse_args(argv)
    global CODE
    CODE = args.code.resolve()
    cases = corpus()
    if args.quick:
        cases = quick_subset(cases)
    if args.only:
        cases = [c for c in cases if args.only in c.name]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nvbridge-hostile-") as tmp, ThreadPoolExecutor(args.jobs) as pool:
        verdicts = list(pool.map(lambda c: execute(c, Path(tmp)), cases))
    table: dict[str, Counter[str]] = {}
    for case, (cls, _) in zip(cases, verdicts):
        table.setdefault(case.family, Counter())[cls] += 1
    classes = ["ok", "clean error", *FAILURES, "harness error"]
    print(f"{'family':<22}{'cases':>6}" + "".join(f"{c:>17}" for c in classes))
    total: Counter[str] = Counter()
    for family, counts in table.items():
        total.update(counts)
        print(f"{family:<22}{sum(counts.values()):>6}" + "".join(f"{counts[c]:>17}" for c in classes))
    print(f"{'total':<22}{sum(total.values()):>6}" + "".join(f"{total[c]:>17}" for c in classes))
    failing = [(c, v) for c, v in zip(cases, verdicts) if v[0] not in ("ok", "clean error")]
    print(f"\n{len(failing)} failing of {len(cases)} cases in {time.monotonic() - t0:.0f} s")
    for case, (cls, detail) in failing:
        print(f"  [{cls}] {case.name}: {detail}")
    if args.show_ok:
        for case, (cls, detail) in zip(cases, verdicts):
            if cls in ("ok", "clean error"):
                print(f"  ({cls}) {case.name}: {detail}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
