"""Collectives on every real export: a report whose NCCL kernels ran in two or more processes
has one collectives row per NCCL kernel (counted here with Python's sqlite3); a report with NCCL
kernels in one process, or none, has no collective to match across ranks."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pytest

import nvbridge
from nvbridge.dataset.collectives_read import read_collectives
from tests.conftest import ALL_FILES, raw, real_db


def _nccl_kernels_per_process(path: Path) -> dict[int, int]:
    tables = {t for (t,) in raw(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "StringIds" in tables and "CUPTI_ACTIVITY_KIND_KERNEL" in tables:  # Nsight Systems
        sql = (
            "SELECT (k.globalPid >> 24) & 16777215, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE 'nccl%' GROUP BY 1"
        )
    elif "StringTable" in tables and "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL" in tables:  # nvprof
        sql = (
            "SELECT k.contextId, count(*) FROM CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL k "
            "JOIN StringTable s ON s._id_ = k.name WHERE s.value LIKE 'nccl%' GROUP BY 1"
        )
    else:
        return {}
    return {int(p): int(n) for p, n in raw(path, sql)}


@pytest.mark.parametrize("name", ALL_FILES)
def test_every_nccl_kernel_is_one_collective_row(name: str, tmp_path: Path) -> None:
    path = real_db(name)
    kernels = _nccl_kernels_per_process(path)
    nvbridge.convert(path, tmp_path / "ds")
    table = read_collectives(tmp_path / "ds")
    rows = 0 if table is None else int(pc.sum(pc.equal(table.column("source"), "nccl_kernel")).as_py() or 0)
    assert rows == (sum(kernels.values()) if len(kernels) >= 2 else 0), kernels
