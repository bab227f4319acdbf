"""Many reports: partitions, skipping converted ones, local processes and a Dask cluster."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

import nvbridge
from tests.conftest import real_db

REPORTS = ["nsys-2026.2-pytorch2-fsdp-2gpu.sqlite", "nvprof-2020-pytorch14-pyprof-lm.sqlite",
           "nsys-2024.6-nvfuser-cpp-nvtx.sqlite"]
TABLES = ("ops", "gpu_ops", "api_calls", "marks", "syncs", "threads", "devices")


def _tables(root: Path) -> dict[str, bytes]:
    """Every table file's bytes (meta holds the conversion time, so it is left out)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.parquet"))
            if p.name != "meta.parquet"}


def test_jobs_give_the_serial_bytes_and_skip_converted(tmp_path: Path) -> None:
    sources = [real_db(n) for n in REPORTS]
    serial = nvbridge.convert(sources, tmp_path / "serial")
    parallel = nvbridge.convert(sources, tmp_path / "parallel", jobs=2)
    assert len(serial) == len(parallel) == 3
    assert _tables(tmp_path / "serial") == _tables(tmp_path / "parallel")
    assert len(_tables(tmp_path / "serial")) == 3 * len(TABLES)
    # Already converted: skipped without --force, converted again with it.
    meta = tmp_path / "serial" / "report=nvprof-2020-pytorch14-pyprof-lm" / "meta.parquet"
    before = meta.stat().st_mtime_ns
    assert nvbridge.convert(sources, tmp_path / "serial") == []
    assert meta.stat().st_mtime_ns == before
    assert len(nvbridge.convert(sources[:1], tmp_path / "serial", force=True, jobs=2)) == 1


def test_dask_cluster_gives_the_serial_bytes(tmp_path: Path) -> None:
    distributed = pytest.importorskip("dask.distributed", reason="pip install 'nvbridge[cluster]'")
    sources = [real_db(n) for n in REPORTS]
    nvbridge.convert(sources, tmp_path / "serial")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        results = nvbridge.convert(sources, tmp_path / "dask", scheduler=cluster.scheduler_address)
    assert sorted(r.info.source for r in results) == sorted(REPORTS)
    assert _tables(tmp_path / "serial") == _tables(tmp_path / "dask")
    rows = pq.read_table(tmp_path / "dask" / "report=nsys-2026.2-pytorch2-fsdp-2gpu" / "ops.parquet").num_rows
    assert rows == 17113


def test_unreachable_scheduler_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("dask.distributed", reason="pip install 'nvbridge[cluster]'")
    with pytest.raises(nvbridge.ExportError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:1"):
        nvbridge.convert([real_db(REPORTS[2])], tmp_path / "x", scheduler="tcp://127.0.0.1:1")
