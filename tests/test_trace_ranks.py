"""One trace per rank: which processes are ranks (those that ran GPU work, by process id; the
recorded rank for a one-process report), what each file's ``distributedInfo`` says, and that the
files per rank hold exactly what the one-file trace holds. Checked against raw SQL on the real
two-process export and the two-process recording, and on small exports planted here (a launcher
process with ranges only, a rank spelled in the file name, GPU ops without a process)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.cli import cli
from nvbridge.columns import np_col
from nvbridge.conversion.memory import export_chrome_traces
from nvbridge.dataset.schema import InMemory
from nvbridge.export.trace_ranks import Ranks, rank_path, report_ranks
from tests import raw_gpu, tiny_nsys
from tests.conftest import SAMPLE_DB, real_db
from tests.test_chrome import load_strict, validate

FSDP = "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"
RANKS_SAMPLE = "ranks_cpu+synthetic_gpu.sqlite"  # two processes on one GPU


def _export(path: Path, pids: list[int]) -> None:
    """A tiny nsys-shaped export: process 50 records ranges only (a launcher); each process in
    ``pids`` a range, two launches and their kernels on GPU ``i`` (its position)."""
    con = sqlite3.connect(path)
    con.executescript(tiny_nsys.DDL)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "cudaLaunchKernel_v7000"), (2, "gemm")])
    con.execute("INSERT INTO NVTX_EVENTS VALUES (500, 90000, 59, 'spawn', NULL, ?, NULL, 0)", ((50 << 24) | 50,))
    for i, pid in enumerate(pids):
        gtid, t0 = (pid << 24) | pid, 1000 + 100 * i
        con.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, 'step', NULL, ?, NULL, 0)", (t0, t0 + 5000, gtid))
        for k in range(2):
            s, corr = t0 + 100 + 1000 * k, 300 + k
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 1, 0)", (s, s + 50, gtid, corr))
            con.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,1,7,?,?,2,NULL,NULL,1,1,1,32,1,1,16,0,0)",
                (s + 200, s + 700, i, corr, pid << 24),
            )
    con.commit()
    con.close()


def _slices(paths: list[Path]) -> Counter[str]:
    """Every slice of these files but for its track id (extra lanes are numbered per file)."""
    out: Counter[str] = Counter()
    for path in paths:
        for e in load_strict(path)["traceEvents"]:
            if e["ph"] == "X":
                out[json.dumps({k: v for k, v in e.items() if k != "tid"}, sort_keys=True)] += 1
    return out


def test_the_rule() -> None:
    """nvbridge.dataset.ranks' rule: GPU users by the lowest GPU each ran work on, then pid."""
    assert report_ranks({0: [149], 1: [148]}, [148, 149, 7], None) == Ranks({149: 0, 148: 1}, 2)
    assert report_ranks({0: [148, 149]}, [], None) == Ranks({148: 0, 149: 1}, 2)  # one GPU: by pid
    assert report_ranks({}, [9360, 9359], None) == Ranks({9359: 0, 9360: 1}, 2)  # no GPU work: every process
    assert report_ranks({0: [148]}, [7, 148], 3) == Ranks({148: 3}, None, 3)  # one rank: the one recorded
    assert report_ranks({0: [148], 1: [149]}, [], 3) == Ranks({148: 0, 149: 1}, 2)  # a capture's rank is no process's
    r = Ranks({148: 0, 149: 1}, 2)
    assert r.info([148]) == {"rank": 0, "world_size": 2} and r.info([7, 149]) == {"rank": 1, "world_size": 2}
    assert r.info([148, 149, 7]) == {"world_size": 2, "rank_of_process": {"148": 0, "149": 1}}
    assert Ranks({}, None, 5).info([]) == {"rank": 5}
    assert rank_path(Path("a/t.json.gz"), 3) == Path("a/t.rank3.json.gz")
    assert rank_path(Path("t.x.json"), 0) == Path("t.x.rank0.json")


@pytest.mark.parametrize("name", [FSDP, f"sample:{RANKS_SAMPLE}"])
def test_a_file_per_rank_holds_that_process_and_its_gpu_work(name: str, tmp_path: Path) -> None:
    path = raw_gpu.path_of(name)
    raw = raw_gpu.read(path)
    pids = sorted({g.pid for g in raw.gpu})
    written = export_chrome_traces(path, tmp_path / "t.json.gz")
    assert written.per_rank and [s.path.name for s in written.files] == ["t.rank0.json.gz", "t.rank1.json.gz"]
    for rank, (pid, stats) in enumerate(zip(pids, written.files)):
        doc = load_strict(stats.path)
        validate(doc)
        assert doc["distributedInfo"] == stats.distributed == {"rank": rank, "world_size": 2}
        events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
        gpu = [e for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
        assert {e["pid"] for e in events if e not in gpu} == {pid}
        mine = sorted((g.start - g.end) for g in raw.gpu if g.pid == pid)
        assert sorted(-round(e["dur"] * 1000) for e in gpu) == mine
    one = export_chrome_traces(path, tmp_path / "one.json.gz", split="none")
    assert _slices([s.path for s in written.files]) == _slices([one.files[0].path])  # nothing lost, nothing twice


def test_a_launcher_with_ranges_only_is_no_rank(tmp_path: Path) -> None:
    db = tmp_path / "run.sqlite"
    _export(db, [200, 100])
    out = tmp_path / "t.json"
    result = CliRunner().invoke(cli, ["trace", str(db), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "t.rank0.json (rank 0 of 2)" in result.output and "t.rank1.json (rank 1 of 2)" in result.output
    assert "process 50 ran no GPU work" in result.output
    for rank, pid in enumerate((200, 100)):  # by the GPU each ran work on: 200 ran on GPU 0
        doc = load_strict(tmp_path / f"t.rank{rank}.json")
        kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
        assert {e["pid"] for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"} == {pid}
        assert len(kernels) == 2 and {e["args"]["device"] for e in kernels} == {0 if pid == 200 else 1}
    result = CliRunner().invoke(cli, ["trace", str(db), "-o", str(out), "--split", "none"])
    assert result.exit_code == 0, result.output
    doc = load_strict(out)
    assert doc["distributedInfo"] == {"world_size": 2, "rank_of_process": {"200": 0, "100": 1}}
    assert {e["pid"] for e in doc["traceEvents"] if e.get("cat") == "user_annotation"} == {50, 100, 200}


def test_one_rank_takes_the_rank_its_file_name_records(tmp_path: Path) -> None:
    db = tmp_path / "job_rank5.sqlite"
    _export(db, [100])
    result = CliRunner().invoke(cli, ["trace", str(db), "-o", str(tmp_path / "t.json")])
    assert result.exit_code == 0, result.output
    assert "(rank 5)" in result.output
    assert load_strict(tmp_path / "t.json")["distributedInfo"] == {"rank": 5}  # its world size is unknown
    shutil.copy(SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite", tmp_path / "cnn.sqlite")
    export_chrome_traces(tmp_path / "cnn.sqlite", tmp_path / "c.json", split="rank")
    assert load_strict(tmp_path / "c.rank0.json")["distributedInfo"] == {"rank": 0, "world_size": 1}


def test_gpu_ops_without_a_process_go_with_their_gpus_only_user(tmp_path: Path) -> None:
    """(nvprof's GPU ops whose call is outside the capture have no process; planted here on the
    real FSDP export by blanking the process of every tenth GPU op.)"""
    report = nvbridge.load(real_db(FSDP))
    gpu = report.gpu_ops
    pid = np_col(gpu, "process_id")
    blank = np.arange(gpu.num_rows) % 10 == 0
    at = gpu.column_names.index("process_id")
    planted = gpu.set_column(at, "process_id", pa.array(pid, pa.int64(), mask=blank))
    names = ("ops", "api_calls", "threads", "devices")
    tables = InMemory(dict(report.meta), {"gpu_ops": planted, **{n: report.table(n) for n in names}})
    written = export_chrome_traces(tables, tmp_path / "t.json")
    dev = np_col(gpu, "device_id")
    for stats, p in zip(written.files, sorted(set(pid.tolist()))):
        assert stats.slices["kernel"] + stats.slices["memcpy"] + stats.slices["memset"] == int((pid == p).sum())
        assert set(stats.gpu_ns_by_device) == set(dev[pid == p].tolist())
    one = export_chrome_traces(replace(tables), tmp_path / "one.json", split="none")
    assert _slices([s.path for s in written.files]) == _slices([one.files[0].path])


def test_existing_and_stale_rank_files(tmp_path: Path) -> None:
    path = str(real_db(FSDP))
    (tmp_path / "t.rank1.json.gz").write_bytes(b"older")
    result = CliRunner().invoke(cli, ["trace", path, "-o", str(tmp_path / "t.json.gz")])
    assert result.exit_code == 1 and "t.rank1.json.gz already exists" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.rank1.json.gz"]  # rank 0's was not written either
    (tmp_path / "t.rank2.json.gz").write_bytes(b"an earlier run's")
    result = CliRunner().invoke(cli, ["trace", path, "-o", str(tmp_path / "t.json.gz"), "--force"])
    assert result.exit_code == 1 and "t.rank1.json.gz was not written by nvbridge" in result.output
    assert (tmp_path / "t.rank1.json.gz").read_bytes() == b"older"  # --force replaces only nvbridge's traces
    ours = CliRunner().invoke(
        cli, ["trace", str(SAMPLE_DB / "cnn_cpu.sqlite"), "-o", str(tmp_path / "t.rank1.json.gz"), "--force"]
    )
    assert ours.exit_code == 1, ours.output  # still the foreign file
    (tmp_path / "t.rank1.json.gz").unlink()
    ours = CliRunner().invoke(
        cli, ["trace", str(SAMPLE_DB / "cnn_cpu.sqlite"), "-o", str(tmp_path / "t.rank1.json.gz")]
    )
    assert ours.exit_code == 0, ours.output  # an earlier nvbridge trace at rank 1's name
    result = CliRunner().invoke(cli, ["trace", path, "-o", str(tmp_path / "t.json.gz"), "--force"])
    assert result.exit_code == 0, result.output
    assert "t.rank2.json.gz beside them is not this report's" in result.output
    assert load_strict(tmp_path / "t.rank1.json.gz")["distributedInfo"] == {"rank": 1, "world_size": 2}
