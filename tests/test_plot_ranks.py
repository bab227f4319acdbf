"""``nvbridge plot`` of a dataset of many reports: per step and rank, compute, communication,
copies and idle, checked against plain-loop interval arithmetic on the raw SQL of each report
(tests/raw_gpu.py: GPU ops and NVTX ranges), and the straggler marked."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.cli import cli
from nvbridge.plot.ranks import CATEGORIES, dataset_steps, stragglers
from tests import raw_gpu
from tests.conftest import SAMPLE_DB

REPORTS = ["diff_base_cpu+synthetic_gpu.sqlite", "ranks_cpu+synthetic_gpu.sqlite", "advise_cpu.sqlite"]


def _union_in(intervals: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """The union of intervals cut to [lo, hi] (tests/raw_gpu.py's plain loops)."""
    return raw_gpu.union([(max(s, lo), min(e, hi)) for s, e in intervals])


def _length(x: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in x)


def _raw_figures(path: Path) -> dict[int, dict[str, int]]:
    """Step -> category -> ns, from the report's raw SQL."""
    raw = raw_gpu.read(path)
    steps: dict[int, tuple[int, int]] = {}
    for r in raw.ranges:
        m = re.fullmatch(r"ProfilerStep#(\d+)", r.name)
        if m:
            lo, hi = steps.get(int(m.group(1)), (r.start, r.end))
            steps[int(m.group(1))] = (min(lo, r.start), max(hi, r.end))
    out = {}
    for n, (lo, hi) in steps.items():
        if raw.gpu:
            compute = _union_in([(g.start, g.end) for g in raw.gpu if g.kind != "memcpy" and not g.nccl], lo, hi)
            comm_all = _union_in([(g.start, g.end) for g in raw.gpu if g.nccl], lo, hi)
            copies_all = _union_in([(g.start, g.end) for g in raw.gpu if g.kind == "memcpy"], lo, hi)
        else:  # a rank without GPU ops: its ranges (but steps) compute
            compute = _union_in(
                [(r.start, r.end) for r in raw.ranges if not r.name.startswith("ProfilerStep#")], lo, hi
            )
            comm_all, copies_all = [], []
        comm = raw_gpu.subtract(comm_all, compute)
        copies = raw_gpu.subtract(raw_gpu.subtract(copies_all, compute), comm)
        figures = {"compute": _length(compute), "communication": _length(comm), "copies": _length(copies)}
        out[n] = figures | {"idle": (hi - lo) - sum(figures.values())}
    return out


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    tmp = tmp_path_factory.mktemp("plot_many")
    sources = []
    for rank, name in enumerate(REPORTS):
        sources.append(tmp / f"rank{rank}.sqlite")
        shutil.copyfile(SAMPLE_DB / name, sources[-1])
    nvbridge.convert(sources, tmp / "ds")
    return tmp / "ds", sources


def test_categories_equal_raw_interval_arithmetic(many: tuple[Path, list[Path]]) -> None:
    ds, sources = many
    figures = dataset_steps(ds)
    assert [f.rank for f in figures] == list(range(len(REPORTS)))
    busy = 0
    for f, path in zip(figures, sources):
        raw = _raw_figures(path)
        assert sorted(f.steps.tolist()) == sorted(raw)
        for n, want in raw.items():
            assert f.of(n) == want, (f.rank, n)
            busy += want["compute"] + want["copies"]
    assert busy > 0  # the GPU reports do compute and copy inside their steps


def test_straggler_is_the_longest_step_until_the_summary_names_one(many: tuple[Path, list[Path]]) -> None:
    ds, sources = many
    figures = dataset_steps(ds)
    raws = [_raw_figures(p) for p in sources]
    for n, rank in stragglers(figures).items():
        lengths = {r: sum(raw[n].values()) for r, raw in enumerate(raws) if n in raw}
        assert lengths[rank] == max(lengths.values())
    assert stragglers(figures, {0: 2})[0] == 2  # a rank the summary names wins over the longest step


def test_gloo_rank_communicates_in_its_collectives(many: tuple[Path, list[Path]], tmp_path: Path) -> None:
    """A rank without GPU ops (advise_cpu, rank 2): its collectives of the dataset's table, back on
    its own clock, are its communication, and no longer its compute."""
    ds, sources = many
    copy = tmp_path / "ds"
    shutil.copytree(ds, copy)
    raw = raw_gpu.read(sources[2])
    step = next(r for r in raw.ranges if r.name == "ProfilerStep#1")
    offset = 1_000_000_000
    a, e = step.start + 1_000, step.start + 1_000 + (step.end - step.start) // 2
    table = pa.table({"report": ["rank2"], "rank": [2], "arrival_ns": [a + offset], "end_ns": [e + offset]})
    pq.write_table(table, copy / "collectives.parquet")
    pq.write_table(pa.table({"key": ["clock.rank2.offset_ns"], "value": [str(offset)]}), copy / "ranks_meta.parquet")
    got = {f.rank: f for f in dataset_steps(copy)}[2].of(1)
    assert got is not None and got["communication"] == e - a
    lo, hi = (
        min(r.start for r in raw.ranges if r.name == "ProfilerStep#1"),
        max(r.end for r in raw.ranges if r.name == "ProfilerStep#1"),
    )
    work = _union_in([(r.start, r.end) for r in raw.ranges if not r.name.startswith("ProfilerStep#")], lo, hi)
    assert got["compute"] == _length(work) - _length(_union_in([(s, t) for s, t in work], a, e))
    assert sum(got[c] for c in CATEGORIES) == hi - lo


def test_cli_draws_and_names_the_straggler(many: tuple[Path, list[Path]], tmp_path: Path) -> None:
    ds, _ = many
    out = tmp_path / "ranks.png"
    result = CliRunner().invoke(cli, ["plot", str(ds), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    named = dict(re.findall(r"step (\d+): rank (\d+)", result.output))
    assert {int(k): int(v) for k, v in named.items()} == stragglers(dataset_steps(ds))
    one = CliRunner().invoke(cli, ["plot", str(ds), "-o", str(tmp_path / "one.svg"), "--step", "1"])
    assert one.exit_code == 0 and "(1 steps;" in one.output
    bad = CliRunner().invoke(cli, ["plot", str(ds), "-o", str(tmp_path / "x.png"), "--step", "99"])
    assert bad.exit_code == 1 and "no ProfilerStep#99 on any rank" in bad.output and not (tmp_path / "x.png").exists()
    roof = CliRunner().invoke(cli, ["plot", str(ds), "-o", str(tmp_path / "x.png"), "--roofline"])
    assert roof.exit_code == 2


def test_the_rank_everyone_waited_for_is_the_straggler(many: tuple[Path, list[Path]], tmp_path: Path) -> None:
    """With matched collectives in step 1, the straggler is the rank that arrived last (charged
    the others' waits), not the rank with the longest step; the other steps keep the longest."""
    ds, sources = many
    copy = tmp_path / "ds"
    shutil.copytree(ds, copy)
    figures = dataset_steps(copy)
    longest = stragglers(figures)[1]
    late = next(r for r in range(len(REPORTS)) if r != longest)
    rows = []
    for seq in range(2):
        for rank in range(len(REPORTS)):
            arrival = 1_000 * seq + (500 if rank == late else 0)
            rows.append({"op": "allreduce", "comm": "gloo", "seq": seq, "rank": rank, "report": f"rank{rank}"})
            rows[-1] |= {"step": 1, "arrival_ns": arrival, "end_ns": 1_000 * seq + 600, "matched": True}
            rows[-1] |= {"wait_ns": (500 if rank != late else 0)}
    pq.write_table(pa.Table.from_pylist(rows), copy / "collectives.parquet")
    result = CliRunner().invoke(cli, ["plot", str(copy), "-o", str(tmp_path / "p.png")])
    assert result.exit_code == 0, result.output
    named = {int(k): int(v) for k, v in re.findall(r"step (\d+): rank (\d+)", result.output)}
    assert named == {**stragglers(figures), 1: late} and longest != late


def test_gloo_recording_names_the_planted_straggler(tmp_path: Path) -> None:
    """torch.distributed (gloo), 4 ranks, one of which sleeps 50 ms in a named range in a known
    step: the plot names it, and every other rank's communication in that step is its time inside
    the step's collectives by the workload's own clock, within 5% of the sleep."""
    import json

    name = "ranks_gloo4_straggler_cpu"
    nvbridge.convert([SAMPLE_DB / f"{name}.rank{k}.sqlite" for k in range(4)], tmp_path / "ds")
    truth = json.loads((SAMPLE_DB / f"{name}.waits.json").read_text())["ranks"]
    late, step, sleep_ns = truth[0]["straggler_rank"], truth[0]["straggler_step"], truth[0]["sleep_ms"] * 1e6
    result = CliRunner().invoke(cli, ["plot", str(tmp_path / "ds"), "-o", str(tmp_path / "p.png")])
    assert result.exit_code == 0, result.output
    assert f"step {step}: rank {late}" in result.output
    summary = CliRunner().invoke(cli, ["summary", str(tmp_path / "ds"), "--json"])
    assert summary.exit_code == 0, summary.output
    said = {int(k): int(v) for k, v in re.findall(r"step (\d+): rank (\d+)", result.output)}
    assert said == {
        s["step"]: s["slowest_rank"] for s in json.loads(summary.stdout)["ranks"]["steps"]
    }  # as summary says
    figures = {f.rank: f for f in dataset_steps(tmp_path / "ds")}
    for r in truth:
        if r["rank"] == late:
            continue
        inside = sum(c["inside_ns"] for c in r["collectives"] if c["step"] == step)
        got = figures[r["rank"]].of(step)
        assert got is not None and abs(got["communication"] - inside) <= 0.05 * sleep_ns, (r["rank"], got, inside)
    slow = figures[late].of(step)
    assert slow is not None and slow["compute"] >= sleep_ns  # the sleep is in a range of its own: compute
