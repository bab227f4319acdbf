#!/usr/bin/env python3
"""Coverage-guided fuzzing of the page reader over raw page bytes (atheris: libFuzzer's engine),
differential against SQLite.

    apt-get install clang && pip install atheris
    python -m scripts.hostile.fuzz_pages_raw --seconds 600 [--seed-file sample_db/nvtx_domains.sqlite]

native/ is compiled with clang, ``-fsanitize=address,undefined,fuzzer-no-link`` (libFuzzer sees
the C code's edges; scripts/hostile/sanitize.py), and run with atheris' ASan runtime preloaded. Each
fuzz input is raw bytes laid over one page of a seed file: byte 0 picks the seed, bytes 1-2 the
page, bytes 3-4 the offset in it, the rest are written there (so libFuzzer mutates page
headers, cell pointers, varints, records and chain pointers directly). The page reader then
surveys the mutant and reads its tables whole. A finding is a crash or sanitizer report, an
exception other than Damaged or Unreadable, or rows read that differ from the seed's where
SQLite refuses the mutant (PRAGMA integrity_check not ok, or a plain read raising). Each is kept
as a recipe in tests/regress/pages/raw-*.json (seed name and sha256, byte edits), which
tests/test_pages_regress.py replays.

Seeds: ``hand-built.sqlite``, made here with Python's sqlite3 (512-byte pages: a multi-level
b-tree of 600 rows, texts spilling onto overflow chains, deleted rows leaving free blocks, a
second table), and sample_db/ recordings (--seed-file). Never the real exports.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from scripts.hostile import sanitize
from scripts.paths import REGRESS, ROOT

PAGES = REGRESS / "pages"
HAND_BUILT = "hand-built.sqlite"


def hand_built(path: Path) -> Path:
    """The hand-built seed, the same bytes for the same SQLite version."""
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size = 512")
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, b TEXT, c INTEGER NOT NULL)")
    con.execute("CREATE TABLE u (x INTEGER, y TEXT)")
    rng = random.Random(24)
    rows = [
        (i, rng.choice([0, 1, -5, 1 << 40, None]), "n" * rng.choice([0, 3, 40, 700, 1500]), i * 7) for i in range(600)
    ]
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
    con.executemany("INSERT INTO u VALUES (?, ?)", [(i, f"u{i}") for i in range(50)])
    con.execute("DELETE FROM t WHERE id % 9 = 4")
    con.commit()
    con.close()
    return path


def seeds(extra: list[str], work: Path) -> list[Path]:
    return [hand_built(work / HAND_BUILT), *(ROOT / s for s in extra)]


class Target:
    """One seed: its bytes, roots, tables the page reader takes and their rows."""

    def __init__(self, path: Path) -> None:
        from scripts.hostile.fuzz_pages_scan import reads

        self.path, self.data = path, path.read_bytes()
        self.page_size = (
            65536 if int.from_bytes(self.data[16:18], "big") == 1 else int.from_bytes(self.data[16:18], "big")
        )
        self.rows = reads(path, path)

    def check(self, mutant: Path, edits: list[tuple[int, bytes]]) -> None:
        from scripts.hostile.fuzz_pages import sqlite_verdict
        from scripts.hostile.fuzz_pages_scan import reads

        got = reads(mutant, self.path)  # raises on anything but Damaged or Unreadable
        wrong = [t for t, v in got.items() if isinstance(v, list) and v != self.rows.get(t)]
        if wrong and sqlite_verdict(mutant) == "refuses":
            keep(self, edits, f"read {wrong} differently where SQLite refuses")
            raise RuntimeError(f"the page reader read {wrong} differently where SQLite refuses")


def keep(target: Target, edits: list[tuple[int, bytes]], why: str) -> None:
    import hashlib

    from scripts.hostile.page_mutants import sha256

    recipe: dict[str, Any] = {
        "source": target.path.name,
        "sha256": sha256(target.path),
        "family": "raw page bytes",
        "what": why,
        "edits": [[at, value.hex()] for at, value in edits],
        "truncate": None,
        "found": "scripts/hostile/fuzz_pages_raw.py",
    }
    PAGES.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    (PAGES / f"raw-{name}.json").write_text(json.dumps(recipe, indent=1) + "\n")


def fuzz(args: argparse.Namespace) -> int:
    import atheris

    sanitize.install()
    work = Path(tempfile.mkdtemp(prefix="nvbridge-raw-"))
    targets = [Target(p) for p in seeds(args.seed_file, work)]
    mutant = Path("/dev/shm" if Path("/dev/shm").is_dir() else work) / f"nvbridge-raw-{os.getpid()}.sqlite"

    def one(data: bytes) -> None:
        if len(data) < 6:
            return
        target = targets[data[0] % len(targets)]
        pages = len(target.data) // target.page_size
        page = 1 + int.from_bytes(data[1:3], "big") % pages
        at = (page - 1) * target.page_size + int.from_bytes(data[3:5], "big") % target.page_size
        value = data[5 : 5 + max(0, len(target.data) - at)]
        edits = [(at, value)]
        out = bytearray(target.data)
        out[at : at + len(value)] = value
        mutant.write_bytes(bytes(out))
        target.check(mutant, edits)

    argv = [sys.argv[0], f"-max_total_time={int(args.seconds)}", "-max_len=600", "-timeout=30", str(work / "corpus")]
    (work / "corpus").mkdir()
    for i, t in enumerate(targets):  # a seed input per page header of each target
        for page in range(1, len(t.data) // t.page_size + 1):
            (work / "corpus" / f"{i}-{page}").write_bytes(
                bytes([i]) + page.to_bytes(2, "big") + b"\0\0" + t.data[(page - 1) * t.page_size :][:64]
            )
    atheris.Setup(argv, one)
    atheris.Fuzz()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--seed-file", action="append", default=[], help="a sample_db/ file to fuzz too")
    args = parser.parse_args()
    if not os.environ.get("NVBRIDGE_SANITIZED"):
        import atheris

        os.environ["CC"] = "clang"
        built = sanitize.build(Path(tempfile.mkdtemp(prefix="nvbridge-raw-build-")), ("-fsanitize=fuzzer-no-link",))
        preload = str(Path(atheris.path()) / "asan_with_fuzzer.so")
        env = sanitize.environment(built, preload)
        return subprocess.run(
            [sys.executable, "-m", "scripts.hostile.fuzz_pages_raw", *sys.argv[1:]], env=env
        ).returncode
    return fuzz(args)


if __name__ == "__main__":
    sys.exit(main())
