"""The oracle: torch.profiler(profile_memory=True), run separately with nvbridge never imported,
against nvbridge's conversion of the same workload recorded under Nsight Systems with
emit_nvtx(profile_memory=True), on the CPU workloads of scripts/workloads/memory.py: per op name
the count and the self and total CPU memory equal torch's key_averages() to the byte, and each
step's peak allocated equals the highest Total Allocated among torch's memory events in it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc
import pytest

import nvbridge
from tests.nsys_recorded import memory_run

WORKLOADS = ["cnn", "transformer", "rnn", "checkpoint", "views", "adam"]
# torch.profiler groups its steps' record_function scopes under one name.
STEPS = "ProfilerStep*"


@dataclass(frozen=True)
class Pair:
    torch: dict[str, Any]  # scripts.workloads.memory's torch facts
    report: Any  # nvbridge.load of the recording


@pytest.fixture(scope="module", params=WORKLOADS)
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Pair:
    db, facts = memory_run(str(request.param), tmp_path_factory)
    return Pair(facts, nvbridge.load(db))


def _as_torch_sees_them(ops: list[dict[str, Any]], recorded: set[str]) -> dict[int, int]:
    """Each op's parent in the tree torch's key_averages counts over (-1: a root, -2: the op is
    not in it). Dropped, their children moving up to their parent: ranges torch does not record
    (``recorded``: the names torch lists; nvbridge's ``nn.Module:`` ranges), then, repeatedly,
    what torch's ``EventList._remove_dup_nodes`` drops (torch/autograd/profiler_util.py: an op
    whose parent has its name and no other child)."""
    parent = {op["op_id"]: -1 if op["parent_id"] is None else op["parent_id"] for op in ops}
    name = {op["op_id"]: _name(op["op_name"]) for op in ops}

    def drop(gone: set[int]) -> None:
        for op in sorted(parent):  # parents first: a chain of dropped ops moves up whole
            while parent[op] in gone:
                parent[op] = parent[parent[op]]
        for op in gone:
            parent[op] = -2

    drop({op for op in parent if name[op] not in recorded})
    while True:
        children: dict[int, int] = defaultdict(int)
        for up in parent.values():
            children[up] += 1
        dup = {op for op, up in parent.items() if up >= 0 and name[up] == name[op] and children[up] == 1}
        if not dup:
            return parent
        drop(dup)


def _name(op_name: str) -> str:
    return STEPS if op_name.startswith("ProfilerStep#") else op_name


def _ours(report: Any, recorded: set[str]) -> dict[str, tuple[int, int, int]]:
    """Per op name as torch's key_averages counts it: (count, self CPU memory, total CPU memory),
    over the ops torch records (:func:`_as_torch_sees_them`), self = total - the children's
    totals (torch's FunctionEvent.self_cpu_memory_usage), steps under torch's one name."""
    ops = report.ops.select(["op_id", "parent_id", "op_name", "cpu_memory_usage"]).to_pylist()
    parent = _as_torch_sees_them(ops, recorded)
    total = {op["op_id"]: op["cpu_memory_usage"] for op in ops}
    children_total: dict[int, int] = defaultdict(int)
    for op, up in parent.items():
        if up >= 0:
            children_total[up] += total[op]
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for op in ops:
        if parent[op["op_id"]] == -2:
            continue
        row = sums[_name(op["op_name"])]
        row[0] += 1
        row[1] += total[op["op_id"]] - children_total[op["op_id"]]
        row[2] += total[op["op_id"]]
    return {name: (a, b, c) for name, (a, b, c) in sums.items()}


def test_self_and_total_cpu_memory_per_op_name_equal_torchs(pair: Pair) -> None:
    want = {
        row["name"]: (row["count"], row["self_cpu_memory_usage"], row["cpu_memory_usage"])
        for row in pair.torch["key_averages"]
    }
    ours = _ours(pair.report, set(want))
    assert ours == want
    # The only ranges torch does not record are nvbridge's module ranges.
    names = {_name(n) for n in pair.report.ops.column("op_name").to_pylist()}
    assert all(n.startswith("nn.Module: ") for n in names - set(want)), names - set(want)
    assert any(total for _, _, total in want.values())  # the workload allocated inside its ops


def test_each_steps_peak_allocated_equals_torchs_memory_events(pair: Pair) -> None:
    memory = pair.report.memory
    assert memory.num_rows == len(pair.torch["events"])
    steps = pair.torch["steps"]
    assert steps and all(s["peak_total_allocated"] is not None for s in steps)
    for step in steps:
        mine = memory.filter(pc.equal(memory.column("step"), step["step"]))
        assert pc.max(mine.column("total_allocated")).as_py() == step["peak_total_allocated"], step["step"]


def test_the_events_are_torchs_in_order(pair: Pair) -> None:
    """Device, signed bytes and the allocator's totals, event for event (the addresses and
    times differ between the two processes)."""
    mine = pair.report.memory.select(["device", "bytes", "total_allocated", "total_reserved"]).to_pylist()
    assert [tuple(row.values()) for row in mine] == [tuple(e[2:]) for e in pair.torch["events"]]
