"""GPU work launched from a thread with no open range (torch's autograd device thread, pin-memory,
DataLoader and NCCL threads) is attributed by time to the range another thread of its process had
open (issue 25, item 5): gpu_ops.time_op_id and ops.time_* against raw SQL on every real export
and sample, the planted autograd shape, streamed in tiny windows, beside the thread-exact columns.
"""

from __future__ import annotations

import importlib
import json
import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest

import nvbridge
from nvbridge.engine import BY_TIME
from tests import raw_by_time
from tests.conftest import SAMPLE_DB
from tests.raw_gpu import EVERY, path_of

AUTOGRAD = SAMPLE_DB / "autograd_thread_ranges+synthetic_gpu.sqlite"
pipeline = importlib.import_module("nvbridge.conversion.pipeline")
whole_mod = importlib.import_module("nvbridge.readers.whole")


def _identity(ops: dict[str, list[object]], i: int) -> tuple[object, ...]:
    return (ops["process_id"][i], ops["thread_id"][i], ops["start_ns"][i], ops["name"][i])


@pytest.mark.parametrize("name", EVERY)
def test_attribution_by_time_is_the_raw_rule(name: str) -> None:
    path = path_of(name)
    want = raw_by_time.by_time(path)
    report = nvbridge.load(path)
    ops = report.ops.select(["op_id", "process_id", "thread_id", "start_ns", "name", "time_self_gpu_ns"])
    cols = ops.to_pydict()
    g = report.gpu_ops.select(["process_id", "correlation_id", "op_id", "time_op_id", "flags", "start_ns", "end_ns"])
    got = {}
    own_ns: dict[tuple[object, ...], int] = defaultdict(int)
    for pid, corr, op, t, flags, s, e in zip(*g.to_pydict().values()):
        assert bool(flags & BY_TIME) == (t is not None)
        if t is not None:
            assert op is None  # only what the thread-exact rule left out
            got[(pid, corr)] = _identity(cols, t)
            own_ns[_identity(cols, t)] += e - s
    assert got == {k: (r.pid, r.tid, r.start, r.name) for k, r in want.items()}
    have = {_identity(cols, i): ns for i, ns in enumerate(cols["time_self_gpu_ns"]) if ns}
    assert have == dict(own_ns)


def test_backward_work_of_the_autograd_thread_lands_in_backward() -> None:
    """The planted shape: each step's backward kernels are launched by pt_autograd_0, which has no
    range, while the main thread waits inside "Backward" (and a monitor thread has its own range
    open): by raw SQL interval arithmetic, each Backward range gets the kernels whose launching
    call lies inside it, none of it in self_gpu_ns, and [no op] keeps only the pin thread's copies."""
    con = sqlite3.connect(f"file:{AUTOGRAD}?mode=ro", uri=True)
    thread = dict(
        con.execute(
            "SELECT s.value, t.globalTid FROM ThreadNames AS t JOIN StringIds AS s ON s.id = t.nameId "
            "WHERE s.value IN ('pt_autograd_0', 'pt_data_pin', 'monitor')"
        ).fetchall()
    )
    backward = con.execute(
        """SELECT b.start, sum(k.end - k.start), count(*) FROM NVTX_EVENTS AS b
           JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r ON r.globalTid = ? AND r.start >= b.start AND r.end <= b.end
           JOIN CUPTI_ACTIVITY_KIND_KERNEL AS k ON k.correlationId = r.correlationId
           WHERE b.text = 'Backward' GROUP BY b.start ORDER BY b.start""",
        (thread["pt_autograd_0"],),
    ).fetchall()
    pinned = con.execute(
        "SELECT sum(m.end - m.start), count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r JOIN CUPTI_ACTIVITY_KIND_MEMCPY"
        " AS m ON m.correlationId = r.correlationId WHERE r.globalTid = ?",
        (thread["pt_data_pin"],),
    ).fetchone()
    monitor_open = con.execute(
        """SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r JOIN NVTX_EVENTS AS m ON m.globalTid = ?
           AND m.start <= r.start AND r.end <= m.end WHERE r.globalTid = ?""",
        (thread["monitor"], thread["pt_autograd_0"]),
    ).fetchone()[0]
    con.close()
    assert len(backward) == 3 and all(n > 0 for _, _, n in backward) and monitor_open > 0
    ops = nvbridge.load(AUTOGRAD).ops.to_pandas()
    b = ops[ops.name == "Backward"].sort_values("start_ns")
    assert list(zip(b.start_ns, b.time_self_gpu_ns, b.time_gpu_op_count)) == backward
    assert (b.self_gpu_ns == 0).all()
    assert (ops[ops.name == "monitor"].time_self_gpu_ns == 0).all()  # the main thread's range wins the tie
    steps = ops[ops.name.str.startswith("ProfilerStep#")]
    assert steps.time_total_gpu_ns.sum() == sum(ns for _, ns, _ in backward)
    gpu = nvbridge.load(AUTOGRAD).gpu_ops.to_pandas()
    left = gpu[gpu.op_id.isna() & gpu.time_op_id.isna()]
    assert ((left.end_ns - left.start_ns).sum(), len(left)) == pinned


@pytest.mark.parametrize("rows", [2, 3, 5])
def test_tiny_windows_give_the_one_window_attribution(
    rows: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Backward ranges cut by windows carry their attribution across the cut."""
    whole = nvbridge.load(AUTOGRAD)  # one window: the sample is smaller than WINDOW_ROWS
    monkeypatch.setattr(pipeline, "WINDOW_ROWS", rows)

    def no_whole(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the report fell back to the one-window conversion")

    monkeypatch.setattr(whole_mod, "OneWindow", no_whole)
    nvbridge.convert(AUTOGRAD, tmp_path / "out")
    streamed = nvbridge.load(tmp_path / "out")
    assert streamed.ops.num_rows > 2 * rows  # several windows of ranges (and more of marks)
    for table, columns in (
        ("ops", ["time_self_gpu_ns", "time_total_gpu_ns", "time_gpu_op_count", "self_gpu_ns"]),
        ("gpu_ops", ["time_op_id", "op_id", "flags"]),
    ):
        for c in columns:
            assert streamed.table(table).column(c).to_pylist() == whole.table(table).column(c).to_pylist(), c


def test_the_rule_on_hand_built_threads() -> None:
    """Each branch of the rule (docs/dataset.md, gpu_ops.time_op_id), on a hand-built profile."""
    from nvbridge.engine import check, correlate
    from tests.hand_built import _api, _kernel, _range, profile

    ranges = [
        _range(0, 100, "main", tid=10, pid=10),  # process 10: its main thread (tid = pid) wins
        _range(20, 80, "late", tid=11, pid=10),
        _range(30, 60, "late inner", tid=11, pid=10),
        _range(0, 100, "A", tid=21, pid=20),  # process 20: no main thread; the latest start wins
        _range(10, 90, "B", tid=22, pid=20),
        _range(0, 100, "C", tid=32, pid=30),  # process 30: equal ranges; the lower thread
        _range(0, 100, "D", tid=31, pid=30),
    ]
    calls = [  # (start, end, correlation id, thread, process) -> the range by time, or None
        ((40, 41, 1, 12, 10), "main"),
        ((50, 51, 2, 23, 20), "B"),
        ((50, 51, 3, 33, 30), "D"),
        ((95, 105, 4, 12, 10), None),  # ends after every range of its process
        ((150, 151, 5, 12, 10), None),  # nothing open
        ((50, 51, 6, 41, 40), None),  # another process's ranges never count
        ((35, 36, 7, 11, 10), None),  # its own thread's range takes it, thread-exact
    ]
    api = [_api(s, e, c, tid=t, pid=p) for (s, e, c, t, p), _ in calls]
    gpu = [_kernel(200 + 10 * c, 205 + 10 * c, c, pid=p) for (_, _, c, _, p), _ in calls]
    model = correlate(profile(ranges, api, gpu))
    check(model)
    names = model.ops.column("name").to_pylist()
    by_corr = dict(
        zip(model.gpu_ops.column("correlation_id").to_pylist(), model.gpu_ops.column("time_op_id").to_pylist())
    )
    assert {c: names[t] if t is not None else None for c, t in by_corr.items()} == {
        c: want for (_, _, c, _, _), want in calls
    }
    exact = dict(zip(model.gpu_ops.column("correlation_id").to_pylist(), model.gpu_ops.column("op_id").to_pylist()))
    assert names[exact[7]] == "late inner"
    ops = {r["name"]: r for r in model.ops.to_pylist()}
    assert (ops["main"]["time_self_gpu_ns"], ops["main"]["time_total_gpu_ns"], ops["main"]["self_gpu_ns"]) == (5, 5, 0)
    assert ops["late"]["time_total_gpu_ns"] == 0 and ops["late"]["total_gpu_ns"] == 5


def test_summary_names_who_launched_the_no_op_row() -> None:
    """summary lists the work attributed by time beside each op name's own, and the rest of
    [no op] by launching thread, named from the threads table; by raw SQL on the planted shape."""
    from click.testing import CliRunner

    from nvbridge.analysis import format_time
    from nvbridge.cli import cli

    con = sqlite3.connect(f"file:{AUTOGRAD}?mode=ro", uri=True)
    by_thread = dict(
        con.execute(
            """SELECT s.value, sum(g.end - g.start) FROM ThreadNames AS t JOIN StringIds AS s ON s.id = t.nameId
               JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r ON r.globalTid = t.globalTid
               JOIN (SELECT correlationId, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL
                     SELECT correlationId, start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY) AS g
                 ON g.correlationId = r.correlationId GROUP BY s.value"""
        ).fetchall()
    )
    con.close()
    result = CliRunner().invoke(cli, ["summary", str(AUTOGRAD), "--json"])
    assert result.exit_code == 0, result.output
    launches = json.loads(result.stdout)["launches"]
    assert [(b["name"], b["own_ns"], b["by_time_ns"]) for b in launches["by_time"]] == [
        ("Backward", 0, by_thread["pt_autograd_0"])
    ]
    assert [t["name"] for t in launches["by_time"][0]["threads"]] == ["pt_autograd_0"]
    assert [(t["name"], t["gpu_ns"]) for t in launches["left"]] == [("pt_data_pin", by_thread["pt_data_pin"])]
    assert launches["no_op_ns"] == by_thread["pt_autograd_0"] + by_thread["pt_data_pin"]
    text = CliRunner().invoke(cli, ["summary", str(AUTOGRAD)]).stdout
    line = f"  Backward: 0.000us own + {format_time(by_thread['pt_autograd_0'] / 1e3)} launched by pt_autograd_0"
    assert line + " while it was open" in text
