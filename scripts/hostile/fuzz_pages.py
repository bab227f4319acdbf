#!/usr/bin/env python3
"""Differential page-level fuzzing of the page reader (issue 24): mutants made by setting bytes in
the b-tree structures of real exports and samples, each converted with the page reader on and
off and read with Python's sqlite3.

    python -m scripts.hostile.fuzz_pages --mutants 5000 --save verdicts.jsonl [--sanitize]  # resumable
    python -m scripts.hostile.fuzz_pages --table verdicts.jsonl                             # the figures
    python -m scripts.hostile.fuzz_pages --slice 1/2 ...                                    # every 2nd mutant
    python -m scripts.hostile.fuzz_pages --scan-only --mutants 200                          # readers only

Families (scripts/hostile/page_mutants.py): cell pointers, payload and rowid varints, record headers,
overflow chains, child pointers (cycles, siblings, other tables' leaves), page types, cell
counts, free space (free blocks, content start, fragments), file header fields, truncation,
random bytes. Sources: every real export in ../shared/real_db and the sample_db recordings,
taken in turn. Each mutant is converted twice (``nvbridge convert``, page reader on, then
NVBRIDGE_PAGE_READER=0) in a forked child of a process that imported nvbridge once (60 s
limit), and SQLite's verdict taken: it *refuses* the file when PRAGMA integrity_check is not ok
or a plain read of one of its tables raises.

A conversion ends as ``same`` (exit 0, the undamaged file's dataset), ``different`` (exit 0,
another dataset), ``refused`` (exit 1, one ``Error:`` line), ``internal`` (an internal error,
a traceback, another exit status), ``crash`` (a signal: a segfault, or a sanitizer's abort with
--sanitize) or ``hang``. Failures: a crash, hang or internal error either way, and a page-reader
conversion ending ``different`` where SQLite refuses the file. Each failure is kept as a recipe
in tests/regress/pages/ (source name, sha256, byte edits: never the real export's bytes), which
tests/test_pages_regress.py replays.

--scan-only skips the conversions: the page reader reads every table it takes (survey, then
each table whole) and its rows are compared with the undamaged file's; a page reader that reads
rows SQLite refuses, differing from the undamaged ones, fails. tests/test_pages_sanitized.py runs a
bounded scan-only fuzz under the sanitizers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from scripts.hostile.page_mutants import FAMILIES, Mutant, Mutator
from scripts.paths import REAL_DB, REGRESS, SAMPLE_DB, importable

SAMPLES = ("cnn_cpu+synthetic_gpu.sqlite", "nvtx_domains.sqlite", "transformer_shapes_cpu.sqlite", "ranks_cpu.sqlite")
PAGES = REGRESS / "pages"
OUTCOMES = ("same", "different", "refused", "internal", "crash", "hang")


def sources() -> list[Path]:
    real = sorted(p for p in REAL_DB.glob("*") if p.suffix in (".sqlite", ".nvvp")) if REAL_DB.is_dir() else []
    return real + [SAMPLE_DB / name for name in SAMPLES]


def sqlite_verdict(path: Path) -> str:
    """ "refuses" (integrity_check not ok, or a plain read of a table raises) or "accepts"."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            if con.execute("PRAGMA integrity_check").fetchall() != [("ok",)]:
                return "refuses"
            con.text_factory = bytes
            for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                con.execute(f'SELECT * FROM "{bytes(name).decode(errors="replace")}"').fetchall()
        finally:
            con.close()
    except (sqlite3.DatabaseError, ValueError, UnicodeDecodeError):
        return "refuses"
    return "accepts"


def _child(path: Path, out: Path, err: Path, page_reader: bool) -> None:
    """In a forked child: ``nvbridge convert path -o out``, stdout and stderr into ``err``."""
    try:
        os.environ["NVBRIDGE_PAGE_READER"] = "1" if page_reader else "0"
        fd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.argv = ["nvbridge", "convert", str(path), "-o", str(out)]
        from nvbridge.cli import main

        main()
    finally:
        os._exit(70)


def convert(path: Path, out: Path, page_reader: bool, timeout: float) -> tuple[str, str]:
    """The conversion's exit (see the module doc's kinds but same/different: "ok" here)."""
    err = out.with_suffix(".err")
    pid = os.fork()
    if pid == 0:
        _child(path, out, err, page_reader)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hang", ""
        time.sleep(0.005)
    text = err.read_text(errors="replace") if err.exists() else ""
    lines = [line for line in text.splitlines() if line.strip()]
    if os.WIFSIGNALED(status):
        return "crash", f"signal {os.WTERMSIG(status)}: " + " | ".join(lines[-6:])[:1500]
    code = os.WEXITSTATUS(status)
    if code == 0:
        return "ok", ""
    errors = [line for line in lines if line.startswith("Error:")]
    if code == 1 and len(errors) == 1 and "internal error" not in text and "Traceback" not in text:
        return "refused", errors[0][:300]
    return "internal", f"exit {code}: " + " | ".join(lines[-4:])[:600]


def dataset(out: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    return {p.name: pq.read_table(p) for p in sorted(out.glob("*.parquet")) if p.name != "meta.parquet"}


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(a[k].equals(b[k]) for k in a)


class Converted:
    """Each source's undamaged dataset (page reader on), converted once."""

    def __init__(self, work: Path, timeout: float) -> None:
        self.work, self.timeout, self.cache = work, timeout, {}  # type: ignore[var-annotated]

    def get(self, source: Path) -> dict[str, Any] | str:
        if source not in self.cache:
            out = self.work / f"base-{len(self.cache)}"
            kind, detail = convert(source, out, True, self.timeout)
            self.cache[source] = dataset(out) if kind == "ok" else f"{kind}: {detail}"
            shutil.rmtree(out, ignore_errors=True)
        found: dict[str, Any] | str = self.cache[source]
        return found


def run_one(mutant: Mutant, path: Path, base: dict[str, Any] | str, work: Path, timeout: float) -> dict[str, Any]:
    verdict = sqlite_verdict(path)
    row: dict[str, Any] = {**mutant.recipe(), "sqlite": verdict}
    for mode, on in (("on", True), ("off", False)):
        out = work / f"out-{mode}"
        kind, detail = convert(path, out, on, timeout)
        if kind == "ok":
            kind = "same" if isinstance(base, dict) and same(dataset(out), base) else "different"
        row[mode], row[mode + "_detail"] = kind, detail
        shutil.rmtree(out, ignore_errors=True)
    row["failure"] = failure(row)
    return row


def failure(row: dict[str, Any]) -> str:
    for mode in ("on", "off"):
        if row.get(mode) in ("internal", "crash", "hang"):
            return f"{row[mode]} (page reader {mode})"
    if row.get("on") == "different" and row["sqlite"] == "refuses":
        return "different dataset where SQLite refuses"
    return ""


def keep(row: dict[str, Any]) -> None:
    """A failing mutant's recipe, for tests/test_pages_regress.py."""
    import hashlib

    PAGES.mkdir(parents=True, exist_ok=True)
    recipe = {k: row[k] for k in ("source", "sha256", "family", "what", "edits", "truncate")}
    recipe["found"] = row["failure"]
    name = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    (PAGES / f"{row['family'].replace(' ', '-')}-{name}.json").write_text(json.dumps(recipe, indent=1) + "\n")


def plan(count: int, seed: int) -> list[tuple[Path, str, int]]:
    """The mutants to make: (source, family, seed), sources and families in turn."""
    found = sources()
    families = list(FAMILIES)
    return [
        (found[i % len(found)], families[(i // len(found)) % len(families)], seed * 1_000_003 + i) for i in range(count)
    ]


def fuzz(args: argparse.Namespace) -> int:
    saved = Path(args.save) if args.save else None
    done = set()
    for old in [saved, *(Path(p) for p in args.resume)]:
        if old and old.exists():
            done |= {json.loads(line)["i"] for line in old.read_text().splitlines() if line.strip()}
    part, parts = (int(x) for x in args.slice.split("/"))
    work = Path(tempfile.mkdtemp(prefix="nvbridge-fuzz-pages-"))
    import pyarrow.parquet  # noqa: F401

    import nvbridge.cli  # noqa: F401 - imported once, before the forks
    import nvbridge.conversion.report  # noqa: F401

    mutators: dict[Path, Mutator] = {}
    base = Converted(work, args.timeout)
    failures = 0
    started = time.monotonic()
    try:
        for i, (source, family, seed) in enumerate(plan(args.mutants, args.seed)):
            if i in done or i % parts != part or (args.seconds and time.monotonic() - started > args.seconds):
                continue
            mutator = mutators.setdefault(source, Mutator(source))
            mutant = mutator.make(family, random.Random(seed))
            path = work / ("mutant" + source.suffix)
            path.write_bytes(mutant.apply(source.read_bytes()))
            row = run_one(mutant, path, base.get(source), work, args.timeout)
            row["i"] = i
            if row["failure"]:
                failures += 1
                if not args.no_keep:
                    keep(row)
                print(f"FAIL {i} {source.name} {family}: {row['failure']} ({mutant.what})", flush=True)
            if saved:
                with saved.open("a") as f:
                    f.write(json.dumps(row) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.mutants} mutants planned, {failures} failing")
    return 1 if failures else 0


def table(paths: list[Path]) -> None:
    found = (json.loads(line) for path in paths for line in path.read_text().splitlines() if line.strip())
    rows = list({r["i"]: r for r in found}.values())  # a mutant run twice (an interrupted slice) counts once
    for key in ("family", "source"):
        groups: dict[str, Counter[str]] = defaultdict(Counter)
        for r in rows:
            g = groups[r[key]]
            g["mutants"] += 1
            g["SQLite refuses"] += r["sqlite"] == "refuses"
            for mode in ("on", "off"):
                g[f"{mode}:{r[mode]}"] += 1
            g["failing"] += bool(r["failure"])
        cols = ["mutants", "SQLite refuses", *(f"on:{o}" for o in OUTCOMES), *(f"off:{o}" for o in OUTCOMES), "failing"]
        print(f"| {key} | " + " | ".join(cols) + " |")
        print("|---" * (len(cols) + 1) + "|")
        total: Counter[str] = Counter()
        for name in sorted(groups):
            total.update(groups[name])
            print(f"| {name} | " + " | ".join(f"{groups[name][c]:,}" for c in cols) + " |")
        print("| total | " + " | ".join(f"{total[c]:,}" for c in cols) + " |\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mutants", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--save", help="append each verdict to this JSON-lines file (resumable)")
    parser.add_argument("--table", nargs="+", help="print the figures of saved runs and stop")
    parser.add_argument("--slice", default="0/1", help="K/N: only the mutants whose index is K modulo N")
    parser.add_argument("--resume", nargs="*", default=[], help="more saved runs whose mutants are done")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0: no limit)")
    parser.add_argument("--scan-only", action="store_true", help="the page reader's reads only, no conversion")
    parser.add_argument("--sanitize", action="store_true", help="run under ASan/UBSan (scripts/hostile/sanitize.py)")
    parser.add_argument("--no-keep", action="store_true", help="do not write failing recipes to tests/regress/pages")
    args = parser.parse_args()
    if args.table:
        table([Path(p) for p in args.table])
        return 0
    if args.sanitize and not os.environ.get("NVBRIDGE_SANITIZED"):
        import subprocess

        from scripts.hostile import sanitize

        built = sanitize.build(Path(tempfile.mkdtemp(prefix="nvbridge-asan-")))
        argv = [sys.executable, "-m", "scripts.hostile.sanitize", "run", str(built.parent)]
        return subprocess.run([*argv, "-m", "scripts.hostile.fuzz_pages", *sys.argv[1:]], env=importable()).returncode
    if args.scan_only:
        from scripts.hostile.fuzz_pages_scan import scan_fuzz

        return scan_fuzz(plan(args.mutants, args.seed), args.seconds, not args.no_keep)
    return fuzz(args)


if __name__ == "__main__":
    sys.exit(main())
