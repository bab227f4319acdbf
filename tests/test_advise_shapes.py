"""advise on the shapes a report comes in: tables built here (small copies in a loop), a dataset
written before memory kinds, partitioned datasets (report by report, the slowest rank per step),
reports without GPU work or without GPU ops, every real export within 100 columns; and the
interval sets advise computes with, against a boolean timeline. tests/test_advise.py checks each
finding kind against raw SQL.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

import nvbridge
from nvbridge.analysis import spans
from nvbridge.analysis.advise import advise, advise_report
from nvbridge.cli import cli
from tests import raw_gpu
from tests.advise_reference import ADVISE, FSDP, _of, raw
from tests.conftest import ALL_FILES, SAMPLE_DB, real_db
from tests.raw_gpu import length


def _built_report(copies: int) -> nvbridge.Report:
    """A hand-built report (not a recording): one aten::index op on pid 7 making ``copies``
    small pinned HtoD copies, each by its own cudaMemcpyAsync call, plus one kernel after."""
    import pyarrow as pa

    n = copies
    call_s = [1_000 + 10_000 * i for i in range(n)]
    ops = pa.table(
        {
            "op_id": [0],
            "parent_id": pa.array([None], pa.int64()),
            "name": ["aten::index"],
            "op_name": ["aten::index"],
            "module_path": pa.array([None], pa.string()),
            "process_id": [7],
            "thread_id": [7],
            "start_ns": [0],
            "end_ns": [10_000 * n + 50_000],
            "step": pa.array([None], pa.int64()),
        }
    )
    api = pa.table(
        {
            "api_call_id": list(range(n + 1)),
            "op_id": [0] * (n + 1),
            "name": ["cudaMemcpyAsync_v3020"] * n + ["cudaLaunchKernel_v7000"],
            "process_id": [7] * (n + 1),
            "thread_id": [7] * (n + 1),
            "start_ns": call_s + [10_000 * n + 1_000],
            "end_ns": [s + 4_000 for s in call_s] + [10_000 * n + 5_000],
        }
    )
    gpu = pa.table(
        {
            "gpu_op_id": list(range(n + 1)),
            "op_id": [0] * (n + 1),
            "api_call_id": list(range(n + 1)),
            "kind": ["memcpy"] * n + ["kernel"],
            "name": ["Memcpy HtoD"] * n + ["k"],
            "device_id": [0] * (n + 1),
            "stream_id": [7] * (n + 1),
            "process_id": [7] * (n + 1),
            "thread_id": [7] * (n + 1),
            "start_ns": [s + 2_000 for s in call_s] + [10_000 * n + 3_000],
            "end_ns": [s + 3_000 for s in call_s] + [10_000 * n + 9_000],
            "bytes": [256] * n + [None],
            "copy_kind": ["HtoD"] * n + [None],
            "src_kind": ["pinned"] * n + [None],
            "dst_kind": ["device"] * n + [None],
        }
    )
    syncs = pa.table(
        {
            "start_ns": pa.array([], pa.int64()),
            "end_ns": pa.array([], pa.int64()),
            "device_id": pa.array([], pa.int64()),
            "stream_id": pa.array([], pa.int64()),
            "sync_type": pa.array([], pa.string()),
            "api_call_id": pa.array([], pa.int64()),
        }
    )
    empty = pa.table({"x": pa.array([], pa.int64())})
    return nvbridge.Report(
        {"source": "built"},
        {
            "ops": ops,
            "gpu_ops": gpu,
            "api_calls": api,
            "marks": empty,
            "syncs": syncs,
            "threads": empty,
            "devices": empty,
        },
    )


def test_small_copies_in_a_loop_on_built_tables() -> None:
    # no real export has them: 10+ sub-64 KiB copies from one op; time at stake = their calls
    report = _built_report(12)
    (found,) = _of(advise_report(report), "small_copies")
    assert (found.op, found.count, dict(found.figures)["bytes"]) == ("aten::index", 12, 12 * 256)
    g = report.gpu_ops.to_pydict()
    timeline = [(min(g["start_ns"]), max(g["end_ns"]))]  # the lane's: first to last GPU op
    calls = [(1_000 + 10_000 * i, 5_000 + 10_000 * i) for i in range(12)]
    assert found.own_ns == length(raw_gpu.intersect(calls, timeline)) == 12 * 4_000 - (timeline[0][0] - 1_000)
    assert _of(advise_report(_built_report(9)), "small_copies") == []


def test_a_dataset_written_before_memory_kinds_still_advises() -> None:
    report = nvbridge.load(real_db(FSDP))
    tables = {name: getattr(report, name) for name in ("ops", "api_calls", "marks", "syncs", "threads", "devices")}
    old = nvbridge.Report(report.meta, {**tables, "gpu_ops": report.gpu_ops.drop_columns(["src_kind", "dst_kind"])})
    advice = advise_report(old)
    # a copy followed by a sync is still a blocking copy: the calls say so, not the memory kinds
    assert _of(advice, "pageable_copy") == [] and len(_of(advice, "blocking_copy_sync")) == 1


def test_partitioned_dataset_is_advised_report_by_report(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    nvbridge.convert([ADVISE, SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite"], out)
    result = CliRunner().invoke(cli, ["advise", str(out), "--json", "--min-share", "1"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)["reports"]  # one object for the dataset (docs/advise.md)
    assert [d["source"] for d in data] == ["advise_cpu+synthetic_gpu.sqlite", "cnn_cpu+synthetic_gpu.sqlite"]
    for d in data:
        assert all(f["time_ns"] >= 0.01 * d["span_ns"] for f in d["findings"])
        assert sum(f["time_ns"] for f in d["findings"]) <= d["at_stake_ns"]


intervals = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12)).map(lambda x: (x[0], x[0] + x[1])), max_size=8)


@given(intervals, intervals, intervals)
def test_interval_sets_agree_with_a_boolean_timeline(
    a: list[tuple[int, int]], b: list[tuple[int, int]], c: list[tuple[int, int]]
) -> None:
    def mask(xs: list[tuple[int, int]]) -> np.ndarray:
        m = np.zeros(80, bool)
        for s, e in xs:
            m[s:e] = True
        return m

    def arr(xs: list[tuple[int, int]]) -> spans.Spans:
        return spans.union(np.array([s for s, _ in xs], np.int64), np.array([e for _, e in xs], np.int64))

    ua, ub = arr(a), arr(b)
    assert spans.length(ua) == mask(a).sum()
    assert spans.overlap(ua, ub) == (mask(a) & mask(b)).sum()
    rest = spans.minus(ua, ub)
    assert (mask(list(zip(*rest))) == (mask(a) & ~mask(b))).all()
    both = spans.add_disjoint(ub, rest)  # b plus what a adds: a union b, kept sorted
    assert (mask(list(zip(*both))) == (mask(a) | mask(b))).all() and (np.diff(both[0]) >= 0).all()
    windows = spans.union(np.array([s for s, _ in c], np.int64), np.array([e for _, e in c], np.int64))
    per = spans.clip_per_window(both, *windows)
    assert per.tolist() == [(mask(a) | mask(b))[s:e].sum() for s, e in zip(*windows)]


def test_partitioned_dataset_names_the_slowest_rank_per_step(tmp_path: Path) -> None:
    import shutil

    files = [SAMPLE_DB / "diff_base_cpu+synthetic_gpu.sqlite", SAMPLE_DB / "diff_extra_cpu+synthetic_gpu.sqlite"]
    ranks = []
    for r, f in enumerate(files):  # the rank comes from the file name
        ranks.append(tmp_path / f"rank{r}.sqlite")
        shutil.copyfile(f, ranks[-1])
    out = tmp_path / "ds"
    nvbridge.convert(ranks, out)
    steps = [
        {t: (d, e) for t, d, e in raw(f, "SELECT text, end - start, end FROM NVTX_EVENTS WHERE text LIKE 'Prof%'")}
        for f in files
    ]
    timelines = [
        raw(
            f,
            "SELECT min(start), max(end) FROM (SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL "
            "UNION ALL SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY)",
        )
        for f in files
    ]
    # per rank: its lead over the other rank at the end of the steps it was slowest in, inside
    # its GPU timeline (first to last GPU op)
    expected: dict[int, int] = defaultdict(int)
    for text in steps[0]:
        slow = 0 if steps[0][text][0] > steps[1][text][0] else 1
        end = steps[slow][text][1]
        lead = [(end - abs(steps[0][text][0] - steps[1][text][0]), end)]
        expected[slow] += length(raw_gpu.intersect(lead, timelines[slow]))
    advice = advise(out)
    for r, a in enumerate(advice):
        found = _of(a, "rank_skew")
        assert sum(f.own_ns for f in found) == expected[r]
        assert all(f.lanes == (f"rank {r} GPU 0",) for f in found)
    assert sum(expected.values()) > 0


def test_cli_on_a_report_without_gpu_work_says_so() -> None:
    result = CliRunner().invoke(cli, ["advise", str(SAMPLE_DB / "cnn_cpu.sqlite")])
    assert result.exit_code == 0 and "No GPU work in this report" in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 100


@pytest.mark.parametrize("name", ALL_FILES)
def test_every_real_export_advises_within_100_columns(name: str) -> None:
    result = CliRunner().invoke(cli, ["advise", str(real_db(name)), "--limit", "-1", "--steps", "-1"])
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 100


def test_a_report_with_cuda_calls_but_no_gpu_ops_advises_nothing() -> None:
    """API calls traced without their GPU activity (the FSDP export with its GPU ops removed):
    its 30 stream syncs have no GPU timeline to cost; before, advise failed on them."""
    report = nvbridge.load(real_db(FSDP))
    tables = {name: getattr(report, name) for name in ("ops", "api_calls", "marks", "syncs", "threads", "devices")}
    advice = advise_report(nvbridge.Report(report.meta, {**tables, "gpu_ops": report.gpu_ops.slice(0, 0)}))
    assert (advice.span_ns, advice.findings, advice.lanes, advice.waits) == (0, (), (), ())
