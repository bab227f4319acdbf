"""Recording many ranks (issue 28): emit_nvtx's rank mark, its reader, the ranks a dataset takes
from it, and the gloo recordings in sample_db/ (scripts/record/ranks_gloo.py).

The oracle for the recordings is the workload itself: each rank wrote its own
``dist.get_rank()``, world size and ``os.getpid()`` into ``NAME.waits.json``; the marks are read
back with raw SQL through sqlite3.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import nvbridge
from nvbridge.annotate import _rank
from nvbridge.dataset.ranks import rank_processes, recorded_ranks
from nvbridge.readers.nsys_rank_marks import process_ranks
from scripts.paths import importable
from tests import raw_rank_marks
from tests.conftest import ROOT, raw, require_nsys

SAMPLES = ROOT / "sample_db"
PER_RANK = {"ranks_gloo2_cpu": 2, "ranks_gloo2_straggler_cpu": 2, "ranks_gloo4_straggler_cpu": 4}
ONE_FILE = SAMPLES / "ranks_gloo2_onefile_cpu.sqlite"


def oracle(name: str) -> list[dict[str, Any]]:
    ranks: list[dict[str, Any]] = json.loads((SAMPLES / f"{name}.waits.json").read_text())["ranks"]
    return ranks


def test_rank_fields_take_the_first_source_that_names_the_rank() -> None:
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "RANK": "3", "WORLD_SIZE": "4"}
    assert _rank.rank_fields(env) == (3, 4, -1)  # torchrun's, LOCAL_RANK unknown: not SLURM's
    del env["RANK"]
    assert _rank.rank_fields(env) == (5, 8, 1)
    assert _rank.rank_fields({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3"}) == (2, 3, -1)
    assert _rank.rank_fields({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"}) == (1, 2, 1)
    assert _rank.rank_message((7, 16, 3)) == "rank 7 16 3"


def test_rank_fields_fall_back_to_an_initialized_process_group(tmp_path: Path) -> None:
    """mp.spawn passes the rank as an argument: only the process group knows it."""
    dist = pytest.importorskip("torch.distributed")
    assert _rank.rank_fields({}) == (-1, -1, -1)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert _rank.rank_fields({}) == (0, 1, -1)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("name", sorted(PER_RANK))
def test_each_rank_capture_holds_its_own_rank_mark(name: str) -> None:
    """emit_nvtx wrote `rank R N L` in the nvbridge domain, R and N as the workload's
    torch.distributed says, from the process the workload says it ran in."""
    ranks = oracle(name)
    assert len(ranks) == PER_RANK[name]
    for r in ranks:
        path = SAMPLES / f"{name}.rank{r['rank']}.sqlite"
        local = r["rank"]  # one node: torchrun's LOCAL_RANK is the rank
        assert raw_rank_marks.marks(path) == {r["pid"]: f"rank {r['rank']} {r['world_size']} {local}"}
        report = nvbridge.load(path)
        assert process_ranks(report.marks) == {r["pid"]: (r["rank"], r["world_size"], local)}
        assert (report.meta["rank"], report.meta["world_size"]) == (str(r["rank"]), str(r["world_size"]))


def test_one_session_capture_names_each_process_rank() -> None:
    ranks = oracle("ranks_gloo2_onefile_cpu")
    expected = {r["pid"]: f"rank {r['rank']} 2 {r['rank']}" for r in ranks}
    assert raw_rank_marks.marks(ONE_FILE) == expected
    marks = nvbridge.load(ONE_FILE).marks
    assert {p: f"rank {a} {b} {c}" for p, (a, b, c) in process_ranks(marks).items()} == expected


def swapped_copy(tmp_path: Path) -> tuple[Path, dict[int, int]]:
    """The one-session capture with the two processes' rank marks swapped: rank 0 is now the
    higher pid, against the pid order the inference falls back to."""
    db = tmp_path / "swapped.sqlite"
    shutil.copyfile(ONE_FILE, db)
    con = sqlite3.connect(db)
    with con:
        rows = con.execute("SELECT rowid, text FROM NVTX_EVENTS WHERE eventType = 34 AND text LIKE 'rank %'").fetchall()
        assert len(rows) == 2
        (a, ta), (b, tb) = rows
        con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = ?", (tb, a))
        con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = ?", (ta, b))
    con.close()
    marks = raw_rank_marks.marks(db)
    return db, {pid: int(text.split()[1]) for pid, text in marks.items()}


def test_a_dataset_takes_each_process_rank_from_its_mark(tmp_path: Path) -> None:
    """Before the marks were read, ranks went by pid order (no GPU work): the swapped capture's
    rank 0 was the lower pid."""
    db, marked = swapped_copy(tmp_path)
    assert sorted(marked.values()) == [0, 1] and marked[max(marked)] == 0
    out = tmp_path / "out"
    nvbridge.convert(db, out)
    report = nvbridge.load(out)
    assert report.meta["rank"] is None and report.meta["world_size"] == "2"
    assert json.loads(str(report.meta["process_ranks"])) == {str(p): r for p, r in marked.items()}
    from nvbridge.analysis.rank_figures import report_ranks

    assert {r.process_id: r.rank for r in report_ranks(report).ranks} == marked


def test_recorded_ranks_win_over_inference_and_leave_the_rest_numbered() -> None:
    # GPU order says pid 10 is rank 0; the marks say otherwise
    found = rank_processes({10, 20, 30}, {0: {10}, 1: {20}, 2: {30}}, {10: 2, 20: 0})
    assert {r.process_id: r.rank for r in found.ranks} == {20: 0, 10: 2, 30: 1}
    assert [r.rank for r in found.ranks] == [0, 2, 1]  # marked first, by rank; then the inferred
    # one process with a mark: as meta.rank
    assert [(r.process_id, r.rank) for r in rank_processes({7}, {}, {7: 5}).ranks] == [(7, 5)]
    # a mark of a process with no ranges and no GPU work (not in the report's tables) is ignored
    assert [(r.process_id, r.rank) for r in rank_processes({7}, {}, {9: 3}).ranks] == [(7, 0)]


def test_recorded_ranks_from_meta() -> None:
    assert recorded_ranks({"rank": "3", "process_ranks": '{"11": 3}'}) == 3
    assert recorded_ranks({"rank": None, "process_ranks": '{"11": 1, "12": 0}'}) == {11: 1, 12: 0}
    assert recorded_ranks({"rank": None, "process_ranks": "damaged"}) is None
    assert recorded_ranks({}) is None


def test_marks_of_other_domains_or_shapes_are_not_ranks(tmp_path: Path) -> None:
    """Only `rank <int> <int> <int>` in a domain created as nvbridge counts, the last per process;
    -1 (unknown) never does. Through a conversion of a hand-built export (its domain names come
    from the NvtxDomainCreate rows, per process)."""
    from tests.tiny_nsys import DDL

    path = tmp_path / "marks.sqlite"
    con = sqlite3.connect(path)
    con.executescript(DDL)

    def pid(p: int) -> int:  # globalTid of process p's thread 1
        return p << 24 | 1

    rows = [(0, 75, "nvbridge", pid(p), 9) for p in (5, 6, 7)]  # domain 9 is nvbridge in 5, 6 and 7
    rows += [
        (0, 75, "nvbridge", pid(1), 1),
        (1, 34, "rank 4 8 0", pid(1), 1),  # counts
        (0, 75, "NCCL", pid(2), 1),
        (1, 34, "rank 5 8 1", pid(2), 1),  # another domain
        (1, 34, "rank 6 8 2", pid(3), 0),  # the default domain
        (1, 34, "rank 7 8 3", pid(4), 9),  # a domain whose name the capture lacks
        (1, 34, "rank -1 -1 -1", pid(5), 9),  # unknown
        (1, 34, "rank 8 8 x", pid(6), 9),  # not the shape
        (2, 34, "rank 1 8 1", pid(7), 9),
        (3, 34, "rank -1 8 1", pid(7), 9),  # a later unknown does not undo a known one
    ]
    con.executemany("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (?,?,?,?,?)", rows)
    con.commit()
    con.close()
    report = nvbridge.load(path)
    assert process_ranks(report.marks) == {1: (4, 8, 0), 7: (1, 8, 1)}
    assert json.loads(str(report.meta["process_ranks"])) == {"1": 4, "7": 1} and report.meta["world_size"] == "8"


def test_options_the_user_gives_replace_ours() -> None:
    """nsys 2022.4 refused `nvbridge profile --trace=nvtx,osrt -- ...`: "Option '--trace' cannot
    be specified more than once" (ours came first, theirs after)."""
    from nvbridge.conversion.record import NSYS_OPTIONS, nsys_options_with

    assert nsys_options_with([]) == list(NSYS_OPTIONS)
    got = nsys_options_with(["--trace=nvtx,osrt", "-s", "cpu", "-ftrue", "--duration=5"])
    assert [o for o in got if o.startswith(("--trace", "--sample", "--force"))] == ["--trace=nvtx,osrt"]
    assert got[-5:] == ["--trace=nvtx,osrt", "-s", "cpu", "-ftrue", "--duration=5"]
    assert "--cpuctxsw=none" in got and "--osrt-threshold=100000" in got
    # a trace without OS runtime: no threshold for it (nsys warns "Setting the osrt threshold
    # without including 'osrt' in the --trace switch is invalid")
    assert not any(o.startswith("--osrt") for o in nsys_options_with(["--trace=nvtx"]))
    assert not any(o.startswith("--osrt") for o in nsys_options_with(["-tcuda,nvtx"]))
    assert nsys_options_with(["-t", "cuda"]).count("-t") == 1 and not any(
        o.startswith("--trace") for o in nsys_options_with(["-t", "cuda"])
    )


def _profile(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvbridge", "profile", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=importable(),
    )


def _torchrun(nproc: int, waits: Path) -> list[str]:
    workload = str(ROOT / "scripts" / "workloads" / "dist.py")
    return ["torchrun", "--standalone", f"--nproc-per-node={nproc}", workload, "--steps", "2", "--waits", str(waits)]


def _oracle_pids(waits: Path) -> dict[int, int]:
    """rank -> pid, as each rank's own process wrote them."""
    found = [json.loads(p.read_text()) for p in waits.parent.glob(f"{waits.name}.rank*.json")]
    return {r["rank"]: r["pid"] for r in found}


@pytest.mark.nsys
def test_profile_torchrun_records_one_report_per_rank(tmp_path: Path) -> None:
    """`nvbridge profile -- torchrun --nproc-per-node 2 ...`: nsys around each rank, reports named
    by RANK, one dataset partitioned report=rank<K>, each partition the rank its process was;
    its ops are the export's ranges (raw SQL on NVIDIA's own export of the kept report)."""
    nsys = require_nsys()
    pytest.importorskip("torch.distributed")
    waits = tmp_path / "waits"
    proc = _profile(tmp_path, "-o", "out", "--keep-report", "reps", "--trace=nvtx,osrt", "--", *_torchrun(2, waits))
    assert proc.returncode == 0, proc.stderr[-2000:]
    pids = _oracle_pids(waits)
    assert sorted(pids) == [0, 1]
    assert sorted(p.name for p in (tmp_path / "reps").iterdir()) == ["rank0.nsys-rep", "rank1.nsys-rep"]
    # the ranks' gloo collectives matched at the root (docs/ranks.md)
    parts = ["collectives.parquet", "ranks_meta.parquet", "report=rank0", "report=rank1"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == parts
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".nvbridge-profile-")]  # work folder gone
    text = " ".join(proc.stdout.split())
    assert "2 reports:" in text and "rank 0 (rank0.nsys-rep)" in text and "rank 1 (rank1.nsys-rep)" in text
    for rank, pid in pids.items():
        meta = {
            r["key"]: r["value"]
            for r in pq.read_table(tmp_path / "out" / f"report=rank{rank}" / "meta.parquet").to_pylist()
        }
        assert (meta["rank"], meta["world_size"], meta["process_ranks"]) == (
            str(rank),
            "2",
            json.dumps({str(pid): rank}),
        )
        db = tmp_path / f"rank{rank}.sqlite"
        subprocess.run(
            [nsys, "export", "--type", "sqlite", "-o", str(db), str(tmp_path / "reps" / f"rank{rank}.nsys-rep")],
            check=True,
            capture_output=True,
            timeout=300,
        )
        ranges = raw(
            db, f"SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND globalTid >> 24 & 16777215 = {pid}"
        )
        ops = pq.read_table(tmp_path / "out" / f"report=rank{rank}" / "ops.parquet", columns=["process_id"])
        assert ops.num_rows == ranges[0][0] > 0 and set(ops.column("process_id").to_pylist()) == {pid}


@pytest.mark.nsys
def test_profile_one_report_names_each_process_rank_from_its_mark(tmp_path: Path) -> None:
    """--one-report: one nsys session over torchrun; one dataset whose processes are numbered
    by the ranks they marked (the workload's own pids), torchrun's own process no rank."""
    require_nsys()
    pytest.importorskip("torch.distributed")
    waits = tmp_path / "waits"
    proc = _profile(tmp_path, "-o", "out", "--one-report", "--trace=nvtx,osrt", "--", *_torchrun(2, waits))
    assert proc.returncode == 0, proc.stderr[-2000:]
    pids = _oracle_pids(waits)
    from nvbridge.analysis.rank_figures import report_ranks

    report = nvbridge.load(tmp_path / "out")
    assert json.loads(str(report.meta["process_ranks"])) == {str(p): r for r, p in pids.items()}
    assert {r.rank: r.process_id for r in report_ranks(report).ranks} == pids
    assert "2 ranks in dist.nsys-rep" in " ".join(proc.stdout.split())


@pytest.mark.nsys
def test_profile_srun_names_reports_by_slurm_procid(tmp_path: Path) -> None:
    """srun's shape with a stand-in srun (runs -n N copies, each with SLURM_PROCID set, as
    srun does); and one that sets nothing: refused in one line, nothing written."""
    require_nsys()
    fake = tmp_path / "bin" / "srun"
    fake.parent.mkdir()
    fake.write_text(
        '#!/bin/sh\nshift; n=$1; shift\ni=0\nwhile [ $i -lt $n ]; do SLURM_PROCID=$i "$@" & i=$((i+1)); done\nwait\n'
    )
    fake.chmod(0o755)
    code = "import nvbridge\nwith nvbridge.emit_nvtx() as nv:\n    nv.step()\n"
    proc = _profile(tmp_path, "-o", "out", "--trace=nvtx", "--", str(fake), "-n", "2", sys.executable, "-c", code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report=rank0", "report=rank1"], proc.stderr
    for rank in (0, 1):
        meta = {
            r["key"]: r["value"]
            for r in pq.read_table(tmp_path / "out" / f"report=rank{rank}" / "meta.parquet").to_pylist()
        }
        assert meta["rank"] == str(rank)  # SLURM_PROCID: the rank mark's and the file name's
    # a launcher that fails once its one rank recorded: said, and the report still converted,
    # in its partition (one rank's report is a run of ranks' shape, not a one-report dataset)
    fake.write_text('#!/bin/sh\nshift; shift\nSLURM_PROCID=0 "$@"\nexit 3\n')
    proc = _profile(tmp_path, "-o", "out1", "--trace=nvtx", "--", str(fake), "-n", "1", sys.executable, "-c", code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "srun exited with status 3; converting the 1 report(s) recorded" in proc.stderr
    assert sorted(p.name for p in (tmp_path / "out1").iterdir()) == ["report=rank0"]
    fake.write_text('#!/bin/sh\nshift; shift\nexec "$@"\n')  # sets no SLURM_PROCID
    proc = _profile(tmp_path, "-o", "out2", "--trace=nvtx", "--", str(fake), "-n", "1", sys.executable, "-c", "pass")
    assert proc.returncode == 1 and "srun did not set SLURM_PROCID" in proc.stderr and "--one-report" in proc.stderr
    assert proc.stderr.strip().splitlines() == [line for line in proc.stderr.splitlines() if "SLURM_PROCID" in line]
    assert not (tmp_path / "out2").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".nvbridge-profile-")]


def test_keep_report_under_a_launcher_is_a_folder(tmp_path: Path) -> None:
    """Refused before anything runs, in one line, nothing written: a report name, a folder with
    files (without --force), and with --force a rank<K>.nsys-rep that is no Nsight Systems
    report (--force replaces only nvbridge's own kind of file)."""
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "rank0.nsys-rep").write_text("keep me")
    cases = (
        (["--keep-report", "reps.nsys-rep"], "give a folder"),
        (["--keep-report", "full"], "is not empty"),
        (["--keep-report", "full", "--force"], "was not written by nvbridge"),
    )
    for args, said in cases:
        proc = _profile(tmp_path, "-o", "out", *args, "--", "torchrun", "--nproc-per-node=2", "t.py")
        assert proc.returncode == 1 and said in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["full", "rank0.nsys-rep"]
    assert (tmp_path / "full" / "rank0.nsys-rep").read_text() == "keep me"


def test_nsys_options_before_dashes_stay_nsys_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """click dropped the `--` after an unknown option: `profile -o out --duration=60 -- python t.py`
    recorded the command `--duration=60 python t.py` (and under torchrun saw no launcher)."""
    from click.testing import CliRunner

    from nvbridge.cli import cli
    from nvbridge.cli import profile as profile_module
    from nvbridge.errors import ExportError

    seen: list[tuple[tuple[str, ...], tuple[str, ...]]] = []

    def record(command: tuple[str, ...], report: Path, nsys_options: tuple[str, ...] = ()) -> Path:
        seen.append((tuple(command), tuple(nsys_options)))
        raise ExportError("stop here")

    monkeypatch.setattr(profile_module, "record", record)
    for args, expected in (
        (["--duration=60", "--", "python", "t.py", "--", "x"], (("python", "t.py", "--", "x"), ("--duration=60",))),
        (["-t", "nvtx", "--", "python", "t.py"], (("python", "t.py"), ("-t", "nvtx"))),
        (["python", "t.py"], (("python", "t.py"), ())),
    ):
        result = CliRunner().invoke(cli, ["profile", "-o", str(tmp_path / "out"), *args])
        assert result.exit_code == 1 and "stop here" in result.output
        assert seen.pop() == expected
