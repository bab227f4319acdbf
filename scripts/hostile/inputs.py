#!/usr/bin/env python3
"""Run ``python -m nvbridge`` on a corpus of broken inputs and classify what it does with each.

    python -m scripts.hostile.inputs [--quick] [--jobs 2] [--only SUBSTRING] [--show-ok]
    python -m scripts.hostile.inputs --shard 1/3 --save part1.jsonl   # a third of the corpus
    python -m scripts.hostile.inputs --table part1.jsonl part2.jsonl part3.jsonl

The corpus is built at run time in a temporary directory (removed afterwards) from the real
exports in ../shared/real_db/ and the recordings in sample_db/: truncations, byte flips, dropped
tables and columns, hostile values, special files, output destinations, concurrency, signals,
broken datasets, names (not UTF-8, at and past 255 bytes, newlines, a working directory past
PATH_MAX), URLs, meta values, dictionaries (secrets planted, every output scanned) and kills
between publishing's renames. Every input is **synthetic damage** done to a copy; nothing is written into the
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
cases, and exits 1 when there are any. ``--quick`` runs a fixed subset that tests/test_hostile.py
uses. On a shared two-core machine the whole corpus takes 15-25 minutes: ``--shard`` splits it
and ``--save``/``--table`` add the parts up. The cases live in db.py (damaged databases),
environment.py (files, outputs, concurrency, signals, datasets) and names.py (names, URLs,
meta values, dictionaries, kills between renames); cases.py classifies.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from scripts.hostile.cases import FAILURES, SAMPLE_DB, Case, Run, bases, execute
from scripts.hostile.db import byte_cases, structure_cases, value_cases
from scripts.hostile.environment import concurrency_runner, dataset_cases, output_cases, signal_runner, special_cases
from scripts.hostile.names import kill_cases, leak_cases, meta_cases, name_cases, url_cases

# Hostile values are planted in these (each table of each); every base gets the other damage.
VALUE_BASES = (
    "cnn_cpu+synthetic_gpu",
    "threads_cpu",
    "nsys-2021-pre-metadata",
    "nsys-2024.2-pyprof-markers",
    "nsys-2026.2-pytorch2-fsdp-2gpu",
    "nvprof-2020-pytorch14-pyprof-lm",
    "nvprof-2021-mxnet-driver",
)


def corpus() -> list[Case]:
    rng = random.Random(14)
    cases: list[Case] = []
    for src in bases():
        cases += byte_cases(src, rng) + structure_cases(src)
        cases += value_cases(src) if src.stem in VALUE_BASES else []
    sample = SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite"
    cases += special_cases(sample) + output_cases(sample) + dataset_cases(SAMPLE_DB / "cnn_cpu.sqlite")
    cases += name_cases(sample) + url_cases() + meta_cases(SAMPLE_DB / "cnn_cpu.sqlite") + leak_cases(bases())
    cases += kill_cases(sample, SAMPLE_DB / "threads_cpu.sqlite")
    cases.append(
        Case("concurrency/two-converts-one-output", "concurrency", lambda w: Run([]), runner=concurrency_runner)
    )
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        cases.append(Case(f"signal/{sig.name}", "signals", lambda w: Run([]), runner=signal_runner(sig)))
    return cases


def quick_subset(cases: list[Case]) -> list[Case]:
    """The special files, 16 hostile values of the synthetic-GPU sample's kernels and NVTX rows, two
    cases of each other reader family, of names and of meta values, a leak check, a URL and a kill
    between publishing's renames: 42 cases."""
    rng = random.Random(18)
    keep = [c for c in cases if c.family == "special files"]
    values = [
        c
        for c in cases
        if c.family == "hostile values"
        and "cnn_cpu+synthetic_gpu" in c.name
        and ("KERNEL" in c.name or "NVTX" in c.name)
    ]
    keep += rng.sample(values, min(16, len(values)))
    for family in ("truncations", "byte flips", "dropped tables", "dropped columns", "names", "meta values"):
        members = [c for c in cases if c.family == family]
        keep += rng.sample(members, min(2, len(members)))
    # issue 24's: a leak check of the synthetic-GPU sample, a URL, the kill between the renames
    picked = ("leak/cnn_cpu+synthetic_gpu", "urls/unknown-scheme", "kill/between-renames")
    keep += [c for c in cases if c.name in picked]
    return keep


def print_table(results: list[dict[str, str]]) -> int:
    """The table by family and class, then the failing cases; returns how many fail."""
    table: dict[str, Counter[str]] = {}
    for r in results:
        table.setdefault(r["family"], Counter())[r["class"]] += 1
    classes = ["ok", "clean error", *FAILURES, "harness error"]
    short = {
        "internal error": "internal",
        "input modified": "modified",
        "wrong but silent": "silent",
        "partial output": "partial",
        "unclear error": "unclear",
        "wrong refusal": "refusal",
        "harness error": "harness",
        "clean error": "clean err",
    }
    print(f"| {'family':<22}| cases | " + " | ".join(short.get(c, c) for c in classes) + " |")
    print("|" + "---|" * (len(classes) + 2))
    total: Counter[str] = Counter()
    for family, counts in [*table.items(), ("total", total)]:
        if family != "total":
            total.update(counts)
        print(f"| {family:<22}| {sum(counts.values())} | " + " | ".join(str(counts[c]) for c in classes) + " |")
    failing = [r for r in results if r["class"] not in ("ok", "clean error")]
    print(f"\n{len(failing)} failing of {len(results)} cases")
    for r in failing:
        print(f"  [{r['class']}] {r['name']}: {r['detail']}")
    return len(failing)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the fast subset tests/test_hostile.py runs")
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once")
    ap.add_argument("--only", help="run the cases whose name contains this")
    ap.add_argument("--shard", help="K/N: run the K-th of N equal parts of the corpus")
    ap.add_argument(
        "--save",
        type=Path,
        help="append each verdict to this JSON-lines file (and skip the cases "
        "it already holds: an interrupted run resumes)",
    )
    ap.add_argument("--table", type=Path, nargs="+", help="print the table of saved verdicts and stop")
    ap.add_argument("--code", type=Path, help="run the nvbridge of this checkout (default: this one)")
    args = ap.parse_args(argv)
    if args.table:
        results = [json.loads(line) for f in args.table for line in f.read_text().splitlines() if line]
        return 1 if print_table(results) else 0
    if args.code:
        os.environ["NVBRIDGE_HOSTILE_CODE"] = str(args.code.resolve())
    cases = quick_subset(corpus()) if args.quick else corpus()
    if args.only:
        cases = [c for c in cases if args.only in c.name]
    if args.shard:
        k, n = map(int, args.shard.split("/"))
        cases = cases[k - 1 :: n]
    if args.save and args.save.exists():  # resume: skip the cases already saved there
        done = {json.loads(line)["name"] for line in args.save.read_text().splitlines() if line}
        cases = [c for c in cases if c.name not in done]
    t0 = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="nvbridge-hostile-") as tmp, ThreadPoolExecutor(args.jobs) as pool:
        for case, (cls, detail) in zip(cases, pool.map(lambda c: execute(c, Path(tmp)), cases)):
            results.append({"name": case.name, "family": case.family, "class": cls, "detail": detail})
            if args.save:
                with args.save.open("a") as fh:
                    fh.write(json.dumps(results[-1]) + "\n")
    failing = print_table(results)
    print(f"({time.monotonic() - t0:.0f} s)")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
