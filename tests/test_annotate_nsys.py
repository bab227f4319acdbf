"""emit_nvtx under real Nsight Systems: what `nsys profile -t nvtx` records is what the converter needs.

One tiny training loop (conv, relu, linear, loss, backward, SGD; two steps) runs under
``nsys profile -t nvtx`` with torch.profiler around it in the same process. The export's
NVTX_EVENTS is read with sqlite3 directly, independent of nvbridge, and checked against
torch.profiler's events: op names in torch's grammar, the same seq for the same ops, backward
node ranges on the thread that ran them, module paths, step ranges. Then ``nvbridge.load``
must link every backward node to its forward op.

nsys 2022.4 often cannot find its importer and leaves only a ``.qdstrm``; QdstrmImporter (path in
``QDSTRM_IMPORTER``, default as in ``scripts/record/samples.sh``) then makes the ``.nsys-rep``.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="emit_nvtx needs torch (pip install 'nvbridge[torch]')")

import nvbridge  # noqa: E402
from nvbridge.annotate import _nvtx_lib  # noqa: E402
from tests.conftest import require_nsys  # noqa: E402
from tests.nsys_recorded import record_command  # noqa: E402
from tests.nvtx_inject.nvtx_log import (
    NET_MODULE_RANGES,  # noqa: E402
    profiler_ops,  # noqa: E402
)

pytestmark = pytest.mark.nsys

ROOT = Path(__file__).resolve().parent.parent

OP = re.compile(r"^(?P<op>[a-z_]+::\w+)(?:, seq = (?P<seq>\d+))?, op_id = (?P<op_id>\d+)$")
BACKWARD = re.compile(r"^(?P<node>\w+), stashed seq = (?P<seq>\d+), fwd_tid = (?P<tid>\d+)$")
MODULE = re.compile(r"^nn\.Module: (?:(?P<path>\S+) )?\((?P<cls>\w+)\)$")
STEP = re.compile(r"^ProfilerStep#\d+$")
RECORD_FUNCTION = re.compile(r"^Optimizer\.\w+#SGD\.\w+$")
ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"

WORKLOAD = """
import json, os, sys, threading
import torch
from torch.profiler import ProfilerActivity, profile
from nvbridge.annotate import emit_nvtx

from scripts.workloads.net import net  # the Net whose ranges NET_MODULE_RANGES lists


torch.set_num_threads(1)
training = net()
with profile(activities=[ProfilerActivity.CPU]) as prof:
    with emit_nvtx(backend="python") as nv:  # the observer is checked in test_annotate_exact
        training.run(nv.step)
events = []
for e in prof.events():
    parent = e.cpu_parent
    events.append({
        "name": e.name,
        "seq": e.sequence_nr,
        "intercepted": any(c.name == "PythonDispatchMode" for c in e.cpu_children),
        "parent": parent.name if parent is not None else None,
        "parent_seq": parent.sequence_nr if parent is not None else None,
    })
facts = {"pid": os.getpid(), "tid": threading.get_native_id(), "events": events}
with open(sys.argv[1], "w") as fh:
    json.dump(facts, fh)
"""


@dataclass
class Row:
    """One NVTX_EVENTS push/pop range as exported."""

    start: int
    end: int | None
    pid: int
    tid: int
    text: str

    def contains(self, other: Row) -> bool:
        return (
            self.tid == other.tid
            and self.end is not None
            and other.end is not None
            and (self.start <= other.start and other.end <= self.end)
        )


@dataclass
class Recording:
    db: Path
    rows: list[Row]  # ordered by start, then longest first (parents before children)
    facts: dict[str, Any]

    def named(self, prefix: str) -> list[Row]:
        return [r for r in self.rows if r.text.startswith(prefix)]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    """Profile the workload once under nsys, import, export to SQLite, read NVTX_EVENTS."""
    require_nsys()
    if _nvtx_lib._ctypes_emitter() is None and _nvtx_lib._nvtx_package_emitter() is None:
        pytest.skip("no NVTX library to emit through: pip install nvidia-nvtx-cu12 (or nvtx==0.2.11)")
    work = tmp_path_factory.mktemp("nsys")
    script, facts_path, rep = work / "workload.py", work / "facts.json", work / "rep"
    script.write_text(WORKLOAD)
    db, profiled = record_command(rep, [sys.executable, str(script), str(facts_path)], work)
    assert facts_path.exists(), f"workload failed under nsys:\n{profiled.stdout}\n{profiled.stderr}"

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        raw = con.execute(
            "SELECT start, end, globalTid, text FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start, end DESC"
        ).fetchall()
    finally:
        con.close()
    rows = [Row(s, e, (g >> 24) & 0xFFFFFF, g & 0xFFFFFF, t) for s, e, g, t in raw]
    return Recording(db, rows, json.loads(facts_path.read_text()))


def op_key(text: str) -> tuple[str, int]:
    m = OP.match(text)
    assert m, text
    return m["op"], int(m["seq"]) if m["seq"] else -1


def test_every_range_is_closed_on_the_workload_thread(recording: Recording) -> None:
    facts = recording.facts
    assert len(recording.rows) >= 100
    assert all(r.end is not None for r in recording.rows)
    assert {(r.pid, r.tid) for r in recording.rows} == {(facts["pid"], facts["tid"])}


def test_names_follow_torch_grammar(recording: Recording) -> None:
    for r in recording.rows:
        assert (
            OP.match(r.text) or BACKWARD.match(r.text) or MODULE.match(r.text) or STEP.match(r.text)
            or RECORD_FUNCTION.match(r.text) or r.text == ACCUMULATE_GRAD
        ), r.text  # fmt: skip
    ops = [OP.match(r.text) for r in recording.rows if r.text.startswith("aten::")]
    op_ids = [int(m["op_id"]) for m in ops if m]
    assert len(op_ids) == len(ops) >= 60
    assert op_ids == list(range(1, len(op_ids) + 1))  # one counter, from 1, in push order
    assert re.fullmatch(r"aten::addmm, seq = \d+, op_id = \d+", recording.named("aten::addmm")[0].text)


def test_seq_equals_torch_profiler(recording: Recording) -> None:
    ours = [op_key(r.text) for r in recording.rows if r.text.startswith("aten::")]
    theirs = profiler_ops(recording.facts["events"])
    assert ours == theirs
    assert sum(seq >= 0 for _, seq in ours) >= 14


def test_backward_nodes_run_on_their_thread_and_hold_their_ops(recording: Recording) -> None:
    tid = recording.facts["tid"]
    nodes = [(r, BACKWARD.match(r.text)) for r in recording.rows if BACKWARD.match(r.text)]
    assert len(nodes) == 2 * 7
    forward = {op_key(r.text) for r in recording.rows if r.text.startswith("aten::")}
    for r, m in nodes:
        assert m is not None
        assert r.tid == tid and int(m["tid"]) == tid
        assert any(seq == int(m["seq"]) for _, seq in forward), r.text
    ours = Counter((m["node"], int(m["seq"])) for _, m in nodes if m)
    theirs = Counter(
        (e["name"], e["seq"])
        for e in recording.facts["events"]
        if (e["parent"] or "").startswith("autograd::engine::evaluate_function:") and e["seq"] >= 0
    )
    assert ours == theirs
    addmm_bw = next(r for r, m in nodes if m and m["node"] == "AddmmBackward0")
    inside = [op_key(c.text) for c in recording.rows if c.text.startswith("aten::") and addmm_bw.contains(c)]
    assert [name for name, _ in inside].count("aten::mm") == 2
    assert all(seq == -1 for _, seq in inside)  # no seq inside backward, as in torch
    assert len(recording.named(ACCUMULATE_GRAD)) == 2 * 4


def test_module_ranges_carry_paths(recording: Recording) -> None:
    names = Counter(r.text for r in recording.named("nn.Module:"))
    assert names == NET_MODULE_RANGES
    conv = recording.named("aten::convolution")[0]
    enclosing = [m.text for m in recording.named("nn.Module:") if m.contains(conv)]
    assert enclosing == ["nn.Module: (Net)", "nn.Module: features (Sequential)", "nn.Module: features.0 (Conv2d)"]
    addmm = recording.named("aten::addmm")[0]
    assert [m.text for m in recording.named("nn.Module:") if m.contains(addmm)] == [
        "nn.Module: (Net)",
        "nn.Module: head (Linear)",
    ]


def test_step_ranges_hold_each_iteration(recording: Recording) -> None:
    steps = recording.named("ProfilerStep#")
    assert [s.text for s in steps] == ["ProfilerStep#0", "ProfilerStep#1"]
    assert steps[0].end is not None and steps[0].end <= steps[1].start
    for r in recording.rows:
        if r not in steps:
            assert sum(s.contains(r) for s in steps) == 1, r.text
    for step in steps:
        inside = {r.text.split(",")[0] for r in recording.rows if step.contains(r)}
        assert {"nn.Module: (Net)", "AddmmBackward0", "Optimizer.step#SGD.step", "aten::addmm"} <= inside


def test_nvbridge_links_every_backward_node(recording: Recording) -> None:
    ops = nvbridge.load(recording.db).df("ops")
    assert len(ops) == len(recording.rows)
    backward = ops[ops.is_backward]
    assert len(backward) == 2 * 7
    assert backward.fwd_op_id.notna().all(), backward[backward.fwd_op_id.isna()].name.tolist()
    by_id = ops.set_index("op_id")
    for _, node in backward.iterrows():
        fwd = by_id.loc[int(node.fwd_op_id)]
        assert fwd.seq == node.seq and fwd.thread_id == node.fwd_tid == node.thread_id, node["name"]
        assert fwd.start_ns < node.start_ns
        # AddmmBackward0 -> aten::addmm, NllLossBackward0 -> aten::nll_loss_forward, ...
        stem = node.op_name.removesuffix("Backward0").lower()
        assert stem in fwd.op_name.split("::")[1].replace("_", ""), (node["name"], fwd["name"])
