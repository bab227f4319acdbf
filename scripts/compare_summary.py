"""Compare `nvbridge summary --json` of this tree against another checkout, on every real export,
sample and a partitioned dataset: the proof that a refactor left the summary unchanged.

    python scripts/compare_summary.py /path/to/other/checkout [--dataset DIR]

Differences the comparison expects (issue #14) and discounts: the ``[no op]`` row (GPU time no
op launched), the CPU-time order of reports without GPU time, and ``--device`` on a report
without that GPU (refused now). Prints one line per case that still differs, then the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REAL_DB = Path(os.environ.get("NVBRIDGE_REAL_DB", ROOT.parent / "shared" / "real_db"))
VARIANTS = [
    [],
    ["--group-by", "shape"],
    ["--group-by", "module"],
    ["--group-by", "stack", "--stack-depth", "2"],
    ["--top-level"],
    ["--sort", "cpu_time_total"],
    ["--device", "0"],
]


def run(tree: Path, path: Path, variant: list[str]) -> tuple[int, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "nvbridge", "summary", str(path), "--json", "--limit", "-1", *variant],
        capture_output=True,
        text=True,
        cwd="/",
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    return result.returncode, json.loads(result.stdout) if result.returncode == 0 else result.stderr


def same(before: dict[str, Any], after: dict[str, Any], ordered: bool) -> bool:
    rows = [r for r in after["rows"] if r["name"] != "[no op]"]
    if ordered:
        rows_equal = before["rows"] == rows
    else:
        rows_equal = sorted(map(json.dumps, before["rows"])) == sorted(map(json.dumps, rows))
    return bool(before["gpu"] == after["gpu"] and before["ranks"] == after["ranks"] and rows_equal)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", type=Path, help="a checkout of the revision to compare against")
    parser.add_argument("--dataset", type=Path, action="append", default=[], help="also a dataset directory")
    args = parser.parse_args()
    inputs = (
        sorted(REAL_DB.glob("*.sqlite"))
        + sorted(REAL_DB.glob("*.nvvp"))
        + sorted((ROOT / "sample_db").glob("*.sqlite"))
        + args.dataset
    )
    cases = differ = refused = 0
    for path in inputs:
        for variant in VARIANTS:
            cases += 1
            (code_a, a), (code_b, b) = run(args.baseline, path, variant), run(ROOT, path, variant)
            if code_a or code_b:
                refused += 1
                print(f"exit {code_a} -> {code_b}: {path.name} {' '.join(variant)}: {str(b).strip().splitlines()[-1]}")
                continue
            has_gpu = sum(r["self_gpu_ns"] for r in a["rows"]) > 0
            if not same(a, b, ordered=has_gpu or "--sort" in variant):
                differ += 1
                print(f"DIFFERS: {path.name} {' '.join(variant)}")
    print(f"{cases} cases: {cases - differ - refused} identical, {differ} differ, {refused} with an exit status change")


if __name__ == "__main__":
    main()
