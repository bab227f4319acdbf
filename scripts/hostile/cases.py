"""The machinery of scripts/hostile/inputs.py: cases, runs, and how an outcome is classified
(see that script's docstring for the classes)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from scripts.paths import REAL_DB, ROOT, SAMPLE_DB

TIMEOUT = 60.0
FAILURES = (
    "internal error",
    "traceback",
    "hang",
    "partial output",
    "input modified",
    "wrong but silent",
    "unclear error",
    "wrong refusal",
)
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
    # -P: the working directory is not put before PYTHONPATH (env()), so a run started in a
    # checkout (the runners' subprocesses) still uses the code --code picked.
    return [sys.executable, "-P", "-m", "nvbridge", *map(str, args)]


def env() -> dict[str, str]:
    """The subprocesses' environment: this checkout's nvbridge first (``--code`` picks another)."""
    code = os.environ.get("NVBRIDGE_HOSTILE_CODE", str(ROOT))
    return {**os.environ, "PYTHONPATH": code, "COLUMNS": "200"}


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
        try:
            if out.exists():
                found.append(str(out))
        except OSError:  # a name too long to exist (the case is about that name)
            pass
        if out.parent.is_dir():
            found += [str(p) for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
    return found


def judge(
    run: Run, proc: subprocess.CompletedProcess[str] | None, before: dict[str, str], after: dict[str, str]
) -> tuple[str, str]:
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
                run.argv,
                capture_output=True,
                text=True,
                errors="backslashreplace",  # a name that is not UTF-8, printed raw, is still judged
                timeout=run.timeout,
                env=env(),
                cwd=work,
                stdin=subprocess.DEVNULL,
            )
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


def convert_run(
    inp: Path | str,
    work: Path,
    expect: str = "any",
    check: Callable[..., str | None] | None = None,
    extra: Iterable[str] = (),
) -> Run:
    out = work / "out" / "ds"
    return Run(nvbridge("convert", inp, "-o", out, "-q", *extra), expect, [out], check)


def mutated(
    src: Path, sql: Iterable[str], expect: str, check: Callable[..., str | None] | None = None
) -> Callable[[Path], Run]:
    def build(work: Path) -> Run:
        dst = copy_to(src, work)
        con = sqlite3.connect(dst)
        try:
            for stmt in sql:
                if ("NULL" in stmt and stmt.startswith("UPDATE")) or stmt.startswith("INSERT INTO"):
                    relax(con, stmt.split()[1 if stmt.startswith("UPDATE") else 2])
                if "DROP COLUMN" in stmt:  # an index or UNIQUE constraint on the column would block the drop
                    relax(con, stmt.split()[2])
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
    con.executescript(
        f"CREATE TABLE nvb_relaxed ({cols}); INSERT INTO nvb_relaxed SELECT * FROM {table};"
        f"DROP TABLE {table}; ALTER TABLE nvb_relaxed RENAME TO {table};"
    )


def byte_build(src: Path, edit: Callable[[bytes], bytes], expect: str = "any") -> Callable[[Path], Run]:
    def build(work: Path) -> Run:
        dst = work / "in" / src.name
        dst.write_bytes(edit(src.read_bytes()))
        return convert_run(dst, work, expect)

    return build


def first(table: str, where: str = "1") -> str:
    return f"rowid = (SELECT min(rowid) FROM {table} WHERE {where})"


NVTX_RANGE = 'eventType IN (59, 60, 70, 71) AND "end" IS NOT NULL AND "end" > start'


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
