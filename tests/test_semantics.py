"""Forward -> backward links, module paths and inherited shapes."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

import nvbridge
from nvbridge.engine import correlate, names
from tests.conftest import SAMPLE_DB, raw, real_db
from tests.hand_built import _range, profile
from tests.nvtx_inject.exact import compatible


def _linked_share(report: nvbridge.Report) -> tuple[int, int, list[str]]:
    """Backward nodes whose seq some forward op carries, and how many of them link. (CopySlices
    nodes of in-place writes into a slice carry a seq no op ran with: torch links none either.)"""
    ops = report.df("ops")
    forward_seqs = set(ops[~ops.is_backward & ops.seq.notna()].seq)
    nodes = ops[ops.is_backward & ops.seq.notna() & ops.seq.isin(forward_seqs)]
    missing = nodes[nodes.fwd_op_id.isna()]
    return len(nodes), len(nodes) - len(missing), list(missing["name"])


def test_nvprof_torch14_backward_nodes_all_link() -> None:
    path = real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite")
    report = nvbridge.load(path)
    nodes, linked, missing = _linked_share(report)
    # Independent count: backward node ranges (class names ending in Backward) with a seq.
    strings = {key: str(value) for key, value in raw(path, "SELECT _id_, value FROM StringTable")}
    expected = sum(
        1
        for (n,) in raw(path, "SELECT name FROM CUPTI_ACTIVITY_KIND_MARKER WHERE flags = 2")
        if strings[n].split(",")[0].rstrip("0123456789").endswith(("Backward", "Backwards"))
        and ", seq = " in strings[n]
    )
    assert nodes == expected == 61
    assert linked == nodes and missing == []
    ops = report.df("ops").set_index("op_id")
    for row in ops[ops.fwd_op_id.notna()].itertuples():
        fwd = ops.loc[int(row.fwd_op_id)]
        assert fwd.seq == row.seq and not fwd.is_backward
        assert fwd.start_ns < row.start_ns
        assert fwd.thread_id != row.thread_id  # torch 1.4 ran backward on the autograd thread


def test_fsdp_report_has_no_backward_nodes_to_link() -> None:
    """The 2026.2 FSDP capture holds forward passes only: the rule must not invent links."""
    report = nvbridge.load(real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"))
    assert _linked_share(report) == (0, 0, [])
    assert report.ops.column("fwd_op_id").null_count == report.ops.num_rows


@pytest.mark.parametrize(
    "sample", sorted(p.name for p in SAMPLE_DB.glob("*_cpu*.sqlite")) or ["<none>"]
)  # the torch loops
def test_sample_recordings_link_99_percent(sample: str) -> None:
    path = SAMPLE_DB / sample
    if not path.is_file():
        pytest.fail("sample_db/ holds no recordings; scripts/record/samples.sh makes them")
    nodes, linked, missing = _linked_share(nvbridge.load(path))
    assert nodes > 0
    assert linked >= 0.99 * nodes, missing


def test_fwd_tid_makes_the_link_exact() -> None:
    """Two forward threads reuse seq 5; fwd_tid picks the right one, later start or not."""
    model = correlate(
        profile(
            [
                _range(0, 10, "aten::mm, seq = 5, op_id = 1", tid=1),
                _range(20, 30, "aten::mm, seq = 5, op_id = 2", tid=2),
                _range(40, 50, "MmBackward0, stashed seq = 5, fwd_tid = 1", tid=3),
                _range(60, 70, "MmBackward0, seq = 5", tid=3),
            ],
            [],
            [],
        )
    )
    rows = model.ops.to_pylist()
    by_id = {r["torch_op_id"]: r["op_id"] for r in rows if r["torch_op_id"]}
    assert rows[2]["fwd_op_id"] == by_id[1]  # exact: thread 1 although thread 2 started later
    # No fwd_tid: both threads' mm fits MmBackward0 and neither ran the node: left empty, not guessed.
    assert rows[3]["fwd_op_id"] is None


def test_latest_op_with_the_seq_is_the_forward_op() -> None:
    """torch.profiler's fwdbwd flow for AddmmBackward0 starts at aten::addmm, not at the linear
    holding it (seen in every test_annotate_exact reference run)."""
    model = correlate(
        profile(
            [
                _range(0, 10, "aten::linear, seq = 7, op_id = 1"),
                _range(2, 8, "aten::addmm, seq = 7, op_id = 2, sizes = [[3], [2, 4]]"),
                _range(20, 30, "AddmmBackward0, seq = 7", tid=2),
            ],
            [],
            [],
        )
    )
    rows = model.ops.to_pylist()
    assert rows[2]["fwd_op_id"] == rows[1]["op_id"]


def test_backward_inherits_module_and_shapes() -> None:
    model = correlate(
        profile(
            [
                _range(0, 100, "nn.Module: encoder.layers.0 (Linear)"),
                _range(10, 20, "aten::addmm, seq = 9, op_id = 1, sizes = [[4], [2, 3], [3, 4]]"),
                _range(200, 210, "AddmmBackward0, stashed seq = 9, fwd_tid = 1", tid=2),
                _range(202, 208, "aten::mm, op_id = 5", tid=2),
                _range(300, 310, "ProfilerStep#4", tid=3),
                _range(301, 302, "user range", tid=3),
            ],
            [],
            [],
        )
    )
    rows = {r["name"].split(",")[0]: r for r in model.ops.to_pylist()}
    assert rows["aten::addmm"]["module_path"] == "encoder.layers.0"
    assert rows["AddmmBackward0"]["module_path"] == "encoder.layers.0"
    assert rows["AddmmBackward0"]["input_shapes"] == "[[4], [2, 3], [3, 4]]"
    assert rows["AddmmBackward0"]["is_backward"] and not rows["aten::mm"]["is_backward"]
    assert rows["user range"]["step"] == 4 and rows["aten::addmm"]["step"] is None


def test_pyprof_stack_reaches_the_ops_inside(tmp_path: Path) -> None:
    ops = nvbridge.load(real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite")).df("ops")
    emb = ops[ops["name"] == "embedding, seq = 65"].iloc[0]
    assert list(emb["stack"])[:2] == ["language-model.py:319", "language-model.py:261"]


def _links(ranges: list[tuple[int, int, str, int]]) -> dict[str, str | None]:
    """Backward range name -> name of the forward op it links to (None: no link)."""
    rows = correlate(profile([_range(a, b, name, tid=t) for a, b, name, t in ranges], [], [])).ops.to_pylist()
    by_op = {r["op_id"]: r["name"] for r in rows}
    return {r["name"]: by_op.get(r["fwd_op_id"]) for r in rows if r["is_backward"] and r["seq"] is not None}


def test_torch_names_on_colliding_threads_link_only_where_decided() -> None:
    """torch's native names (no fwd_tid), two threads whose seq counters collide.

    Expected links are written from the workload's structure, not from our output: each thread
    ran linear (t, addmm) and sum; thread 2 also ran relu with seq 7 where thread 1 ran add_.
    """
    links = _links(
        [
            (0, 50, "aten::linear, seq = 6, op_id = 1", 1),
            (1, 10, "aten::t, seq = 6, op_id = 2", 1),
            (11, 40, "aten::addmm, seq = 7, op_id = 3", 1),
            (51, 60, "aten::add_, seq = 8, op_id = 4", 1),
            (5, 55, "aten::linear, seq = 6, op_id = 5", 2),
            (6, 15, "aten::t, seq = 6, op_id = 6", 2),
            (16, 45, "aten::addmm, seq = 7, op_id = 7", 2),
            (56, 66, "aten::relu, seq = 8, op_id = 8", 2),
            # thread 2 runs its own backward (CPU engine: on the calling thread)
            (100, 110, "ReluBackward0, seq = 8, op_id = 9", 2),
            (111, 120, "AddmmBackward0, seq = 7, op_id = 10", 2),
            (121, 130, "TBackward0, seq = 6, op_id = 11", 2),
            # a device thread runs thread 1's nodes: one fitting op on one thread decides AddBackward0
            (200, 210, "AddBackward0, seq = 8, op_id = 12", 3),
            (211, 220, "AddmmBackward0, seq = 7, op_id = 13", 3),
        ]
    )
    assert links == {
        "ReluBackward0, seq = 8, op_id = 9": "aten::relu, seq = 8, op_id = 8",  # add_ (thread 1) does not fit
        "AddmmBackward0, seq = 7, op_id = 10": "aten::addmm, seq = 7, op_id = 7",  # its own thread
        "TBackward0, seq = 6, op_id = 11": "aten::t, seq = 6, op_id = 6",  # latest op with the seq: t
        "AddBackward0, seq = 8, op_id = 12": "aten::add_, seq = 8, op_id = 4",  # relu does not fit
        "AddmmBackward0, seq = 7, op_id = 13": None,  # both threads' addmm fit: undecided
    }


def test_nodes_named_by_the_observer_are_backward_whatever_their_class() -> None:
    """CopySlices carries fwd_tid: it is a backward node (linked), never a forward candidate."""
    links = _links(
        [
            (0, 10, "aten::copy_, seq = 3, op_id = 1", 1),
            (20, 30, "torch::autograd::CopySlices, seq = 3, op_id = 2, fwd_tid = 1", 1),
            (40, 50, "CopyBackwards, seq = 3, op_id = 3, fwd_tid = 1", 1),
        ]
    )
    assert links == {
        "torch::autograd::CopySlices, seq = 3, op_id = 2, fwd_tid = 1": "aten::copy_, seq = 3, op_id = 1",
        "CopyBackwards, seq = 3, op_id = 3, fwd_tid = 1": "aten::copy_, seq = 3, op_id = 1",
    }


OBSERVER_SAMPLES = sorted(p.name for p in SAMPLE_DB.glob("observer_*.sqlite"))
_NAME = re.compile(
    r"^(?P<name>.*?)(?:, seq = (?P<seq>\d+))?, op_id = \d+(?:, fwd_tid = (?P<tid>\d+))?(?:, sizes = \[.*\])?$"
)


def _raw_ranges(path: Path) -> list[tuple[int, int, int, str]]:
    """(tid, start, end, name) of every push/pop range, straight from NVTX_EVENTS (no reader)."""
    rows = raw(
        path,
        "SELECT n.globalTid, n.start, n.end, COALESCE(n.text, s.value) FROM NVTX_EVENTS n "
        "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59 ORDER BY n.start",
    )
    return [(int(str(g)) & 0xFFFFFF, int(str(a)), int(str(b)), str(t)) for g, a, b, t in rows]


def _expected_links(ranges: list[tuple[int, int, int, str]]) -> dict[tuple[int, int], tuple[int, int] | None]:
    """Backward node (tid, start) -> the forward op torch.profiler would link: the latest op with
    the node's seq on thread fwd_tid that started before it."""
    latest: dict[tuple[int, int], tuple[int, int]] = {}
    out: dict[tuple[int, int], tuple[int, int] | None] = {}
    for tid, start, _, name in ranges:
        m = _NAME.match(name)
        if m is None or m["seq"] is None:
            continue
        key = (int(m["tid"]) if m["tid"] else tid, int(m["seq"]))
        if m["tid"]:
            out[(tid, start)] = latest.get(key)
        else:
            latest[key] = (tid, start)
    return out


def _converted(ranges: list[dict[str, object]]) -> dict[tuple[int, int], tuple[int, int] | None]:
    rows = correlate(profile(ranges, [], [])).ops.to_pylist()
    place = {r["op_id"]: (r["thread_id"], r["start_ns"]) for r in rows}
    return {
        place[r["op_id"]]: place.get(r["fwd_op_id"])
        for r in rows
        if r["is_backward"] and r["seq"] is not None and not r["name"].startswith(names.EVALUATE)
    }


@pytest.mark.parametrize("sample", OBSERVER_SAMPLES or ["<none>"])
def test_observer_recordings_link_as_torch_does(sample: str) -> None:
    """Real nsys recordings of the observer backend (scripts/record/samples.sh): every backward
    node links to the op computed here from raw SQL; with fwd_tid removed (torch's own names),
    no link differs from it."""
    path = SAMPLE_DB / sample
    if not path.is_file():
        pytest.fail("sample_db/ holds no observer recordings; scripts/record/samples.sh makes them")
    ranges = _raw_ranges(path)
    expected = _expected_links(ranges)
    assert sum(v is not None for v in expected.values()) >= 20
    ops = nvbridge.load(path).df("ops")
    place = {row.op_id: (row.thread_id, row.start_ns) for row in ops.itertuples()}
    nodes = ops[ops.name.str.contains(", fwd_tid = ", regex=False)]
    got = {
        place[r.op_id]: place.get(int(r.fwd_op_id)) if r.fwd_op_id == r.fwd_op_id else None for r in nodes.itertuples()
    }
    assert got == expected

    stripped = [_range(a, b, re.sub(r", fwd_tid = \d+", "", name), tid=tid) for tid, a, b, name in ranges]
    guessed = _converted(stripped)
    assert set(guessed) == set(expected)
    assert {k: v for k, v in guessed.items() if v is not None and v != expected[k]} == {}
    decidable = _one_fitting_op(ranges)
    assert sum(guessed[k] is not None for k in decidable) >= 0.99 * len(decidable) > 0


def _one_fitting_op(ranges: list[tuple[int, int, int, str]]) -> list[tuple[int, int]]:
    """Nodes for which exactly one thread's latest op with the node's seq fits the node's name
    (by the test harness's own rule, tests/nvtx_inject/exact.compatible)."""
    latest: dict[tuple[int, int], str] = {}
    out = []
    for tid, start, _, name in ranges:
        m = _NAME.match(name)
        if m is None or m["seq"] is None:
            continue
        seq = int(m["seq"])
        if not m["tid"]:
            latest[(tid, seq)] = m["name"]
        elif sum(compatible(op, m["name"]) for (_, s), op in latest.items() if s == seq) == 1:
            out.append((tid, start))
    return out


def test_observer_names_parse_whole() -> None:
    """The observer's backward node name: seq, fwd_tid and sizes all read, and it is backward."""
    table = names.parse(
        pa.array(
            [
                "AddmmBackward0, seq = 1, op_id = 61, fwd_tid = 23949, sizes = [[4, 6]]",
                "torch::autograd::CopySlices, seq = 11, op_id = 81, fwd_tid = 23949, sizes = [[4, 6]]",
                "aten::stack, seq = 2, op_id = 11, sizes = [[2, 3], [2, 3], []]",
            ]
        )
    ).to_pylist()
    assert [
        (r["op_name"], r["seq"], r["torch_op_id"], r["fwd_tid"], r["input_shapes"], r["is_backward"]) for r in table
    ] == [
        ("AddmmBackward0", 1, 61, 23949, "[[4, 6]]", True),
        ("torch::autograd::CopySlices", 11, 81, 23949, "[[4, 6]]", True),
        ("aten::stack", 2, 11, None, "[[2, 3], [2, 3], []]", False),
    ]


def test_the_forward_index_holds_only_its_horizon() -> None:
    """A real torch 2 capture gives every forward op its own seq: the index keeps the ops of the
    last ``horizon`` NVTX rows (plus a quarter of it between evictions), not all of them."""
    import numpy as np
    import pyarrow as pa

    from nvbridge.engine.forward_links import ForwardIndex

    horizon, rows, windows = 4000, 1000, 40
    index = ForwardIndex(horizon)
    for w in range(windows):
        seq = np.arange(w * rows, (w + 1) * rows, dtype=np.int64)
        parsed = pa.table(
            {
                "is_backward": pa.array(np.zeros(rows, bool)),
                "fwd_tid": pa.nulls(rows, pa.int64()),
                "op_name": pa.array(["aten::mm"] * rows),
                "input_shapes": pa.nulls(rows, pa.string()),
                "input_dtypes": pa.nulls(rows, pa.string()),
            }
        )
        one = np.ones(rows, np.int64)
        index.link(one, one, seq, seq, parsed, seq, np.ones(rows, bool), pa.nulls(rows, pa.string()), 0)
        assert all(len(store) <= horizon + horizon // 4 + rows for store in index._store.values())
    assert all(len(store) < windows * rows / 4 for store in index._store.values())
