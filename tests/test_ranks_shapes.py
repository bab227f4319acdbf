"""``trace`` and ``plot`` per process rank in the two shapes where a report holds several ranks:
one nsys session over torchrun (``ranks_gloo2_onefile_cpu``: 2 ranks, one report) and one nsys
session per node (``ranks_gloo4_2nodes_cpu.node{0,1}``: 4 ranks, 2 per report; node 0's report
holds ranks 2 and 3, so a report's position is no rank).

The independent side, read with Python's sqlite3 from the exports themselves: each process's rank
mark (tests/raw_rank_marks.py), its NVTX ranges, and its collectives: the k-th ``c10d::`` range
the process issued (its arrival) with the k-th ``gloo:`` range its worker threads ran (the end);
the figures recomputed with plain loops (tests/raw_gpu.py's interval helpers). The planted
straggler comes from the workload's own ``waits.json``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.cli import cli
from nvbridge.dataset.collectives_read import read_collectives
from nvbridge.plot.ranks import CATEGORIES, dataset_steps
from tests import raw_gpu
from tests.conftest import SAMPLE_DB, raw
from tests.raw_rank_marks import marks

ONEFILE = "ranks_gloo2_onefile_cpu"
NODES = "ranks_gloo4_2nodes_cpu"
SHAPES = {ONEFILE: [SAMPLE_DB / f"{ONEFILE}.sqlite"], NODES: [SAMPLE_DB / f"{NODES}.node{k}.sqlite" for k in (0, 1)]}


@dataclass
class RawRank:
    """One rank's process, read with raw SQL."""

    file: Path
    pid: int
    ranges: list[tuple[str, int, int]]  # name, start, end (every NVTX range of the process)
    collectives: list[tuple[int, int]]  # (arrival, end) in issue order


def _raw_ranks(files: list[Path]) -> dict[int, RawRank]:
    """Rank (from the process's own mark) -> its process's ranges and collectives."""
    out = {}
    for path in files:
        for pid, text in marks(path).items():
            rows = raw(
                path,
                "SELECT text, start, end, globalTid & 16777215 FROM NVTX_EVENTS WHERE eventType IN (59, 60) "
                f"AND end IS NOT NULL AND (globalTid >> 24 & 16777215) = {pid} ORDER BY start",
            )
            ranges = [(str(t), int(s), int(e)) for t, s, e, _ in rows]
            issued = [(s, e) for t, s, e in ranges if t.startswith("c10d::")]
            ran = [(s, e) for t, s, e in ranges if t.startswith("gloo:")]
            assert len(issued) == len(ran) > 0, (path, pid)
            out[int(text.split()[1])] = RawRank(path, pid, ranges, [(a[0], b[1]) for a, b in zip(issued, ran)])
    return out


@pytest.fixture(scope="module", params=list(SHAPES))
def shape(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    name = str(request.param)
    out = tmp_path_factory.mktemp(name) / "ds"
    nvbridge.convert(SHAPES[name], out)
    return name, out


def _trace(ds: Path, out: Path, *more: str) -> tuple[dict[str, Any], str]:
    result = CliRunner().invoke(cli, ["trace", str(ds), "-o", str(out), "--split", "none", *more])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text()), result.output


def _processes(doc: dict[str, Any]) -> dict[int, tuple[int, int]]:
    """Trace pid -> (rank, recorded pid), from the labels ``rank R: <name> (pid P)``."""
    out = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            m = re.fullmatch(r"rank (\d+): .* \(pid (\d+)\)", e["args"]["name"])
            assert m, e
            out[e["pid"]] = (int(m.group(1)), int(m.group(2)))
    return out


def _ops_per_pid(doc: dict[str, Any]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e.get("cat") in ("cpu_op", "user_annotation"):
            counts[e["pid"]] = counts.get(e["pid"], 0) + 1
    return counts


def test_trace_names_each_process_by_its_own_rank_and_joins_every_collective(
    shape: tuple[str, Path], tmp_path: Path
) -> None:
    name, ds = shape
    truth = _raw_ranks(SHAPES[name])
    doc, said = _trace(ds, tmp_path / "all.json")
    procs = _processes(doc)
    assert sorted(procs.values()) == sorted((r, t.pid) for r, t in truth.items())  # every rank, by its mark
    ops = _ops_per_pid(doc)
    for pid, (rank, _) in procs.items():
        assert ops[pid] == len(truth[rank].ranges), rank
    assert doc["distributedInfo"] == {
        "world_size": len(truth),
        "rank_of_process": {str(p): r for p, (r, _) in procs.items()},
    }
    # one flow per matched collective and other rank: every rank issued the same collectives
    per_rank = {len(t.collectives) for t in truth.values()}
    assert len(per_rank) == 1
    flows = [e for e in doc["traceEvents"] if e.get("cat") == "collective" and e["ph"] in ("s", "f")]
    starts = {e["id"]: e["pid"] for e in flows if e["ph"] == "s"}
    ends = {e["id"]: e["pid"] for e in flows if e["ph"] == "f"}
    assert len(starts) == len(ends) == per_rank.pop() * (len(truth) - 1)
    assert all(starts[i] != ends[i] for i in starts)  # each joins two ranks' processes
    assert f"{len(starts)} collective flows" in said


def test_ranks_keeps_exactly_that_ranks_process(shape: tuple[str, Path], tmp_path: Path) -> None:
    name, ds = shape
    truth = _raw_ranks(SHAPES[name])
    rank = max(truth) if name == ONEFILE else 2
    doc, said = _trace(ds, tmp_path / "one.json", "--ranks", str(rank))
    procs = _processes(doc)
    assert list(procs.values()) == [(rank, truth[rank].pid)]
    assert _ops_per_pid(doc) == {next(iter(procs)): len(truth[rank].ranges)}
    assert doc["distributedInfo"] == {"rank": rank, "world_size": len(truth)}
    assert "collective flows" not in said  # one rank: nothing to join
    bad = CliRunner().invoke(cli, ["trace", str(ds), "-o", str(tmp_path / "x.json"), "--split", "none", "--ranks", "9"])
    assert bad.exit_code == 1 and "no rank 9 in the dataset" in bad.output and not (tmp_path / "x.json").exists()


def _clip(intervals: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    return raw_gpu.union([(max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo)])


def _raw_figures(r: RawRank) -> dict[int, dict[str, int]]:
    """Step -> category -> ns of one rank, from its raw ranges and collectives."""
    out = {}
    for text, lo, hi in r.ranges:
        m = re.fullmatch(r"ProfilerStep#(\d+)", text)
        if not m:
            continue
        comm = _clip(r.collectives, lo, hi)
        work = [(s, e) for t, s, e in r.ranges if not t.startswith(("ProfilerStep#", "c10d::", "gloo:"))]
        compute = raw_gpu.subtract(_clip(work, lo, hi), comm)
        got = {"compute": raw_gpu.length(compute), "communication": raw_gpu.length(comm), "copies": 0}
        out[int(m.group(1))] = got | {"idle": (hi - lo) - sum(got.values())}
    return out


def test_plot_draws_a_bar_set_per_rank_equal_to_raw_interval_arithmetic(shape: tuple[str, Path]) -> None:
    name, ds = shape
    truth = _raw_ranks(SHAPES[name])
    figures = dataset_steps(ds)
    assert [f.rank for f in figures] == sorted(truth)
    for f in figures:
        assert f.process == truth[f.rank].pid
        want = _raw_figures(truth[f.rank])
        assert sorted(f.steps.tolist()) == sorted(want)
        for n, categories in want.items():
            assert f.of(n) == categories, (f.rank, n)
            assert sum(categories[c] for c in CATEGORIES) == f.length(n)


def test_plot_marks_the_planted_straggler_as_summary_names_it(shape: tuple[str, Path], tmp_path: Path) -> None:
    name, ds = shape
    oracle = json.loads((SAMPLE_DB / f"{name}.waits.json").read_text())["ranks"]
    late, step = oracle[0]["straggler_rank"], oracle[0]["straggler_step"]
    result = CliRunner().invoke(cli, ["plot", str(ds), "-o", str(tmp_path / "p.png")])
    assert result.exit_code == 0, result.output
    said = {int(k): int(v) for k, v in re.findall(r"step (\d+): rank (\d+)", result.output)}
    summary = CliRunner().invoke(cli, ["summary", str(ds), "--json"])
    assert summary.exit_code == 0, summary.output
    steps = json.loads(summary.stdout)["ranks"]["steps"]
    assert said == {s["step"]: s["slowest_rank"] for s in steps}
    assert said[step] == late
    assert all(sorted(int(k) for k in s["waits"]) == sorted(r["rank"] for r in oracle) for s in steps)


def test_summary_of_node_reports_numbers_every_rank_by_its_mark(tmp_path: Path) -> None:
    """The collectives table (summary's ranks.steps) numbers each process by its mark across node
    reports (node 0's report holds ranks 2 and 3), as the workload's own record says; the waits
    against its clock: tests/test_collectives_gloo.py."""
    nvbridge.convert(SHAPES[NODES], tmp_path / "ds")
    oracle = json.loads((SAMPLE_DB / f"{NODES}.waits.json").read_text())["ranks"]
    truth = _raw_ranks(SHAPES[NODES])
    assert {r["rank"]: r["pid"] for r in oracle} == {k: v.pid for k, v in truth.items()}  # the workload agrees
    assert {int(t.split()[1]) for t in marks(SHAPES[NODES][0]).values()} == {2, 3}  # a position is no rank
    table = read_collectives(tmp_path / "ds")
    assert table is not None
    got = set(zip(table.column("rank").to_pylist(), table.column("process_id").to_pylist()))
    assert got == {(k, v.pid) for k, v in truth.items()}
    summary = CliRunner().invoke(cli, ["summary", str(tmp_path / "ds"), "--json"])
    assert summary.exit_code == 0, summary.output
    steps = {s["step"]: s for s in json.loads(summary.stdout)["ranks"]["steps"]}
    late, step = oracle[0]["straggler_rank"], oracle[0]["straggler_step"]
    assert steps[step]["slowest_rank"] == late and steps[step]["cause"]["op"] == "planted_sleep"


def test_steps_cut_each_rank_on_its_own_timeline(shape: tuple[str, Path], tmp_path: Path) -> None:
    """--steps 1 keeps, per process, the ranges overlapping its own ProfilerStep#1."""
    name, ds = shape
    truth = _raw_ranks(SHAPES[name])
    doc, _ = _trace(ds, tmp_path / "s.json", "--steps", "1")
    procs = _processes(doc)
    assert sorted(r for r, _ in procs.values()) == sorted(truth)
    ops = _ops_per_pid(doc)
    for pid, (rank, _) in procs.items():
        lo, hi = next((s, e) for t, s, e in truth[rank].ranges if t == "ProfilerStep#1")
        assert ops[pid] == sum(1 for _, s, e in truth[rank].ranges if e >= lo and s <= hi), rank


def test_one_report_trace_names_its_files_by_the_processes_marks(tmp_path: Path) -> None:
    """A node's report traced alone (per rank, as torch.profiler writes them): its processes are
    ranks 2 and 3 by their marks, not 0 and 1 by process id."""
    path = SHAPES[NODES][0]
    truth = _raw_ranks([path])
    result = CliRunner().invoke(cli, ["trace", str(path), "-o", str(tmp_path / "n.json")])
    assert result.exit_code == 0, result.output
    for rank, r in truth.items():
        doc = json.loads((tmp_path / f"n.rank{rank}.json").read_text())
        assert doc["distributedInfo"] == {"rank": rank, "world_size": 4}  # the marks' world, not the report's 2
        assert {e["pid"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op"} == {r.pid}
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"n.rank{k}.json" for k in sorted(truth)]
    one = CliRunner().invoke(cli, ["trace", str(path), "-o", str(tmp_path / "one.json"), "--split", "none"])
    assert one.exit_code == 0, one.output
    info = json.loads((tmp_path / "one.json").read_text())["distributedInfo"]
    assert info == {"world_size": 4, "rank_of_process": {str(r.pid): k for k, r in truth.items()}}
