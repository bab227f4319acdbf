"""``nvbridge trace`` of a dataset of many reports: one trace, every rank its own processes on the
aligned clock, flows joining each collective across ranks, cut by --ranks and --steps, split per
step. Checked against raw SQL on the reports (GPU op times, ProfilerStep ranges) and against a
collectives table and clock offsets planted here in the dataset's files (nvbridge's spec: the
``collectives`` table and ``clock.<report>.offset_ns`` in ``ranks_meta.parquet``)."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.cli import cli
from nvbridge.dataset.collectives_read import read_collectives
from scripts.record.shift_clock import shift
from tests import raw_gpu
from tests.conftest import SAMPLE_DB, real_db
from tests.split_report import split_process
from tests.test_chrome import load_strict, ns, validate

# rank -> (sample, offset added to its times on the aligned clock); rank 3's report holds two processes
REPORTS = {
    0: ("diff_base_cpu+synthetic_gpu.sqlite", 0),
    1: ("diff_extra_cpu+synthetic_gpu.sqlite", 7_000_000_123),
    2: ("advise_cpu+synthetic_gpu.sqlite", -2_500_000_000),
    3: ("ranks_cpu+synthetic_gpu.sqlite", 41_000),
}
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _steps(raw: raw_gpu.Raw) -> dict[int, tuple[int, int]]:
    """ProfilerStep#N -> (first start, last end) over the report's processes, from raw SQL."""
    out: dict[int, tuple[int, int]] = {}
    for r in raw.ranges:
        m = re.fullmatch(r"ProfilerStep#(\d+)", r.name)
        if m:
            n = int(m.group(1))
            lo, hi = out.get(n, (r.start, r.end))
            out[n] = (min(lo, r.start), max(hi, r.end))
    return out


def _collectives(raws: dict[int, raw_gpu.Raw]) -> pa.Table:
    """Per step an allreduce on comm "0" of every rank (arriving 0.1 ms before its step ends), a
    broadcast on comm "1" of ranks 1 and 2 only, and one unmatched row of rank 0."""
    rows: list[dict[str, Any]] = []
    for n in sorted(set.intersection(*(set(_steps(r)) for r in raws.values()))):
        for comm, ranks in (("0", list(raws)), ("1", [1, 2])):
            arrival = {k: _steps(raws[k])[n][1] - 100_000 + REPORTS[k][1] for k in ranks}
            last = max(arrival.values())
            for k in ranks:
                pid = min(g.pid for g in raws[k].gpu)
                row = {"op": "allreduce" if comm == "0" else "broadcast", "comm": comm, "seq": n, "rank": k}
                row |= {"report": f"rank{k}", "process_id": pid, "step": n, "bytes": 4096, "arrival_ns": arrival[k]}
                row |= {"start_ns": last, "end_ns": last + 20_000, "wait_ns": last - arrival[k]}
                rows.append(row | {"transfer_ns": 20_000, "busbw_gbps": 1.0, "matched": True})
    late = _steps(raws[0])[0][0] + 5_000
    rows.append(rows[0] | {"comm": "9", "seq": 0, "arrival_ns": late, "start_ns": late, "end_ns": late + 1000})
    rows[-1] |= {"wait_ns": None, "transfer_ns": None, "matched": False}
    return pa.Table.from_pylist(rows)


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, raw_gpu.Raw], pa.Table]:
    tmp = tmp_path_factory.mktemp("many")
    sources = []
    for rank, (name, _) in REPORTS.items():
        sources.append(tmp / f"rank{rank}.sqlite")
        shutil.copyfile(SAMPLE_DB / name, sources[-1])
    nvbridge.convert(sources, tmp / "ds")
    raws = {k: raw_gpu.read(p) for k, p in zip(REPORTS, sources)}
    table = _collectives(raws)
    pq.write_table(table, tmp / "ds" / "collectives.parquet")
    keys = [f"clock.rank{k}.offset_ns" for k in REPORTS]
    meta = {"key": keys, "value": [str(off) for _, off in REPORTS.values()]}
    pq.write_table(pa.table(meta), tmp / "ds" / "ranks_meta.parquet")
    return tmp / "ds", raws, table


def _trace(*args: str | Path) -> tuple[dict[str, Any], str]:
    result = CliRunner().invoke(cli, ["trace", *map(str, args), "--force"])
    assert result.exit_code == 0, result.output
    out = Path(str(args[2]))
    return load_strict(out), result.output


def _rank_of_pid(doc: dict[str, Any]) -> dict[int, int]:
    """Every process of the trace (hosts and GPUs) -> its rank, by the names the trace gives."""
    out = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            m = re.match(r"rank (\d+)[: ]|GPU \d+ \(rank (\d+) GPU", e["args"]["name"])
            assert m, e
            out[e["pid"]] = int(m.group(1) or m.group(2))
    info = doc["distributedInfo"]
    for pid, rank in info.get("rank_of_process", {}).items():
        assert out[int(pid)] == rank
    return out


def _gpu_starts(doc: dict[str, Any]) -> dict[int, list[int]]:
    """Per rank, the trace's GPU op starts (ns from the trace's origin)."""
    rank_of = _rank_of_pid(doc)
    out: dict[int, list[int]] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] in GPU_CATS:
            out.setdefault(rank_of[e["pid"]], []).append(ns(e["ts"]))
    return {k: sorted(v) for k, v in out.items()}


def _flows_expected(table: pa.Table, ranks: set[int], steps: set[int] | None = None) -> int:
    """Flows of the planted table: per matched collective, one to each of its kept ranks but the last to arrive."""
    per: Counter[tuple[str, int]] = Counter()
    for r in table.to_pylist():
        if r["matched"] and r["rank"] in ranks and (steps is None or r["step"] in steps):
            per[(r["comm"], r["seq"])] += 1
    return sum(n - 1 for n in per.values())


def test_every_rank_on_the_aligned_clock(many: tuple[Path, dict[int, raw_gpu.Raw], pa.Table], tmp_path: Path) -> None:
    ds, raws, table = many
    doc, said = _trace(ds, "-o", tmp_path / "all.json.gz")
    counts = validate(doc)
    starts = _gpu_starts(doc)
    assert sorted(starts) == sorted(REPORTS)
    shift = set()
    for rank, raw in raws.items():  # every GPU op, each at its raw time plus its rank's offset
        mine = sorted(g.start + REPORTS[rank][1] for g in raw.gpu)
        assert len(starts[rank]) == len(mine)
        shift |= {t - m for t, m in zip(starts[rank], mine)}
    assert len(shift) == 1  # one clock: the same origin for every rank
    assert counts["flows"]["collective"] == _flows_expected(table, set(REPORTS)) > 0
    assert counts["cats"]["collective"] >= table.num_rows
    assert f"{_flows_expected(table, set(REPORTS))} collective" in said.replace(",", "")


def test_flows_start_at_the_last_arrival(many: tuple[Path, dict[int, raw_gpu.Raw], pa.Table], tmp_path: Path) -> None:
    ds, _, table = many
    doc, _ = _trace(ds, "-o", tmp_path / "all.json")
    rank_of = _rank_of_pid(doc)
    last: dict[tuple[str, int], tuple[int, int]] = {}
    for r in table.to_pylist():
        if r["matched"]:
            key = (r["comm"], r["seq"])
            last[key] = max(last.get(key, (r["arrival_ns"], r["rank"])), (r["arrival_ns"], r["rank"]))
    slices = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == "collective" and "#" in e["name"]:
            slices[(e["pid"], e["tid"], ns(e["ts"]))] = (e["args"]["comm"], e["args"]["seq"], e["args"]["rank"])
    starts = [e for e in doc["traceEvents"] if e["ph"] == "s" and e["cat"] == "collective"]
    for s in starts:
        comm, seq, rank = slices[(s["pid"], s["tid"], ns(s["ts"]))]
        assert rank == rank_of[s["pid"]] == last[(comm, seq)][1]


@pytest.mark.parametrize("cut", [{0, 2}, {3}])
def test_ranks_cut(cut: set[int], many: tuple[Path, dict[int, raw_gpu.Raw], pa.Table], tmp_path: Path) -> None:
    ds, raws, table = many
    doc, _ = _trace(ds, "-o", tmp_path / "cut.json", "--ranks", ",".join(map(str, sorted(cut))))
    counts = validate(doc)
    starts = _gpu_starts(doc)
    assert set(starts) == cut and set(_rank_of_pid(doc).values()) == cut
    assert {k: len(v) for k, v in starts.items()} == {k: len(raws[k].gpu) for k in cut}
    assert counts["flows"].get("collective", 0) == _flows_expected(table, cut)


def test_steps_cut_each_rank_by_its_own_steps(
    many: tuple[Path, dict[int, raw_gpu.Raw], pa.Table], tmp_path: Path
) -> None:
    ds, raws, table = many
    doc, _ = _trace(ds, "-o", tmp_path / "steps.json", "--steps", "1-2")
    counts = validate(doc)
    got = {k: len(v) for k, v in _gpu_starts(doc).items()}
    want = {}
    for rank, raw in raws.items():
        lo, hi = _steps(raw)[1][0], _steps(raw)[2][1]
        want[rank] = sum(1 for g in raw.gpu if g.end >= lo and g.start <= hi)
    assert got == want and all(want.values())
    assert counts["flows"]["collective"] == _flows_expected(table, set(REPORTS), steps={1, 2})


def test_split_per_step(many: tuple[Path, dict[int, raw_gpu.Raw], pa.Table], tmp_path: Path) -> None:
    ds, raws, _ = many
    result = CliRunner().invoke(cli, ["trace", str(ds), "-o", str(tmp_path / "t.json.gz"), "--split", "step"])
    assert result.exit_code == 0, result.output
    steps = sorted(set().union(*(_steps(r) for r in raws.values())))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"t.step{n}.json.gz" for n in steps)
    for n in steps:
        doc = load_strict(tmp_path / f"t.step{n}.json.gz")
        validate(doc)
        got = {k: len(v) for k, v in _gpu_starts(doc).items()}
        want = {}
        for rank, raw in raws.items():
            if n in _steps(raw):
                lo, hi = _steps(raw)[n]
                want[rank] = sum(1 for g in raw.gpu if g.end >= lo and g.start <= hi)
        assert got == {k: v for k, v in want.items() if v}
        if set(want) != set(REPORTS):
            assert "ran none of these steps" in result.output


def test_an_unknown_rank_is_one_line(many: tuple[Path, dict[int, raw_gpu.Raw], pa.Table], tmp_path: Path) -> None:
    ds, _, _ = many
    result = CliRunner().invoke(cli, ["trace", str(ds), "-o", str(tmp_path / "t.json"), "--ranks", "0,7"])
    assert result.exit_code != 0 and "no rank 7 in the dataset (it has ranks 0, 1, 2, 3)" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not list(tmp_path.iterdir())
    result = CliRunner().invoke(cli, ["trace", str(ds), "-o", str(tmp_path / "t.json"), "--process", "5"])
    assert result.exit_code == 2 and "--ranks" in result.output


def test_without_clock_keys_reports_align_by_session_start(
    many: tuple[Path, dict[int, raw_gpu.Raw], pa.Table], tmp_path: Path
) -> None:
    """Before nvbridge aligned a dataset's clocks, each report's times count from its session's
    start: those starts (the exports' own, read here with raw SQL) put them on one clock."""
    ds, raws, _ = many
    bare = tmp_path / "bare"
    shutil.copytree(ds, bare, ignore=shutil.ignore_patterns("ranks_meta.parquet", "collectives.parquet"))
    doc, _ = _trace(bare, "-o", tmp_path / "t.json")
    starts = _gpu_starts(doc)
    session = {k: _session_start(ds.parent / f"rank{k}.sqlite") for k in REPORTS}
    shift = {
        t - (g + session[k]) for k, raw in raws.items() for t, g in zip(starts[k], sorted(x.start for x in raw.gpu))
    }
    assert len(shift) == 1


def _session_start(path: Path) -> int:
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0])
    finally:
        con.close()


def test_one_report_cut_by_rank_and_split_by_step(tmp_path: Path) -> None:
    """A report of two ranks (two processes on one GPU: ranks by process id) cut to rank 1, then
    one file per step: each holds the GPU ops overlapping that step, from raw SQL."""
    path = SAMPLE_DB / REPORTS[3][0]
    raw = raw_gpu.read(path)
    pids = sorted({g.pid for g in raw.gpu})
    doc, _ = _trace(path, "-o", tmp_path / "r1.json", "--ranks", "1")
    validate(doc)
    assert {e["pid"] for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] not in GPU_CATS} == {pids[1]}
    assert doc["distributedInfo"] == {"rank": 1, "world_size": 2}
    result = CliRunner().invoke(cli, ["trace", str(path), "-o", str(tmp_path / "s.json"), "--split", "step"])
    assert result.exit_code == 0, result.output
    steps = _steps(raw)
    for n, (lo, hi) in steps.items():
        got = [e for e in load_strict(tmp_path / f"s.step{n}.json")["traceEvents"] if e.get("cat") in GPU_CATS]
        assert len(got) == sum(1 for g in raw.gpu if g.end >= lo and g.start <= hi) > 0
    bad = CliRunner().invoke(cli, ["trace", str(path), "-o", str(tmp_path / "x.json"), "--ranks", "5"])
    assert bad.exit_code == 1 and "no rank 5 in the report (it has ranks 0, 1)" in bad.output


FSDP = "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"


@pytest.fixture(scope="module")
def fsdp_split(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[int, int]]:
    """The FSDP export as one report per process, converted plain and with rank 1's clock moved
    (every time 7.1 s later, by scripts/record/shift_clock.py): nvbridge matches and aligns them."""
    tmp = tmp_path_factory.mktemp("fsdp_split")
    raw = raw_gpu.read(real_db(FSDP))
    pids = sorted({g.pid for g in raw.gpu if g.nccl})
    files = [split_process(real_db(FSDP), pid, tmp / f"rank{i}.sqlite") for i, pid in enumerate(pids)]
    (tmp / "moved").mkdir()
    shift(files[1], tmp / "moved" / "rank1.sqlite", 7_123_456_789, "events")  # scripts/record/shift_clock.py
    moved = [files[0], tmp / "moved" / "rank1.sqlite"]
    nvbridge.convert(files, tmp / "plain")
    nvbridge.convert(moved, tmp / "moved_ds")
    nccl = {rank: sum(1 for g in raw.gpu if g.nccl and g.pid == pid) for rank, pid in enumerate(pids)}
    return tmp / "plain", tmp / "moved_ds", nccl


def _first_gpu_gap(doc: dict[str, Any]) -> int:
    starts = _gpu_starts(doc)
    return starts[1][0] - starts[0][0]


def test_fsdp_ranks_joined_on_the_recovered_clock(
    fsdp_split: tuple[Path, Path, dict[int, int]], tmp_path: Path
) -> None:
    """Every matched collective of nvbridge's own table is joined (ranks - 1 flows each), every
    NCCL kernel of each rank is in the trace (raw SQL), and the moved rank lands where the plain
    one is, within 10 µs: the trace is on the clock the dataset recovered."""
    plain, moved, nccl = fsdp_split
    table = read_collectives(moved)
    assert table is not None and table.num_rows
    expected = _flows_expected(table, {0, 1})
    docs = []
    for ds, name in ((plain, "plain.json.gz"), (moved, "moved.json.gz")):
        doc, said = _trace(ds, "-o", tmp_path / name)
        counts = validate(doc)
        assert counts["flows"]["collective"] == expected > 0 and f"{expected} collective" in said.replace(",", "")
        rank_of = _rank_of_pid(doc)
        got = Counter(
            rank_of[e["pid"]] for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"].lower()
        )
        assert dict(got) == nccl
        docs.append(doc)
    assert abs(_first_gpu_gap(docs[1]) - _first_gpu_gap(docs[0])) <= 10_000


def test_start_end_cut_the_aligned_clock(many: tuple[Path, dict[int, raw_gpu.Raw], pa.Table], tmp_path: Path) -> None:
    """--start/--end count from the first event of any rank on the aligned clock (raw SQL times
    plus each rank's offset), and keep each rank's GPU ops overlapping the window."""
    ds, raws, _ = many
    aligned = {k: [(g.start + REPORTS[k][1], g.end + REPORTS[k][1]) for g in raw.gpu] for k, raw in raws.items()}
    firsts = [
        min(t for xs in (raw.calls, raw.gpu, raw.ranges) for t in (x.start for x in xs)) + REPORTS[k][1]
        for k, raw in raws.items()
    ]
    lo, hi = min(firsts) + 2_000_000_000, min(firsts) + 9_000_000_000
    doc, _ = _trace(ds, "-o", tmp_path / "w.json", "--start", "2s", "--end", "9s")
    validate(doc)
    got = {k: len(v) for k, v in _gpu_starts(doc).items()}
    want = {k: sum(1 for s, e in v if e >= lo and s <= hi) for k, v in aligned.items()}
    assert got == {k: n for k, n in want.items() if n} and len(got) < len(REPORTS)


def test_auto_splits_a_run_too_large_for_a_browser_per_step(
    many: tuple[Path, dict[int, raw_gpu.Raw], pa.Table], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds, raws, _ = many
    from nvbridge.export import trace_cuts

    rows = sum(len(r.gpu) + len(r.calls) for r in raws.values())  # fewer than the dataset's events (ranges too)
    monkeypatch.setattr(trace_cuts, "AUTO_STEP_EVENTS", rows)
    result = CliRunner().invoke(cli, ["trace", str(ds), "-o", str(tmp_path / "t.json")])
    assert result.exit_code == 0, result.output
    steps = sorted(set().union(*(_steps(r) for r in raws.values())))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"t.step{n}.json" for n in steps)
    assert "too large for a browser: one trace per step" in result.output
    monkeypatch.setattr(trace_cuts, "AUTO_STEP_EVENTS", 10**12)
    whole = CliRunner().invoke(cli, ["trace", str(ds), "-o", str(tmp_path / "w.json")])
    assert whole.exit_code == 0 and (tmp_path / "w.json").is_file()


def test_a_split_that_fails_leaves_no_file(
    many: tuple[Path, dict[int, raw_gpu.Raw], pa.Table], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files of a split are published together: a failure on the third leaves none of them."""
    ds, _, _ = many
    from nvbridge.export import trace_cuts

    real, calls = trace_cuts.write_many, []

    def failing(*args: Any) -> Any:
        calls.append(args)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(*args)

    monkeypatch.setattr(trace_cuts, "write_many", failing)
    result = CliRunner().invoke(cli, ["trace", str(ds), "-o", str(tmp_path / "t.json"), "--split", "step"])
    assert result.exit_code == 1 and "No space left on device" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert len(calls) == 3 and not list(tmp_path.iterdir())


def test_force_replaces_only_a_trace_nvbridge_wrote(
    many: tuple[Path, dict[int, raw_gpu.Raw], pa.Table], tmp_path: Path
) -> None:
    ds, _, _ = many
    _trace(ds, "-o", tmp_path / "t.json")  # ours: replaced with --force
    _trace(ds, "-o", tmp_path / "t.json", "--ranks", "0")
    foreign = tmp_path / "f.step0.json"
    foreign.write_text('{"traceEvents": []}')
    result = CliRunner().invoke(cli, ["trace", str(ds), "-o", str(tmp_path / "f.json"), "--split", "step", "--force"])
    assert result.exit_code == 1 and foreign.read_text() == '{"traceEvents": []}'
    assert not (tmp_path / "f.step1.json").exists()
