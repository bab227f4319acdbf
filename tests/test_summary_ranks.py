"""Ranks apart (issue 25, item 4): ``summary --rank K`` and ``--device D`` keep the processes
they select in every figure (op rows: calls, CPU and CUDA times; the GPU header; [no op]; MFU),
and a one-file report of several processes is per rank (rank lines with each rank's GPU lanes,
the same lanes advise reports). Oracles: raw SQL on the two-process FSDP export (one GPU each)
and on the ranks sample (two processes sharing GPU 0), through Python's sqlite3."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.analysis.mfu import mfu
from nvbridge.cli import cli
from nvbridge.gpu.peaks import resolve
from tests import raw_by_time, raw_gpu, raw_rank_marks
from tests.conftest import SAMPLE_DB, raw, real_db

FSDP = "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"
RANKS = "sample:ranks_cpu+synthetic_gpu.sqlite"
RANKS_CPU = "sample:ranks_cpu.sqlite"
PEAKS = ("--peak-tflops", "100", "--peak-gbps", "1000")


def _json(*args: str) -> Any:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _path(name: str) -> Path:
    return raw_gpu.path_of(name)


def _key(name: str) -> str:
    """torch's op name: the NVTX text up to its decorations; a module's type (docs/dataset.md)."""
    module = re.fullmatch(r"nn\.Module: .*\((\w+)\)", name)
    if module:
        return f"nn.Module: {module.group(1)}"
    return re.split(r", (?:stashed seq|seq|op_id|sizes|fwd_tid|input_op_ids) = ", name)[0]


def raw_ranks(path: Path) -> list[int]:
    """The rule of docs/cli.md worked out from raw rows: processes that launched GPU work, by
    their lowest GPU then pid; without GPU work, the processes with ranges by pid."""
    gpu = raw_gpu.read(path)
    lowest: dict[int, int] = {}
    for g in gpu.gpu:
        if g.known_pid:
            lowest[g.pid] = min(lowest.get(g.pid, g.device), g.device)
    if lowest:
        return sorted(lowest, key=lambda p: (lowest[p], p))
    return sorted({r.pid for r in raw_by_time.ranges(path)})


def raw_table(path: Path, pids: set[int], device: int | None = None) -> dict[str, tuple[int, int, int, int]]:
    """op name -> (calls, self CPU ns, CPU total ns, self CUDA ns) of the ranges of ``pids``,
    CUDA time of ``device`` only: ranges nested per thread, each GPU op to the innermost range
    around its launching call on the call's thread."""
    ranges = raw_by_time.ranges(path)
    assert all(r.end != raw_by_time.OPEN for r in ranges)  # every range closed in these files
    parents = raw_by_time.nest(ranges)
    child_ns: dict[raw_by_time.NvtxRange, int] = defaultdict(int)
    for r, parent in parents.items():
        if parent is not None:
            child_ns[parent] += r.end - r.start
    trees = raw_by_time.tree_ranges(ranges)
    starts = {k: [r.start for r in v] for k, v in trees.items()}
    data = raw_gpu.read(path)
    calls = data.call_of()
    gpu_ns: dict[raw_by_time.NvtxRange, int] = defaultdict(int)
    for g in data.gpu:
        call = calls.get((g.pid, g.corr))
        if call is None or (device is not None and g.device != device) or (call.pid, call.tid) not in trees:
            continue
        key = (call.pid, call.tid)
        owner = raw_by_time.innermost(trees[key], starts[key], call.start, max(call.end, call.start))
        if owner is not None:
            gpu_ns[owner] += g.end - g.start
    table: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for r in ranges:
        if r.pid not in pids:
            continue
        row = table[_key(r.name)]
        row[0] += 1
        row[1] += (r.end - r.start) - child_ns.get(r, 0)
        row[2] += r.end - r.start
        row[3] += gpu_ns.get(r, 0)
    return {k: (a, b, c, d) for k, (a, b, c, d) in table.items()}


def _rows(summary: Any) -> dict[str, tuple[int, int, int, int]]:
    return {
        r["name"]: (r["calls"], r["self_cpu_ns"], r["cpu_total_ns"], r["self_gpu_ns"])
        for r in summary["rows"]
        if r["name"] != "[no op]"
    }


def _lanes(path: Path) -> dict[tuple[int, int], tuple[int, int, int, int]]:
    """(pid, device) -> (first GPU op start, last end, busy ns, kernels): each rank's GPU lanes."""
    return {
        lane: (min(g.start for g in ops), max(g.end for g in ops), raw_gpu.length([(g.start, g.end) for g in ops]),
               sum(g.kind == "kernel" for g in ops))
        for lane, ops in raw_gpu.lanes(raw_gpu.read(path)).items()
    }  # fmt: skip


@pytest.mark.parametrize("name", [FSDP, RANKS, RANKS_CPU])
def test_each_rank_alone_is_the_raw_table_of_its_process(name: str) -> None:
    path = _path(name)
    pids = raw_ranks(path)
    assert len(pids) == 2
    lanes = _lanes(path)
    for rank, pid in raw_rank_marks.numbered(path, pids):  # a rank mark's rank, else in order
        got = _json("summary", str(path), "--rank", str(rank), "--json", "--limit", "-1", *PEAKS)
        assert _rows(got) == raw_table(path, {pid})
        for r in got["rows"]:  # averages of this rank alone
            assert r["gpu_avg_ns"] == pytest.approx(r["gpu_total_ns"] / r["calls"])
        # the header: this rank's own work on each GPU, the lanes advise reports
        header = {(pid, g["device_id"]): (g["start_ns"], g["end_ns"], g["busy_ns"], g["kernels"]) for g in got["gpu"]}
        assert header == {k: v for k, v in lanes.items() if k[0] == pid}
        if "span_ns" in got["flops"]:  # MFU over this rank's GPU timeline (where ops record FLOPs)
            assert got["flops"]["span_ns"] == sum(v[1] - v[0] for k, v in lanes.items() if k[0] == pid)


def test_device_filter_keeps_the_processes_that_used_it() -> None:
    """The issue's case: summary --device 0 on the FSDP export counted both ranks' aten::copy_
    calls and CPU time (2,524 calls, 335 ms) against rank 0's CUDA time alone (half the true
    average), and listed GPU 1 in its header."""
    path = real_db(FSDP)
    pids = raw_ranks(path)
    for device, pid in enumerate(pids):
        got = _json("summary", str(path), "--device", str(device), "--json", "--limit", "-1")
        want = raw_table(path, {pid}, device)
        assert _rows(got) == want
        copy = next(r for r in got["rows"] if r["name"] == "aten::copy_")
        calls, _, _, cuda = want["aten::copy_"]
        assert (
            copy["calls"]
            == calls
            == raw(
                path,
                f"""SELECT count(*) FROM NVTX_EVENTS AS n LEFT JOIN StringIds AS s
            ON s.id = n.textId WHERE coalesce(n.text, s.value) LIKE 'aten::copy_,%'
            AND (n.globalTid >> 24) & 16777215 = {pid}""",
            )[0][0]
        )
        assert copy["gpu_avg_ns"] == pytest.approx(cuda / calls)
        assert [g["device_id"] for g in got["gpu"]] == [device]
    # the shared GPU of the ranks sample keeps both processes, and its whole device header
    shared = _path(RANKS)
    got = _json("summary", str(shared), "--device", "0", "--json", "--limit", "-1")
    assert _rows(got) == raw_table(shared, set(raw_ranks(shared)), 0)


@pytest.mark.parametrize("name", [FSDP, RANKS])
def test_one_report_of_several_processes_is_per_rank(name: str) -> None:
    """Without a filter: a line (and a JSON entry) per rank with its ops, self CPU and CUDA time
    and GPU lanes, which equal advise's lanes; the table sums the ranks and says so."""
    path = _path(name)
    pids = raw_ranks(path)
    got = _json("summary", str(path), "--json", "--limit", "-1", *PEAKS)
    ranks = got["ranks"]["ranks"]
    assert [(r["rank"], r["process_id"]) for r in ranks] == [(f"rank {i}", p) for i, p in enumerate(pids)]
    advice = _json("advise", str(path), "--json", "--limit", "-1", *PEAKS)
    timeline = {(t["process_id"], t["device_id"]): t for t in advice["timeline"]}
    for r, pid in zip(ranks, pids):
        table = raw_table(path, {pid})
        assert r["ops"] == sum(v[0] for v in table.values())
        assert (r["self_cpu_ns"], r["self_gpu_ns"]) == (
            sum(v[1] for v in table.values()),
            sum(v[3] for v in table.values()),
        )
        for lane in r["lanes"]:
            t = timeline[(pid, lane["device_id"])]
            assert (lane["start_ns"], lane["end_ns"], lane["busy_ns"], lane["startup_ns"]) == (
                t["start_ns"], t["end_ns"], t["busy_ns"], t["startup_ns"]
            )  # fmt: skip
        if "span_ns" in got["flops"][r["rank"]]:
            assert got["flops"][r["rank"]]["span_ns"] == sum(lane["span_ns"] for lane in r["lanes"])
    assert sum(sum(lane["span_ns"] for lane in r["lanes"]) for r in ranks) == advice["span_ns"]
    # MFU per rank: each rank's own model FLOPs and steps, the figures --rank K gives alone
    for i in range(len(pids)):
        alone = _json("summary", str(path), "--rank", str(i), "--json", *PEAKS)
        assert got["flops"][f"rank {i}"] == alone["flops"]
    whole = nvbridge.load(path)
    total = mfu(whole.ops, whole.gpu_ops, resolve(None, peak_tflops=100, peak_gbps=1000))["flops"]
    assert sum(f["flops"] or 0 for f in got["flops"].values()) == (total or 0)
    text = CliRunner().invoke(cli, ["summary", str(path), "--limit", "3"]).stdout
    assert text.startswith(f"2 ranks in {path.name}, one process each:\n  rank 0 (pid {pids[0]}, GPU 0): ")
    assert "The table sums the 2 ranks" in text


def test_a_rank_the_report_lacks_lists_its_ranks() -> None:
    result = CliRunner().invoke(cli, ["summary", str(real_db(FSDP)), "--rank", "2"])
    assert result.exit_code == 2
    assert "Invalid value for --rank: there is no rank 2 in" in result.output and "it has ranks 0, 1" in result.output
    both = CliRunner().invoke(cli, ["summary", str(real_db(FSDP)), "--rank", "0", "--device", "1"])
    assert both.exit_code == 2 and "rank 0 ran no GPU work on GPU 1" in both.output


def test_rank_of_a_partitioned_dataset_is_its_report(tmp_path: Path) -> None:
    """One-process reports take their recorded rank (here from the file name)."""
    import shutil

    sources = []
    for rank, name in enumerate(["cnn_cpu+synthetic_gpu.sqlite", "diff_base_cpu+synthetic_gpu.sqlite"]):
        dest = tmp_path / f"train_rank{rank}.sqlite"
        shutil.copyfile(SAMPLE_DB / name, dest)
        sources.append(dest)
    nvbridge.convert(sources, tmp_path / "ds")
    got = _json("summary", str(tmp_path / "ds"), "--rank", "1", "--json", "--limit", "-1")
    own = _json("summary", str(sources[1]), "--json", "--limit", "-1")
    assert got["rows"] == own["rows"] and got["ranks"] is None
    assert [g["report"] for g in got["gpu"]] == ["train_rank1.sqlite"]


def test_report_key_averages_takes_the_same_filters() -> None:
    report = nvbridge.load(real_db(FSDP))
    for rank, device in ((1, None), (None, 0)):
        rows = report.key_averages(rank=rank, device=device, unattributed=True).sorted(row_limit=-1).to_pylist()
        got = nvbridge.summarize(real_db(FSDP), rank=rank, device=device).averages.sorted(row_limit=-1).to_pylist()
        assert rows == got


def _range_count(path: Path, pid: int) -> int:
    """NVTX ranges of ``pid`` (every kind nvbridge makes an op of), by raw SQL."""
    if raw(path, "SELECT 1 FROM sqlite_master WHERE name = 'NVTX_EVENTS'"):
        return int(
            raw(
                path,
                "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71) "
                f"AND (globalTid >> 24) & 16777215 = {pid}",
            )[0][0]
        )
    return sum(r.pid == pid for r in raw_by_time.ranges(path))


@pytest.mark.parametrize("name", raw_gpu.EVERY)
def test_every_rank_of_every_report_keeps_its_own(name: str) -> None:
    """On every real export and sample, each rank alone: its ops, its GPU time (in its ops and in
    [no op]: launched outside every range of its thread) and its lanes, against raw rows."""
    path = _path(name)
    pids = raw_ranks(path)
    if not pids:
        result = CliRunner().invoke(cli, ["summary", str(path), "--rank", "0"])
        assert result.exit_code == 2 and "it has no ranks" in result.output
        return
    data = raw_gpu.read(path)
    trees = raw_by_time.tree_ranges(raw_by_time.ranges(path))
    starts = {k: [r.start for r in v] for k, v in trees.items()}
    calls = data.call_of()
    lanes = _lanes(path)
    for rank, pid in raw_rank_marks.numbered(path, pids):  # a rank mark's rank, else in order
        got = _json("summary", str(path), "--rank", str(rank), "--json", "--limit", "-1", *PEAKS)
        rows = {r["name"]: r for r in got["rows"]}
        no_op = rows.pop("[no op]", None)
        assert sum(r["calls"] for r in rows.values()) == _range_count(path, pid)
        mine = [g for g in data.gpu if g.pid == pid]
        outside = 0
        for g in mine:
            call = calls.get((g.pid, g.corr)) if g.known_pid else None
            owner = None
            if call is not None and (call.pid, call.tid) in trees:
                key = (call.pid, call.tid)
                owner = raw_by_time.innermost(trees[key], starts[key], call.start, max(call.end, call.start))
            if owner is None:
                outside += g.end - g.start
        assert sum(r["self_gpu_ns"] for r in rows.values()) == sum(g.end - g.start for g in mine) - outside
        assert (no_op["self_gpu_ns"] if no_op else 0) == outside
        header = {(pid, g["device_id"]): (g["start_ns"], g["end_ns"], g["busy_ns"], g["kernels"]) for g in got["gpu"]}
        assert header == {k: v for k, v in lanes.items() if k[0] == pid}
