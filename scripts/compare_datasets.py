#!/usr/bin/env python3
"""Are the datasets of two revisions the same? Every table, every column, on every input.

    python scripts/compare_datasets.py --base 605c358                # all real exports and samples
    python scripts/compare_datasets.py --base 605c358 --ignore-new-columns   # a change that adds columns

Each input (the real exports in ../shared/real_db/ and sample_db/*.sqlite, or the files given) is
converted by ``python -m nvbridge convert`` twice, in subprocesses: once from a ``git archive`` of
``--base``, once from this working tree (``--head`` another revision instead). Every table of the
two datasets is compared with ``pyarrow.Table.equals`` (schema, types, values and row order);
``meta`` is compared without the rows that differ by nature (conversion time, nvbridge version).
``--ignore-new-columns`` compares only the columns both datasets have and lists the new ones.
Exits 1 if any input differs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
REAL_DB = Path(os.environ.get("NVBRIDGE_REAL_DB", ROOT.parent / "shared" / "real_db"))
META_VARYING = {"converted_at_utc", "nvbridge_version"}


def checkout(rev: str, into: Path) -> Path:
    """The repository at ``rev``, exported with ``git archive`` into ``into``."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def convert(code: Path, source: Path, out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run(
        [sys.executable, "-m", "nvbridge", "convert", str(source), "-o", str(out), "-q"],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise SystemExit(f"{code.name} failed on {source.name}: {done.stderr.strip()}")


def differences(a: Path, b: Path, ignore_new: bool) -> list[str]:
    """What differs between datasets ``a`` (base) and ``b`` (head), one line each."""
    found = []
    names = sorted({p.name for p in a.glob("*.parquet")} | {p.name for p in b.glob("*.parquet")})
    for name in names:
        if not (a / name).exists() or not (b / name).exists():
            found.append(f"{name}: only in {'head' if (b / name).exists() else 'base'}")
            continue
        ta, tb = pq.read_table(a / name), pq.read_table(b / name)
        if name == "meta.parquet":
            keep = [k not in META_VARYING for k in ta.column("key").to_pylist()]
            ta = ta.filter(keep)
            tb = tb.filter([k not in META_VARYING for k in tb.column("key").to_pylist()])
        if ignore_new:
            new = [c for c in tb.column_names if c not in ta.column_names]
            if new:
                found.append(f"{name}: new columns {', '.join(new)} (not compared)")
            tb = tb.select([c for c in tb.column_names if c in ta.column_names])
            ta = ta.select(tb.column_names)
        if not ta.equals(tb):
            cols = [c for c in ta.column_names if c in tb.column_names and not ta.column(c).equals(tb.column(c))]
            what = ", ".join(cols) or "schema"
            found.append(f"{name}: differs ({ta.num_rows} vs {tb.num_rows} rows; columns {what})")
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git revision to compare against")
    ap.add_argument("--head", default=None, help="git revision to compare (default: this working tree)")
    ap.add_argument("--ignore-new-columns", action="store_true", help="compare only the columns both have")
    ap.add_argument("inputs", nargs="*", type=Path, help="reports (default: every real export and sample)")
    args = ap.parse_args()
    inputs = args.inputs or sorted(p for p in REAL_DB.glob("*") if p.suffix in (".sqlite", ".nvvp"))
    inputs += [] if args.inputs else sorted((ROOT / "sample_db").glob("*.sqlite"))
    failed = 0
    with tempfile.TemporaryDirectory(prefix="nvbridge-compare-") as tmp:
        work = Path(tmp)
        base = checkout(args.base, work / "base")
        head = checkout(args.head, work / "head") if args.head else ROOT
        for i, source in enumerate(inputs):
            convert(base, source, work / f"b{i}")
            convert(head, source, work / f"h{i}")
            found = differences(work / f"b{i}", work / f"h{i}", args.ignore_new_columns)
            bad = [f for f in found if "differs" in f or "only in" in f]
            failed += bool(bad)
            print(f"{'DIFFERS' if bad else 'same   '} {source.name}" + "".join(f"\n    {f}" for f in found))
    print(f"{len(inputs) - failed} of {len(inputs)} inputs give the same dataset")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
