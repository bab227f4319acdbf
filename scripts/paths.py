"""Where the repository's inputs and outputs are, for every script and the tests that use them."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_DB = ROOT / "sample_db"  # recordings the project made (sample_db/README.md)
REAL_DB = Path(os.environ.get("NVBRIDGE_REAL_DB", ROOT.parent / "shared" / "real_db"))  # read-only, never copied in
REGRESS = ROOT / "tests" / "regress"  # what the fuzzers found, replayed by the tests
BENCH_OUT = ROOT / "bench_out"  # the benchmarks' cached inputs (git-ignored)


def importable() -> dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH: a child can run
    ``python -m scripts...`` (and import this nvbridge) from any working directory."""
    rest = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *([rest] if rest else [])])}
