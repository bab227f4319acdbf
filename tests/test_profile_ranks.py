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
from pathlib import Path
from typing import Any

import pytest

from nvbridge.annotate import _rank
from nvbridge.dataset.ranks import rank_processes, recorded_ranks
from nvbridge.readers._db import Database
from nvbridge.readers.nsys_rank_marks import process_ranks
from tests import raw_rank_marks
from tests.conftest import ROOT

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
        with Database(path) as db:
            assert process_ranks(db) == {r["pid"]: (r["rank"], r["world_size"], local)}


def test_one_session_capture_names_each_process_rank() -> None:
    ranks = oracle("ranks_gloo2_onefile_cpu")
    expected = {r["pid"]: f"rank {r['rank']} 2 {r['rank']}" for r in ranks}
    assert raw_rank_marks.marks(ONE_FILE) == expected
    with Database(ONE_FILE) as db:
        assert {p: f"rank {a} {b} {c}" for p, (a, b, c) in process_ranks(db).items()} == expected


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
    import nvbridge

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
    """Only `rank <int> <int> <int>` in a domain named nvbridge (or one whose creation the
    capture lacks) counts; -1 (unknown) never does."""
    from tests.tiny_nsys import DDL

    path = tmp_path / "marks.sqlite"
    con = sqlite3.connect(path)
    con.executescript(DDL)

    def pid(p: int) -> int:  # globalTid of process p's thread 1
        return p << 24 | 1

    rows = [
        (0, 75, "nvbridge", pid(1), 1),
        (1, 34, "rank 4 8 0", pid(1), 1),  # counts
        (0, 75, "NCCL", pid(2), 1),
        (1, 34, "rank 5 8 1", pid(2), 1),  # another domain
        (1, 34, "rank 6 8 2", pid(3), 0),  # the default domain
        (1, 34, "rank 7 8 3", pid(4), 9),  # domain creation not captured: counts
        (1, 34, "rank -1 -1 -1", pid(5), 9),  # unknown
        (1, 34, "rank 8 8 x", pid(6), 9),  # not the shape
        (2, 34, "rank 1 8 1", pid(7), 9),
        (3, 34, "rank -1 8 1", pid(7), 9),  # a later unknown does not undo a known one
    ]
    con.executemany("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (?,?,?,?,?)", rows)
    con.commit()
    con.close()
    with Database(path) as db:
        assert process_ranks(db) == {1: (4, 8, 0), 4: (7, 8, 3), 7: (1, 8, 1)}
