"""emit_nvtx under a real NVTX collector: a small injection library compiled at test time.

Each workload runs in a subprocess (NVTX reads NVTX_INJECTION64_PATH once, at the first NVTX call)
and the library logs every push/pop with its thread. The facts asserted are the ones the converter
relies on: names in torch's grammar, seq equal to torch.profiler's, nesting, threads, module
paths, step ranges, and that nothing is left installed or open.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="emit_nvtx needs torch (pip install 'nvbridge[torch]')")

from nvbridge.annotate import _nvtx_lib  # noqa: E402
from tests.nvtx_inject.nvtx_log import (  # noqa: E402
    NET_MODULE_RANGES,  # noqa: E402
    NvtxLog,
    Range,
    profiler_ops,
    run_scenario,
)

# Loading a library is not an NVTX call, so probing here leaves this process uninitialised.
HAVE_CTYPES = _nvtx_lib._ctypes_emitter() is not None
HAVE_NVTX_PACKAGE = _nvtx_lib._nvtx_package_emitter() is not None
if not (HAVE_CTYPES or HAVE_NVTX_PACKAGE):
    pytest.skip(
        "no NVTX library to emit through: pip install nvidia-nvtx-cu12 (or nvtx==0.2.11)",
        allow_module_level=True,
    )

OP = re.compile(
    r"^(?P<op>[a-z_]+::\w+)(?:, seq = (?P<seq>\d+))?, op_id = (?P<op_id>\d+)"
    r"(?:, sizes = (?P<sizes>\[.*?\]), dtypes = (?P<dtypes>\[[^\]]*\])(?:, values = (?P<values>\[.*\]))?)?$"
)
BACKWARD = re.compile(r"^(?P<node>\w+), stashed seq = (?P<seq>\d+), fwd_tid = (?P<tid>\d+)$")
MODULE = re.compile(r"^nn\.Module: (?:(?P<path>\S+) )?\((?P<cls>\w+)\)$")


@pytest.fixture(scope="session")
def runs(injection: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[NvtxLog, Any]]:
    """Each scenario runs once per session; tests share the results."""
    cache: dict[str, tuple[NvtxLog, Any]] = {}
    workdir = tmp_path_factory.mktemp("runs")

    class Lazy(dict[str, tuple[NvtxLog, Any]]):
        def __missing__(self, key: str) -> tuple[NvtxLog, Any]:
            cache[key] = run_scenario(injection, key, workdir)
            self[key] = cache[key]
            return cache[key]

    return Lazy()


def op_key(r: Range) -> tuple[str, int]:
    """(op name, seq or -1) of an op range."""
    m = OP.match(r.name)
    assert m, r.name
    return m["op"], int(m["seq"]) if m["seq"] else -1


@pytest.mark.parametrize(
    ("scenario", "min_ops", "min_with_seq"),
    [("profiled", 60, 16), ("profiled_shapes", 60, 16), ("double_backward", 12, 6), ("transformer", 300, 40)],
)
def test_every_op_seq_equals_torch_profiler(runs: Any, scenario: str, min_ops: int, min_with_seq: int) -> None:
    log, facts = runs[scenario]
    ours = [op_key(r) for r in log.ranges if r.name.startswith("aten::")]
    theirs = profiler_ops(facts["events"])
    assert ours == theirs
    assert len(ours) >= min_ops
    assert sum(seq >= 0 for _, seq in ours) >= min_with_seq


def test_names_follow_torch_grammar(runs: Any) -> None:
    log, _ = runs["profiled"]
    op_ids = []
    for r in log.ranges:
        if r.name.startswith("aten::"):
            m = OP.match(r.name)
            assert m is not None, r.name
            assert m["sizes"] is None
            op_ids.append(int(m["op_id"]))
    assert op_ids == sorted(op_ids) and len(set(op_ids)) == len(op_ids)
    addmm = [r.name for r in log.ranges if r.name.startswith("aten::addmm")]
    assert re.fullmatch(r"aten::addmm, seq = \d+, op_id = \d+", addmm[0])
    # factories from Python and ops inside backward carry no seq, as in torch
    assert all(op_key(r)[1] == -1 for r in log.named("aten::ones_like"))


def test_record_shapes_covers_every_schema_argument(runs: Any) -> None:
    log, _ = runs["profiled_shapes"]
    addmm = [OP.match(r.name) for r in log.named("aten::addmm")]
    assert addmm and all(m is not None for m in addmm)
    assert {m["sizes"] for m in addmm if m} == {"[[3], [2, 72], [72, 3], [], []]"}
    assert {m["dtypes"] for m in addmm if m} == {"[f32, f32, f32, -, -]"}
    conv = OP.match(log.named("aten::convolution")[0].name)
    assert conv is not None
    assert conv["sizes"] == "[[2, 1, 8, 8], [2, 1, 3, 3], [2], [], [], [], [], [], []]"
    # What the convolution's FLOPs need: stride, padding, dilation, transposed, output padding, groups.
    assert conv["values"] == "[null, null, null, [1, 1], [0, 0], [1, 1], false, [0, 0], 1]"
    assert all(m and m["values"] for m in addmm)  # beta and alpha


def test_backward_nodes_link_to_forward_ops(runs: Any) -> None:
    log, facts = runs["profiled"]
    tid = facts["tid"]
    nodes = [(r, BACKWARD.match(r.name)) for r in log.ranges if "Backward" in r.name]
    assert len(nodes) >= 16
    forward_seqs = {
        op_key(r)[1]
        for r in log.ranges
        if r.name.startswith("aten::") and not any("Backward" in a.name for a in r.ancestors())
    }
    for r, m in nodes:
        assert m is not None, r.name
        assert r.tid == tid and int(m["tid"]) == tid
        assert int(m["seq"]) in forward_seqs | {s for s in _custom_seqs(log)}
    # the same (node, seq) pairs torch.profiler saw
    ours = Counter((m["node"], int(m["seq"])) for _, m in nodes if m)
    theirs = Counter(
        (e["name"], e["seq"])
        for e in facts["events"]
        if (e["parent"] or "").startswith("autograd::engine::evaluate_function:") and e["seq"] >= 0
    )
    assert ours == theirs
    # backward aten ops nest inside their node; AccumulateGrad has a bare name
    addmm_bw = [r for r, m in nodes if m and m["node"] == "AddmmBackward0"][0]
    assert [op_key(c)[0] for c in addmm_bw.children].count("aten::mm") == 2
    assert all(op_key(c)[1] == -1 for c in addmm_bw.children)
    assert len(log.named("torch::autograd::AccumulateGrad")) == 2 * 4


def _custom_seqs(log: NvtxLog) -> set[int]:
    return {int(m["seq"]) for r in log.named("Double,") if (m := OP.match(r.name.replace("Double", "x::Double", 1)))}


def test_custom_function_and_record_function_ranges(runs: Any) -> None:
    log, facts = runs["profiled"]
    ours = [r.name.split(", op_id")[0] for r in log.named("Double,")]
    theirs = [f"Double, seq = {e['seq']}" for e in facts["events"] if e["name"] == "Double"]
    assert len(ours) == 2 and ours == theirs
    assert len(log.named("DoubleBackward, stashed seq = ")) == 2
    steps = log.named("Optimizer.step#SGD.step")
    assert len(steps) == 2
    assert [op_key(c)[0] for c in steps[0].children] == ["aten::add_"] * 4


def test_module_ranges_carry_paths_and_nest_ops(runs: Any) -> None:
    log, _ = runs["profiled"]
    names = Counter(r.name for r in log.named("nn.Module:"))
    assert names == NET_MODULE_RANGES
    conv = log.named("aten::convolution")[0]
    assert [a.name for a in conv.ancestors()][:3] == [
        "nn.Module: features.0 (Conv2d)",
        "nn.Module: features (Sequential)",
        "nn.Module: (Net)",
    ]
    assert all(MODULE.match(n) for n in names)
    parent = log.named("aten::addmm")[0].parent
    assert parent is not None and parent.name == "nn.Module: head (Linear)"


def test_step_ranges_hold_each_iteration(runs: Any) -> None:
    log, facts = runs["profiled"]
    roots = [r for r in log.ranges if r.parent is None and r.tid == facts["tid"]]
    assert [r.name for r in roots] == ["ProfilerStep#0", "ProfilerStep#1"]
    for step in roots:
        inside = {r.name.split(",")[0] for r in step.descendants()}
        assert {"nn.Module: (Net)", "AddmmBackward0", "Optimizer.step#SGD.step"} <= inside
    assert roots[0].end_ns is not None and roots[0].end_ns <= roots[1].start_ns


def test_double_backward_ops_carry_their_own_seq(runs: Any) -> None:
    log, _ = runs["double_backward"]
    inside = [r for r in log.ranges if r.parent is not None and BACKWARD.match(r.parent.name)]
    with_seq = [op_key(r) for r in inside if r.name.startswith("aten::") and op_key(r)[1] >= 0]
    assert with_seq, "create_graph=True backward ops must carry seq"
    second = [m["node"] for r in log.ranges if (m := BACKWARD.match(r.name))]
    assert second.count("MulBackward0") >= 2  # the grad graph's nodes run in the second pass


def test_threads_each_get_their_own_ranges(runs: Any) -> None:
    log, facts = runs["threads"]
    tids = facts["tids"]
    for name, tid in tids.items():
        mine = [r for r in log.ranges if r.tid == tid]
        assert mine[0].name == f"thread {name}" and mine[0].parent is None
        backward = [BACKWARD.match(r.name) for r in mine if "Backward0" in r.name]
        assert len(backward) >= 7
        assert {int(m["tid"]) for m in backward if m} == {tid}
        assert any(r.name.startswith("aten::addmm, seq = ") for r in mine)
        # module ranges (process-wide) carry full paths on each thread: one step of Net
        assert Counter(r.name for r in mine if r.name.startswith("nn.Module:")) == {
            name: count // 2 for name, count in NET_MODULE_RANGES.items()
        }
    assert facts["tid"] not in {r.tid for r in log.ranges}
    assert not log.unclosed


def test_backward_names_the_forward_thread(runs: Any) -> None:
    log, facts = runs["cross_thread"]
    main, worker = facts["tid"], facts["worker"]
    nodes = {m["node"]: (r.tid, int(m["tid"])) for r in log.ranges if (m := BACKWARD.match(r.name))}
    # every node runs on the thread that called backward() ...
    assert {tid for tid, _ in nodes.values()} == {main}
    # ... and names the thread whose modules created it
    for node in ("AddmmBackward0", "TBackward0", "ReluBackward0", "ConvolutionBackward0"):
        assert nodes[node][1] == worker, node
    # nodes made outside any module (the loss) fall back to the backward thread: documented
    assert nodes["NllLossBackward0"][1] == main
    forward = {op_key(r) for r in log.ranges if r.tid == worker and r.name.startswith("aten::")}
    addmm_seq = [int(m["seq"]) for r in log.ranges if (m := BACKWARD.match(r.name)) and m["node"] == "AddmmBackward0"]
    assert ("aten::addmm", addmm_seq[0]) in forward


def test_exception_leaves_nothing_open_or_installed(runs: Any) -> None:
    log, facts = runs["exception"]
    assert facts["errors"] == ["boom in head", "boom in backward"]
    assert facts["after"] == facts["before"]
    assert facts["after"]["dispatch_modes"] == 0 and facts["after"]["module_hooks"] == 0
    assert facts["after"]["module_call_is_original"]
    assert not log.unclosed
    assert log.pushes == log.pops
    assert len(log.named("BadBackward")) == 1  # the node whose apply raised was still ranged
    assert log.named("user range")


def test_disabled_is_a_true_noop(runs: Any) -> None:
    log, facts = runs["disabled"]
    assert log.ranges == [] and log.pushes == {}
    assert facts["before"] == facts["during"] == facts["after"]


def test_reentry_raises_and_decorator_installs_per_call(runs: Any) -> None:
    log, facts = runs["reentry"]
    assert facts["message"] == "NVTX annotation context manager is not reentrant"
    assert facts["after"]["dispatch_modes"] == 0 and facts["after"]["apply_is_original"]
    assert facts["after"]["module_call_is_original"]
    ops = [op_key(r)[0] for r in log.ranges]
    # with-block, two decorated calls, then a decorated call nested in a with-block
    assert ops == ["aten::ones", "aten::add"] + ["aten::ones", "aten::mul"] * 3 + ["aten::ones", "aten::sub"]
    assert facts["decorated_modes"] == [1, 1, 1]


def test_no_collector_means_nothing_installed() -> None:
    import os

    import torch

    from nvbridge.annotate import emit_nvtx

    if os.environ.get("NVTX_INJECTION64_PATH"):
        pytest.skip("this test process runs under a collector")
    with emit_nvtx() as nv:
        assert nv.active_backend == "off"
        assert torch._C._len_torch_dispatch_stack() == 0
        nv.step()
        torch.ones(2) + 1


_DROPPED = """
import json, sys, warnings
sys.modules["nvtx"] = None                      # no nvtx package ...
from nvbridge.annotate import _nvtx_lib
_nvtx_lib._ctypes_candidates = lambda: []       # ... and no NVTX C library
from nvbridge.annotate import emit_nvtx, NvtxDroppedWarning
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with emit_nvtx():
        pass
    with emit_nvtx():
        pass
json.dump([(w.category.__name__, str(w.message)) for w in caught], open(sys.argv[1], "w"))
"""


def test_dropped_ranges_warn_once_loudly(injection: Path, tmp_path: Path) -> None:
    _, caught = run_scenario(injection, "dropped", tmp_path, code=_DROPPED)
    assert len(caught) == 1
    assert caught[0][0] == "NvtxDroppedWarning" and "DROPPED" in caught[0][1]
    _, quiet = run_scenario(None, "dropped_no_collector", tmp_path, code=_DROPPED)
    assert quiet == []


_MEMORY = """
import json, os, resource, sys
os.environ["NVBRIDGE_NVTX_LOG"] = os.devnull      # the collector still formats every call
import torch
from nvbridge.annotate import _nvtx_lib, emit_nvtx
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
out = {}
kinds = sys.argv[2].split(",")
for kind in kinds:
    e = _nvtx_lib.load_emitter(kind)
    for i in range(50000):                         # warm up allocators
        e.push(f"aten::add, seq = {i}, op_id = {i}"); e.pop()
    before = rss()
    for i in range(int(sys.argv[3])):
        e.push(f"aten::add, seq = {i}, op_id = {i}"); e.pop()
    out[kind] = [e.source, rss() - before]
if "ops" in sys.argv[4:]:
    x = torch.ones(4, requires_grad=True)
    with emit_nvtx():
        for _ in range(20000):
            x.add(1)
        before = rss()
        for _ in range(1000000):
            x.add(1)                               # 1M distinct names: seq and op_id differ
    out["emit_nvtx"] = ["ops", rss() - before]
json.dump(out, open(sys.argv[1], "w"))
"""


@pytest.mark.parametrize(
    ("collector", "kinds", "count", "ops"),
    [
        pytest.param(
            True, "ctypes", 1_000_000, True, marks=pytest.mark.skipif(not HAVE_CTYPES, reason="no libnvtx3interop")
        ),
        pytest.param(
            False,
            "ctypes,nvtx",
            200_000,
            False,
            marks=pytest.mark.skipif(not (HAVE_CTYPES and HAVE_NVTX_PACKAGE), reason="needs both NVTX emitters"),
        ),
    ],
)
def test_unique_messages_do_not_grow_memory(
    injection: Path, tmp_path: Path, collector: bool, kinds: str, count: int, ops: bool
) -> None:
    """Distinct messages (seq and op_id make every op name unique) must not be cached.

    nvtx's own API caches each as a registered string (~490 bytes): 1M would be ~470 MB. The
    nvtx-package fallback registers strings with the tool, so it runs without a collector here
    (the test collector keeps registered strings, as nsys does); its Python side must stay flat.
    """
    code = _MEMORY.replace("sys.argv[2]", repr(kinds)).replace("sys.argv[3]", repr(count))
    code = code.replace('"ops" in sys.argv[4:]', repr(ops))
    _, facts = run_scenario(injection if collector else None, f"memory_{collector}", tmp_path, code=code)
    assert set(facts) == set(kinds.split(",")) | ({"emit_nvtx"} if ops else set())
    for kind, (source, grown_kib) in facts.items():
        assert grown_kib < 20_000, (kind, source, grown_kib)


_FALLBACK = """
import json, sys, torch
from nvbridge.annotate import _nvtx_lib, emit_nvtx
_nvtx_lib._ctypes_candidates = lambda: []       # as on a machine without nvidia-nvtx-cu12
x = torch.ones(3, requires_grad=True)
with emit_nvtx(backend="python"):              # the observer emits through its own NVTX copy
    (x * 2).sum().backward()
json.dump(_nvtx_lib.load_emitter().source, open(sys.argv[1], "w"))
"""


@pytest.mark.skipif(not HAVE_NVTX_PACKAGE, reason="nvtx package not installed")
def test_nvtx_package_fallback_records_the_same_names(injection: Path, tmp_path: Path) -> None:
    log, source = run_scenario(injection, "fallback", tmp_path, code=_FALLBACK)
    assert source.startswith("nvtx==")
    names = [r.name.split(", op_id")[0] for r in log.ranges]
    assert names == [
        "aten::mul, seq = 0",
        "aten::sum, seq = 1",
        "aten::ones_like",
        "SumBackward0, stashed seq = 1, fwd_tid = " + names[3].rsplit(" ", 1)[-1],
        "aten::expand",
        "MulBackward0, stashed seq = 0, fwd_tid = " + names[3].rsplit(" ", 1)[-1],
        "aten::mul",
        "torch::autograd::AccumulateGrad",
        "aten::detach",
    ]
    assert not log.unclosed
