"""Shared fixtures: the real exports in ../shared/real_db/ (referenced in place, never copied)."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
REAL_DB = Path(os.environ.get("NVBRIDGE_REAL_DB", ROOT.parent / "shared" / "real_db"))
SAMPLE_DB = ROOT / "sample_db"

NSYS_FILES = [
    "nsys-2021-pre-metadata.sqlite",
    "nsys-2022.1-dlprof-torch-seq.sqlite",
    "nsys-2023.3-openmp-offload.sqlite",
    "nsys-2024.2-pyprof-markers.sqlite",
    "nsys-2024.6-nvfuser-cpp-nvtx.sqlite",
    "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite",
    "nsys-2026.2-windows-cs336.sqlite",
]
NVPROF_FILES = [
    "nvprof-2020-empty-capture.sqlite",
    "nvprof-2020-pytorch14-pyprof-lm.sqlite",
    "nvprof-2021-mxnet-driver.nvvp",
]
ALL_FILES = NSYS_FILES + NVPROF_FILES


def require_nsys() -> str:
    """The nsys CLI's path; fails in CI (scripts/install_nsys.sh installs it), skips elsewhere."""
    nsys = shutil.which("nsys")
    if nsys is None:
        if os.environ.get("CI"):
            pytest.fail("nsys is missing in CI: scripts/install_nsys.sh should have installed it")
        pytest.skip("nsys not installed; run scripts/install_nsys.sh")
    return nsys


def require_native() -> None:
    """nvbridge._native (built at install from native/); fails in CI, where
    scripts/install_system_deps.sh installs what it builds with, and skips elsewhere."""
    from nvbridge.compiled import native

    if native is None:
        if os.environ.get("CI"):
            pytest.fail("nvbridge._native was not built in CI: SQLite's headers or gcc are missing")
        pytest.skip("nvbridge._native is not built (no C compiler or SQLite headers at install)")


def real_db(name: str) -> Path:
    """Path of a real export; skips (with the reason) where the shared folder is absent."""
    path = REAL_DB / name
    if not path.is_file():
        pytest.skip(f"{path} not found: the real exports live in ../shared/real_db/ beside the repo")
    return path


def raw(path: Path, sql: str) -> list[tuple[Any, ...]]:
    """Run SQL on a real export, read-only: the independent side of every comparison."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def subtree_kernel_ns(ops: Any, gpu: Any) -> np.ndarray:
    """Kernel ns launched in each op's subtree (ops, gpu: pandas frames of a report), walking
    every kernel up its chain of parents: the independent side of inclusive-time comparisons."""
    parent = ops.parent_id.fillna(-1).astype(np.int64).to_numpy()
    kernels = gpu[(gpu.kind == "kernel") & gpu.op_id.notna()]
    at = kernels.op_id.astype(np.int64).to_numpy()
    dur = (kernels.end_ns - kernels.start_ns).to_numpy()
    acc = np.zeros(len(ops), np.int64)
    while len(at):
        np.add.at(acc, at, dur)
        up = parent[at]
        at, dur = up[up >= 0], dur[up >= 0]
    return acc


@pytest.fixture(params=ALL_FILES)
def any_real_db(request: pytest.FixtureRequest) -> Iterator[Path]:
    yield real_db(request.param)


@pytest.fixture(scope="session")
def injection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test NVTX collector (scripts/workloads/collector.c), compiled once per session."""
    from scripts.workloads.collector import build_injection

    try:
        return build_injection(tmp_path_factory.mktemp("inject"))
    except FileNotFoundError:
        pytest.skip("gcc is needed to build the test NVTX collector")
