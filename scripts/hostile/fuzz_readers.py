#!/usr/bin/env python3
"""Coverage-guided fuzzing of the readers (atheris, libFuzzer's engine for Python).

    pip install atheris
    python -m scripts.hostile.fuzz_readers --seconds 300 [--seed-file cnn_cpu+synthetic_gpu.sqlite]

Each fuzz input is decoded into 1-4 edits of a copy of a sample_db/ recording (seeds come from
sample_db/ only, never from the real exports): an UPDATE of one column of some rows to a hostile
value (NULL, negative, 2^62, 2^63-1, text, BLOB, a real, another column), a deleted or duplicated
row, a dropped column or table. The edited copy is read with ``nvbridge.readers.read_profile``.
Reading may succeed or raise an ``NvbridgeError`` (a one-line message for the user); any other
exception is a crash. Every distinct crash (exception type and first line) is written to
``tests/regress/<type>-<hash>.json`` as the seed name and the SQL edits that reproduce it;
tests/test_readers_validation.py replays every file there. Inputs are synthetic damage.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import json
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from scripts.paths import REGRESS, SAMPLE_DB

TABLES = (
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "StringIds",
    "ThreadNames",
    "TARGET_INFO_SESSION_START_TIME",
    "ANALYSIS_DETAILS",
    "PROCESSES",
    "EXPORT_META_DATA",
    "META_DATA_EXPORT",
    "DIAGNOSTIC_EVENT",
)
VALUES = (
    "NULL",
    "-1",
    "0",
    "1",
    str(1 << 62),
    str((1 << 63) - 1),
    str(-(1 << 63)),
    "'x'",
    "x'00'",
    "1.5",
    "''",
    "59",
    "60",
    "75",
    "34",
    "987654321",
)
ROWS = ("rowid = (SELECT min(rowid) FROM {t})", "rowid = (SELECT max(rowid) FROM {t})", "rowid % 7 = 3", "1")


def schema(path: Path) -> dict[str, list[str]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return {t: [r[1] for r in con.execute(f"PRAGMA table_info({t})")] for t in TABLES if t in have}
    finally:
        con.close()


def decode(data: bytes, tables: dict[str, list[str]]) -> list[str]:
    """The SQL edits a fuzz input stands for (every byte string decodes to some edits)."""
    import atheris

    fdp = atheris.FuzzedDataProvider(data)
    names = sorted(tables)
    edits = []
    for _ in range(fdp.ConsumeIntInRange(1, 4)):
        t = names[fdp.ConsumeIntInRange(0, len(names) - 1)]
        cols = tables[t]
        col = cols[fdp.ConsumeIntInRange(0, len(cols) - 1)]
        where = ROWS[fdp.ConsumeIntInRange(0, len(ROWS) - 1)].format(t=t)
        op = fdp.ConsumeIntInRange(0, 9)
        if op <= 5:
            value = (
                VALUES[fdp.ConsumeIntInRange(0, len(VALUES) - 1)]
                if op <= 3
                else f'"{cols[fdp.ConsumeIntInRange(0, len(cols) - 1)]}"'
                if op == 4
                else f'"{col}" + {fdp.ConsumeIntInRange(-1000, 1000)}'
            )
            edits.append(f'UPDATE {t} SET "{col}" = {value} WHERE {where}')
        elif op == 6:
            edits.append(f"DELETE FROM {t} WHERE {where}")
        elif op == 7:
            edits.append(f"INSERT INTO {t} SELECT * FROM {t} WHERE {where}")
        elif op == 8:
            edits.append(f'ALTER TABLE {t} DROP COLUMN "{col}"')
        else:
            edits.append(f"DROP TABLE {t}")
    return edits


def apply(seed: Path, edits: list[str], dst: Path) -> list[str]:
    """Copy ``seed`` to ``dst`` and apply the edits SQLite accepts; returns those applied. NOT NULL,
    primary keys and indexes are lifted first from a table an edit touches, as damage would."""
    shutil.copyfile(seed, dst)
    con = sqlite3.connect(dst)
    applied = []
    try:
        for stmt in edits:
            table = stmt.split()[2] if stmt.startswith(("INSERT", "ALTER", "DELETE", "DROP")) else stmt.split()[1]
            try:
                _relax(con, table)
                con.execute(stmt)
                con.commit()
                applied.append(stmt)
            except sqlite3.Error:
                con.rollback()
    finally:
        con.close()
    return applied


def _relax(con: sqlite3.Connection, table: str) -> None:
    cols = [(n, t) for _, n, t, *_ in con.execute(f"PRAGMA table_info({table})")]
    if not cols:
        return
    spec = ", ".join(f'"{n}" {t}' for n, t in cols)
    con.executescript(
        f"CREATE TABLE nvb_relaxed ({spec}); INSERT INTO nvb_relaxed SELECT * FROM {table};"
        f"DROP TABLE {table}; ALTER TABLE nvb_relaxed RENAME TO {table};"
    )


def replay(seed: Path, edits: list[str], work: Path) -> tuple[list[str], BaseException | None]:
    """Read the edited copy: the edits SQLite accepted, and the exception if it is a crash (not an
    NvbridgeError)."""
    from nvbridge.errors import NvbridgeError
    from nvbridge.readers import read_profile

    path = work / seed.name
    applied = apply(seed, edits, path)
    try:
        read_profile(path)
    except NvbridgeError:
        return applied, None
    except Exception as exc:  # the crash we are looking for
        return applied, exc
    return applied, None


def save_crash(seed: Path, edits: list[str], exc: BaseException) -> Path | None:
    first = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    key = hashlib.sha1(first.encode()).hexdigest()[:10]
    out = REGRESS / f"{type(exc).__name__}-{key}.json"
    if out.exists():
        return None
    REGRESS.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"seed": seed.name, "sql": edits, "found": first[:300]}, indent=1) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--seconds", type=int, default=60, help="how long to fuzz")
    ap.add_argument("--seed-file", default="cnn_cpu+synthetic_gpu.sqlite", help="a file of sample_db/")
    args, rest = ap.parse_known_args(argv)
    try:
        import atheris
    except ImportError:
        print("fuzz_readers needs atheris: pip install atheris", file=sys.stderr)
        return 2
    seed = SAMPLE_DB / args.seed_file
    tables = schema(seed)
    work = Path(tempfile.mkdtemp(prefix="nvbridge-fuzz-"))
    found: list[Path] = []

    def one(data: bytes) -> None:
        edits, exc = replay(seed, decode(data, tables), work)
        if exc is not None and (out := save_crash(seed, edits, exc)) is not None:
            found.append(out)
            print(f"crash: {out.name}: {type(exc).__name__}: {exc}", file=sys.stderr)

    with atheris.instrument_imports(include=["nvbridge"]):
        import nvbridge.readers  # noqa: F401  (instrumented for coverage)
        import nvbridge.readers.nsys  # noqa: F401
        import nvbridge.readers.nvprof  # noqa: F401

    # libFuzzer ends the process itself when time is up: clean up and report at exit.
    def report() -> None:
        shutil.rmtree(work, ignore_errors=True)
        print(f"{len(found)} new crash(es) written to {REGRESS}", file=sys.stderr)

    atexit.register(report)
    fuzz_args: list[Any] = [sys.argv[0], f"-max_total_time={args.seconds}", "-rss_limit_mb=4096", *rest]
    atheris.Setup(fuzz_args, one)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
