"""native/ compiles without a warning under -Wall -Wextra (issue 24, item 7: the page reader parses
untrusted files; a warning there is a bug report nobody reads). Each file is checked with the
compiler setup.py builds with (cc), as C11, against this Python's headers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig

import pytest

from tests.conftest import ROOT


def test_native_compiles_without_warnings() -> None:
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        if os.environ.get("CI"):
            pytest.fail("no C compiler in CI: scripts/install_system_deps.sh installs gcc")
        pytest.skip("no C compiler")
    include = sysconfig.get_paths()["include"]
    sources = sorted((ROOT / "native").glob("*.c"))
    assert len(sources) >= 10
    for source in sources:
        cmd = [cc, "-fsyntax-only", "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{include}", str(source)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
