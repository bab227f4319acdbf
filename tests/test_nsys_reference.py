"""Inclusive kernel time per NVTX range agrees exactly with NVIDIA's `nsys stats -r nvtxkernsum`.

nvtxkernsum charges a kernel to every range enclosing its launch on the launching thread;
nvbridge charges it once, to the innermost range (self time), and sums up the tree. Summing
nvbridge's kernel time over each op's subtree must give NVIDIA's numbers to the nanosecond.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import nvbridge
from tests.conftest import real_db, require_nsys, subtree_kernel_ns

WITH_NVTX_AND_KERNELS = [
    "nsys-2024.2-pyprof-markers.sqlite",
    "nsys-2024.6-nvfuser-cpp-nvtx.sqlite",
    "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite",
]


def nvtxkernsum(path: Path, workdir: Path) -> dict[tuple[str, int, int], int]:
    """NVIDIA's report: total kernel ns per (range name, pid, tid), on a copy of the file."""
    copy = workdir / path.name
    shutil.copyfile(path, copy)
    copy.chmod(0o644)
    subprocess.run(
        [require_nsys(), "stats", "-q", "-r", "nvtxkernsum", "-f", "csv", "-o", str(workdir / "ref"), str(copy)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    totals: dict[tuple[str, int, int], int] = defaultdict(int)
    with open(workdir / "ref_nvtxkernsum.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            if row["Style"] == "None":  # kernels outside every range
                continue
            totals[(row["NVTX Range"], int(row["PID"]), int(row["TID"]))] += int(row["Total Time (ns)"])
    return dict(totals)


def inclusive_kernel_ns(report: nvbridge.Report) -> dict[tuple[str, int, int], int]:
    """Kernel ns of each op's subtree, summed per (domain:name, pid, tid), from nvbridge's tables."""
    ops = report.df("ops")
    acc = subtree_kernel_ns(ops, report.df("gpu_ops"))
    # NVIDIA names a range "domain:text" when the domain's name is known.
    names = np.where(ops.domain.notna(), ops.domain.fillna("") + ":" + ops["name"], ops["name"])
    totals: dict[tuple[str, int, int], int] = defaultdict(int)
    for name, pid, tid, ns in zip(names, ops.process_id, ops.thread_id, acc):
        if ns:
            totals[(str(name), int(pid), int(tid))] += int(ns)
    return dict(totals)


@pytest.mark.nsys
@pytest.mark.parametrize("name", WITH_NVTX_AND_KERNELS)
def test_inclusive_kernel_time_equals_nvtxkernsum(name: str, tmp_path: Path) -> None:
    path = real_db(name)
    reference = nvtxkernsum(path, tmp_path)
    ours = inclusive_kernel_ns(nvbridge.load(path))
    assert len(reference) > 0
    assert ours == reference
