"""The test NVTX collector (collector.c): an NVTX injection library that writes every range push,
pop, start and end to the file NVBRIDGE_NVTX_LOG names, one line each. The workloads run under
it outside nsys: the tests read its log (tests/nvtx_inject/nvtx_log.py), scripts/bench/annotate.py
times emit_nvtx with it attached. NVTX reads NVTX_INJECTION64_PATH at its first call, so the
library is named to a fresh interpreter."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "collector.c"


def build_injection(dest: Path) -> Path:
    """Compile collector.c into ``dest``; the caller skips the test if gcc is missing.

    Raises:
        FileNotFoundError: no C compiler.
    """
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise FileNotFoundError("gcc")
    lib = dest / "libnvbridge_test_inject.so"
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(lib), str(SOURCE), "-lpthread"], check=True)
    return lib
