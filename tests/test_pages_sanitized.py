"""The page reader under AddressSanitizer and UndefinedBehaviorSanitizer (issue 24, item 7).

native/ is built instrumented in a temporary folder (scripts/hostile/sanitize.py), then run in a
subprocess with the ASan runtime preloaded: the page reader's tests (but the one reading every
table of every export, 50 s there) and a bounded scan-only fuzz of page-level mutants
(scripts/hostile/fuzz_pages.py). An out-of-bounds access, use after free or undefined behaviour aborts
that process with the sanitizer's report, and the test fails with it. A canary first proves the
sanitizer is live: a heap overflow made on purpose must abort."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, require_native

SANITIZE = ["-m", "scripts.hostile.sanitize"]


def _built(tmp_path: Path) -> Path:
    require_native()
    folder = tmp_path / "asan"
    done = subprocess.run([sys.executable, *SANITIZE, "build", str(folder)], cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        if os.environ.get("CI"):
            pytest.fail(f"the sanitized build failed in CI: {done.stderr[-2000:]}")
        pytest.skip(f"no compiler with AddressSanitizer here: {done.stderr[-300:]}")
    return folder


def _run(folder: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, *SANITIZE, "run", str(folder), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_the_page_reader_runs_clean_under_the_sanitizers(tmp_path: Path) -> None:
    folder = _built(tmp_path)
    canary = tmp_path / "canary.py"
    canary.write_text(
        "import ctypes, nvbridge.compiled\n"
        f"assert nvbridge.compiled.native.__file__.startswith({str(folder)!r})\n"
        "libc = ctypes.CDLL(None)\n"
        "libc.malloc.restype = ctypes.c_void_p\n"
        "ctypes.memset(libc.malloc(16), 0, 64)\n"
    )
    overflow = _run(folder, str(canary))
    assert overflow.returncode != 0 and "AddressSanitizer: heap-buffer-overflow" in overflow.stderr, overflow.stderr[
        -2000:
    ]

    tests = ["tests/test_pages.py", "tests/test_pages_damage.py", "tests/test_pages_regress.py"]
    done = _run(folder, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "not every_table", *tests)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "Sanitizer" not in done.stderr

    fuzz = _run(
        folder, "-m", "scripts.hostile.fuzz_pages", "--scan-only", "--no-keep", "--mutants", "120", "--seed", "24"
    )
    assert fuzz.returncode == 0 and ", 0 failing" in fuzz.stdout, (fuzz.stdout + fuzz.stderr)[-4000:]
