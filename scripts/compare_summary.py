"""Compare `nvbridge summary --json` of this tree against another checkout, on every real export,
sample and a partitioned dataset: the proof that a refactor left the summary unchanged.

    python -m scripts.compare_summary /path/to/other/checkout [--dataset DIR]
    python -m scripts.compare_summary /path/to/other/checkout --exact --convert-to /tmp/cmp

Differences the comparison expects (issue #14) and discounts: the ``[no op]`` row (GPU time no
op launched), the CPU-time order of reports without GPU time, and ``--device`` on a report
without that GPU (refused now). Prints one line per case that still differs, then the counts.

``--exact`` instead requires the same bytes on stdout and stderr and the same exit status, for
the text table, ``--json`` and ``--csv`` of every variant; ``--convert-to DIR`` also converts
every input into DIR (with this tree) and compares on those datasets and on one partitioned
dataset of all the samples, which is what a refactor of the dataset reading must leave alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
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
EXACT_VARIANTS = [*VARIANTS, ["--device", "1"], ["--group-by", "shape", "--peak-tflops", "100", "--peak-gbps", "900"]]
FORMATS = [["--limit", "-1"], ["--json", "--limit", "-1"], ["--csv", "--limit", "-1"]]


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


def worker(out: Path, inputs: list[Path]) -> None:
    """In this process (the tree on PYTHONPATH): every exact case's exit status, stdout and
    stderr, as JSON in ``out``."""
    from click.testing import CliRunner

    from nvbridge.cli import cli

    results = {}
    for path in inputs:
        for variant in EXACT_VARIANTS:
            for form in FORMATS:
                result = CliRunner().invoke(cli, ["summary", str(path), *variant, *form])
                results[f"{path} {' '.join(variant + form)}"] = [result.exit_code, result.stdout, result.stderr]
    out.write_text(json.dumps(results))


def run_worker(tree: Path, inputs: list[Path], out: Path) -> dict[str, Any]:
    subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", str(out), *map(str, inputs)],
        check=True,
        cwd="/",
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    loaded: dict[str, Any] = json.loads(out.read_text())
    return loaded


def converted(inputs: list[Path], into: Path) -> list[Path]:
    """Each input converted into ``into`` (kept between runs), and one dataset of all samples."""
    out = []
    for path in inputs:
        dest = into / path.stem
        if not dest.exists():
            subprocess.run(
                [sys.executable, "-m", "nvbridge", "convert", str(path), "-o", str(dest), "--quiet"],
                check=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
        out.append(dest)
    many = into / "samples-partitioned"
    if not many.exists():
        samples = sorted((ROOT / "sample_db").glob("*.sqlite"))
        subprocess.run(
            [sys.executable, "-m", "nvbridge", "convert", *map(str, samples), "-o", str(many), "--quiet"],
            check=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    return [*out, many]


def exact(baseline: Path, inputs: list[Path], scratch: Path) -> None:
    """Byte for byte: text, --json and --csv of every variant, stdout, stderr and exit status."""
    before = run_worker(baseline, inputs, scratch / "before.json")
    after = run_worker(ROOT, inputs, scratch / "after.json")
    differ = [case for case in before if before[case] != after.get(case)]
    for case in differ:
        print(f"DIFFERS: {case}")
    print(f"{len(before)} cases: {len(before) - len(differ)} byte-identical, {len(differ)} differ")


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        worker(Path(sys.argv[2]), [Path(p) for p in sys.argv[3:]])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", type=Path, help="a checkout of the revision to compare against")
    parser.add_argument("--dataset", type=Path, action="append", default=[], help="also a dataset directory")
    parser.add_argument("--exact", action="store_true", help="require the same bytes (text, JSON, CSV)")
    parser.add_argument("--convert-to", type=Path, help="also compare on datasets converted into this folder")
    args = parser.parse_args()
    inputs = (
        sorted(REAL_DB.glob("*.sqlite"))
        + sorted(REAL_DB.glob("*.nvvp"))
        + sorted((ROOT / "sample_db").glob("*.sqlite"))
    )
    if args.convert_to:
        args.convert_to.mkdir(parents=True, exist_ok=True)
        inputs += converted(inputs, args.convert_to)
    inputs += args.dataset
    if args.exact:
        scratch = args.convert_to or Path(tempfile.mkdtemp())
        exact(args.baseline, inputs, scratch)
        return
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
