"""Many reports: partitions, skipping converted ones, local processes and a Dask cluster."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import nvbridge
from tests.conftest import real_db

REPORTS = [
    "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite",
    "nvprof-2020-pytorch14-pyprof-lm.sqlite",
    "nsys-2024.6-nvfuser-cpp-nvtx.sqlite",
]
TABLES = ("ops", "gpu_ops", "api_calls", "marks", "syncs", "threads", "devices", "memory")


def _tables(root: Path) -> dict[str, bytes]:
    """Every table file's bytes (meta holds the conversion time, so it is left out)."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.parquet")) if p.name != "meta.parquet"
    }


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
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        results = nvbridge.convert(sources, tmp_path / "dask", scheduler=cluster.scheduler_address)
    assert sorted(r.info.source for r in results) == sorted(REPORTS)
    assert _tables(tmp_path / "serial") == _tables(tmp_path / "dask")
    rows = pq.read_table(tmp_path / "dask" / "report=nsys-2026.2-pytorch2-fsdp-2gpu" / "ops.parquet").num_rows
    assert rows == 17113


def test_unreachable_scheduler_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("dask.distributed", reason="pip install 'nvbridge[cluster]'")
    with pytest.raises(nvbridge.ExportError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:1"):
        nvbridge.convert([real_db(REPORTS[2])], tmp_path / "x", scheduler="tcp://127.0.0.1:1")


def test_cross_rank_summary(tmp_path: Path) -> None:
    """Per-rank GPU busy time and, per step, the slowest rank and the spread, from raw step ranges."""
    import json
    import shutil
    import sqlite3

    from click.testing import CliRunner

    from nvbridge.cli import cli
    from tests.conftest import SAMPLE_DB

    sources = []
    for rank, name in enumerate(["cnn_cpu+synthetic_gpu.sqlite", "cnn_cpu.sqlite", "threads_cpu.sqlite"]):
        dest = tmp_path / f"train_rank{rank}.sqlite"
        shutil.copyfile(SAMPLE_DB / name, dest)
        sources.append(dest)
    assert len(nvbridge.convert(sources, tmp_path / "ds", jobs=2)) == 3
    result = CliRunner().invoke(cli, ["summary", str(tmp_path / "ds"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [r["rank"] for r in data["ranks"]["ranks"]] == ["rank 0", "rank 1", "rank 2"]
    kernels = sqlite3.connect(sources[0]).execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert [r["kernels"] for r in data["ranks"]["ranks"]] == [kernels, 0, 0]
    # Independent step times: ProfilerStep ranges straight from each file.
    raw: dict[int, dict[str, int]] = {}
    for rank, src in enumerate(sources):
        for text, start, end in sqlite3.connect(src).execute(
            "SELECT text, start, end FROM NVTX_EVENTS WHERE text LIKE 'ProfilerStep#%'"
        ):
            raw.setdefault(int(text.split("#")[1]), {}).setdefault(f"rank {rank}", 0)
            raw[int(text.split("#")[1])][f"rank {rank}"] += end - start
    for st in data["ranks"]["steps"]:
        by_rank = raw[st["step"]]
        assert st["slowest"] == max(by_rank, key=lambda r: by_rank[r])
        assert st["spread_ns"] == max(by_rank.values()) - min(by_rank.values())
    text = CliRunner().invoke(cli, ["summary", str(tmp_path / "ds"), "--limit", "3"]).stdout
    assert text.startswith("3 reports:\n  rank 0 (train_rank0.sqlite)")


def test_summary_reads_one_report_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dataset of many ranks is summarized holding one report in memory at a time, and gives
    the table of all reports together (summed from each report's own table)."""
    import gc
    import weakref

    from click.testing import CliRunner

    from nvbridge.cli import cli

    sources = [real_db(n) for n in REPORTS]
    nvbridge.convert(sources, tmp_path / "ds")
    alive: weakref.WeakSet[nvbridge.Report] = weakref.WeakSet()
    most = 0

    def load(path: Path, *args: Any, **kwargs: Any) -> nvbridge.Report:
        nonlocal most
        gc.collect()
        report = nvbridge.load(path, *args, **kwargs)
        alive.add(report)
        most = max(most, len(alive))
        return report

    monkeypatch.setattr(sys.modules["nvbridge.analysis.summarize"], "load_tables", load)
    result = CliRunner().invoke(cli, ["summary", str(tmp_path / "ds"), "--json", "--limit", "-1"])
    assert result.exit_code == 0, result.output
    assert most == 1
    rows = {r["name"]: r for r in json.loads(result.stdout)["rows"] if r["name"] != "[no op]"}
    calls: dict[str, int] = {}
    gpu: dict[str, int] = {}
    for d in sorted((tmp_path / "ds").glob("report=*")):
        ops = nvbridge.load(d).ops
        for name, g in zip(ops.column("op_name").to_pylist(), ops.column("self_gpu_ns").to_pylist()):
            calls[name] = calls.get(name, 0) + 1
            gpu[name] = gpu.get(name, 0) + g
    assert {n: r["calls"] for n, r in rows.items()} == calls
    assert {n: r["self_gpu_ns"] for n, r in rows.items()} == gpu


def test_duckdb_examples_from_the_readme(tmp_path: Path) -> None:
    """The README's DuckDB queries run on a converted dataset and agree with nvbridge's tables."""
    import re

    duckdb = pytest.importorskip("duckdb")
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    queries = re.findall(r"```sql\n(.*?)```", readme, re.S)
    assert queries
    sources = [real_db(n) for n in REPORTS[:2]]
    nvbridge.convert(sources[0], tmp_path / "out")
    nvbridge.convert(sources, tmp_path / "dataset")
    con = duckdb.connect()
    con.execute(f"SET file_search_path = '{tmp_path}'")
    ran = 0
    for block in queries:
        code = "\n".join(line for line in block.splitlines() if not line.strip().startswith("--"))
        for sql in [q.strip() for q in code.split(";") if q.strip()]:
            rows = con.execute(sql).fetchall()
            assert rows, sql
            ran += 1
    assert ran >= 2
    top = con.execute(
        "SELECT name, sum(self_gpu_ns) FROM 'out/ops.parquet' GROUP BY name ORDER BY 2 DESC LIMIT 1"
    ).fetchall()[0]
    ours = nvbridge.load(tmp_path / "out").df("ops").groupby("name").self_gpu_ns.sum().max()
    assert top[1] == ours
