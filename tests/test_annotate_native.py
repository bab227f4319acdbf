"""emit_nvtx's ``native`` backend under a real NVTX collector: torch's C++ ranges plus nvbridge's.

The native backend turns on torch's own NVTX profiler state (ops, backward nodes, custom
Functions, record_function scopes, named by torch) and adds only module and ``ProfilerStep#N``
ranges. That state exists only in CUDA builds of torch, so this file runs only there; it needs
no GPU (the CUDA wheel ``torch==2.14.1`` runs it on a CPU-only machine, see DESIGN.md "Real
components"). The main environment and CI have a CPU build: there the whole file is skipped, as
expected. Run it with ``python -m pytest -q tests/test_annotate_native.py`` from a venv holding a
CUDA build of torch plus ``nvidia-nvtx-cu12``.

Each workload runs in a subprocess under the collector of ``tests/nvtx_inject`` (as in
``test_annotate.py``); the facts asserted are the ones the converter relies on: torch's grammar,
backward nodes nested in ``autograd::engine::evaluate_function`` with the seq of a forward op on
the same thread, module paths, step ranges, balance, and nothing left installed.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="emit_nvtx needs torch (pip install 'nvbridge[torch]')")

if torch.version.cuda is None:
    pytest.skip(
        f"the native backend needs a CUDA build of torch (torch {torch.__version__} is a CPU build: "
        "expected in the main environment and CI); run in a venv with torch==2.14.1 (no GPU needed)",
        allow_module_level=True,
    )

from nvbridge.annotate import _nvtx_lib  # noqa: E402
from tests.nvtx_inject.nvtx_log import (  # noqa: E402
    NET_MODULE_RANGES,  # noqa: E402
    NvtxLog,
    Range,
    run_scenario,
)

if _nvtx_lib._ctypes_emitter() is None and _nvtx_lib._nvtx_package_emitter() is None:
    pytest.skip(
        "no NVTX library for nvbridge's module/step ranges: pip install nvidia-nvtx-cu12", allow_module_level=True
    )

# torch's NVTX grammar (torch/csrc/profiler/util.cpp getNvtxStr): op_id always, seq with autograd,
# sizes and input_op_ids with record_shapes.
OP = re.compile(
    r"^(?P<op>[a-z_]+::\w+), (?:seq = (?P<seq>\d+), )?op_id = (?P<op_id>\d+)"
    r"(?:, sizes = (?P<sizes>\[.*\]), input_op_ids = \[.*\])?$"
)
NODE = re.compile(r"^(?P<node>\w+Backward\d*), seq = (?P<seq>\d+), op_id = (?P<op_id>\d+)(?:, sizes = .*)?$")
EVALUATE = re.compile(r"^autograd::engine::evaluate_function: (?P<node>[\w:]+), op_id = \d+$")
MODULE = re.compile(r"^nn\.Module: (?:(?P<path>\S+) )?\((?P<cls>\w+)\)$")

WORKLOAD = r"""
import json, sys, threading
import torch
import nvbridge.annotate as annotate
from nvbridge.annotate import emit_nvtx
from torch.nn.modules import module as module_mod


def no_sync(*args, **kwargs):
    raise AssertionError("the native backend must not call torch.cuda.synchronize (no GPU here)")


torch.cuda.synchronize = no_sync  # torch's own emit_nvtx calls it and fails without a GPU

from scripts.workloads.net import parts, steps_of  # the Net whose ranges NET_MODULE_RANGES lists

def state():
    return {
        "profiler_enabled": torch._C._autograd._profiler_enabled(),
        "dispatch_modes": torch._C._len_torch_dispatch_stack(),
        "function_modes": torch._C._len_torch_function_stack(),
        "module_pre_hooks": len(module_mod._global_forward_pre_hooks),
        "module_hooks": len(module_mod._global_forward_hooks),
        "apply_is_original": torch.autograd.Function.__dict__["apply"] is ORIGINAL_APPLY,
        "module_call_wrapped": torch.nn.Module.__dict__["__call__"] is not ORIGINAL_CALL,
    }


ORIGINAL_APPLY = torch.autograd.Function.__dict__["apply"]
ORIGINAL_CALL = torch.nn.Module.__dict__["__call__"]
model, opt, x, target = parts(momentum=0.9)


def train(nv, steps=2):
    steps_of(model, opt, x, target, steps, custom=True).run(nv.step)


def training(backend, record_shapes):
    before = state()
    with emit_nvtx(backend=backend, record_shapes=record_shapes) as nv:
        active = nv.active_backend
        during = state()
        train(nv)
    return {"active": active, "before": before, "during": during, "after": state()}


def exception():
    before = state()
    errors, active = [], []
    try:
        with emit_nvtx(backend="native") as nv:
            active.append(nv.active_backend)
            nv.step()
            with annotate.range("user range"):
                model(x)
                raise ValueError("boom in forward")
    except ValueError as exc:
        errors.append(str(exc))

    class Bad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 1

        @staticmethod
        def backward(ctx, grad):
            raise ValueError("boom in backward")

    try:
        with emit_nvtx(backend="native") as nv:
            active.append(nv.active_backend)
            Bad.apply(torch.ones(2, requires_grad=True)).sum().backward()
    except ValueError as exc:
        errors.append(str(exc))
    with emit_nvtx(backend="native") as nv:  # usable again after both failures
        active.append(nv.active_backend)
        with annotate.range("after"):
            torch.ones(2).add(1)
    return {"before": before, "after": state(), "errors": errors, "active": active}


def nested():
    @emit_nvtx(backend="native")
    def decorated():
        with annotate.range("decorated"):
            torch.ones(2).mul(3)

    with emit_nvtx(backend="native") as nv:
        outer = nv.active_backend
        inner = emit_nvtx(backend="native")
        with inner:
            inner_active = inner.active_backend
        decorated()
    return {"outer": outer, "inner": inner_active, "after": state()}


def under_profiler():
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]):
        with emit_nvtx() as nv:
            active = nv.active_backend
            with annotate.range("profiled"):
                torch.ones(2).add(1)
    return {"active": active, "after": state()}


def threads():
    tids, active = {}, {}
    barrier = threading.Barrier(2)

    def worker(name):
        tids[name] = threading.get_native_id()
        with emit_nvtx(backend="native") as nv:
            active[name] = nv.active_backend
            barrier.wait()  # both threads annotated at once
            with annotate.range(f"thread {name}"):
                model(x).sum().backward()

    workers = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return {"tids": tids, "active": active, "after": state()}


def no_collector():
    with emit_nvtx(backend="native") as nv:
        return {"active": nv.active_backend, "during": state()}


SCENARIOS = {
    "native": lambda: training("native", False),
    "native_shapes": lambda: training("native", True),
    "auto_shapes": lambda: training("auto", True),
    "exception": exception,
    "nested": nested,
    "under_profiler": under_profiler,
    "threads": threads,
    "no_collector": no_collector,
}
"""


def _code(scenario: str) -> str:
    run = f"facts = SCENARIOS[{scenario!r}]()\n"
    run += "facts['tid'] = threading.get_native_id()\n"
    return WORKLOAD + run + "open(sys.argv[1], 'w').write(json.dumps(facts))\n"


@pytest.fixture(scope="session")
def runs(injection: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[NvtxLog, Any]]:
    """Each scenario runs once per session, in its own interpreter; tests share the results."""
    workdir = tmp_path_factory.mktemp("runs_native")

    class Lazy(dict[str, tuple[NvtxLog, Any]]):
        def __missing__(self, key: str) -> tuple[NvtxLog, Any]:
            self[key] = run_scenario(injection, key, workdir, code=_code(key))
            return self[key]

    return Lazy()


def balanced(log: NvtxLog) -> bool:
    return not log.unclosed and log.pushes == log.pops


def clean(state: dict[str, Any]) -> bool:
    return state == {
        "profiler_enabled": False,
        "dispatch_modes": 0,
        "function_modes": 0,
        "module_pre_hooks": 0,
        "module_hooks": 0,
        "apply_is_original": True,
        "module_call_wrapped": False,
    }


def inside_backward(r: Range) -> bool:
    return any(a.name.startswith("autograd::engine::evaluate_function:") for a in r.ancestors())


def test_auto_picks_the_observer_where_it_builds(runs: Any) -> None:
    """On a CUDA build too, auto's first choice is the C++ observer (torch's names plus fwd_tid)."""
    log, facts = runs["auto_shapes"]
    assert facts["active"] == "observer" and clean(facts["after"]) and balanced(log)
    assert facts["during"]["dispatch_modes"] == 0 and facts["during"]["apply_is_original"]
    assert any(re.match(r"^AddmmBackward0, seq = \d+, op_id = \d+, fwd_tid = \d+", r.name) for r in log.ranges)


@pytest.mark.parametrize("scenario", ["native", "native_shapes"])
def test_torch_names_ops_and_nvbridge_adds_nothing_per_op(runs: Any, scenario: str) -> None:
    log, facts = runs[scenario]
    assert facts["active"] == "native"
    assert clean(facts["before"]) and clean(facts["after"]) and balanced(log)
    # native: torch's profiler state is on, no python mode or apply/engine wrapper installed; the
    # one thing nvbridge adds is the Module.__call__ wrapper for module ranges
    assert facts["during"]["profiler_enabled"] and facts["during"]["dispatch_modes"] == 0
    assert facts["during"]["apply_is_original"] and facts["during"]["module_call_wrapped"]
    assert not [r.name for r in log.ranges if "stashed seq" in r.name or "fwd_tid" in r.name]
    ops = [(r, OP.match(r.name)) for r in log.ranges if r.name.startswith("aten::")]
    assert len(ops) >= 100 and all(m for _, m in ops), [r.name for r, m in ops if not m][:3]
    # op_id: torch's one per-process counter, over ops, nodes and record_function scopes alike
    op_ids = [int(m["op_id"]) for r in log.ranges if (m := re.search(r", op_id = (?P<op_id>\d+)", r.name))]
    assert op_ids == sorted(op_ids) and len(set(op_ids)) == len(op_ids)
    shapes = scenario != "native"
    assert all((m["sizes"] is not None) == shapes for _, m in ops if m)
    addmm = [m for r, m in ops if m and m["op"] == "aten::addmm"]
    assert len(addmm) == 2 and all(m["seq"] is not None for m in addmm)
    if shapes:
        assert {m["sizes"] for m in addmm} == {"[[3], [2, 72], [72, 3], [], []]"}
    # ops inside backward carry no seq (no create_graph), as in torch
    assert all(m["seq"] is None for r, m in ops if m and inside_backward(r))


@pytest.mark.parametrize("scenario", ["native", "native_shapes"])
def test_backward_nodes_nest_in_evaluate_function_and_match_forward_seq(runs: Any, scenario: str) -> None:
    log, facts = runs[scenario]
    tid = facts["tid"]
    nodes = [(r, NODE.match(r.name)) for r in log.ranges if re.match(r"^\w+Backward\d*, ", r.name)]
    names = Counter(m["node"] for _, m in nodes if m)
    assert all(m for _, m in nodes)
    assert {"AddmmBackward0", "ConvolutionBackward0", "ReluBackward0", "NllLossBackward0"} <= set(names)
    assert names["DoubleBackward"] == 2  # the custom Function's node, named by torch
    forward: Counter[int] = Counter()
    for r in log.ranges:
        m = OP.match(r.name) or re.match(r"^Double, seq = (?P<seq>\d+), op_id = \d+", r.name)
        if m and m["seq"] is not None and not inside_backward(r):
            forward[int(m["seq"])] += 1
    for r, m in nodes:
        assert m is not None and r.tid == tid
        wrapper = r.parent
        assert wrapper is not None and (w := EVALUATE.match(wrapper.name)) and w["node"] == m["node"]
        assert forward[int(m["seq"])] >= 1, r.name  # a forward op carries the node's seq
    # every node seq is distinct per iteration: 2 steps -> each (node, seq) once
    assert all(n == 1 for n in Counter((m["node"], m["seq"]) for _, m in nodes if m).values())
    # AccumulateGrad: no seq, inside its own evaluate_function wrapper
    acc = log.named("torch::autograd::AccumulateGrad, op_id = ")
    assert len(acc) == 2 * 4 and all(r.parent and r.parent.name.startswith("autograd::engine::") for r in acc)
    assert len(log.named("Double, seq = ")) == 2


def test_module_and_step_ranges_come_from_nvbridge(runs: Any) -> None:
    log, facts = runs["native_shapes"]
    names = Counter(r.name for r in log.named("nn.Module:"))
    assert names == NET_MODULE_RANGES
    assert all(MODULE.match(n) for n in names)
    conv = log.named("aten::conv2d")[0]
    assert [a.name for a in conv.ancestors()][:3] == [
        "nn.Module: features.0 (Conv2d)",
        "nn.Module: features (Sequential)",
        "nn.Module: (Net)",
    ]
    roots = [r for r in log.ranges if r.parent is None and r.tid == facts["tid"]]
    assert [r.name for r in roots] == ["ProfilerStep#0", "ProfilerStep#1"]
    for step in roots:
        inside = {r.name.split(",")[0] for r in step.descendants()}
        assert {
            "nn.Module: (Net)",
            "AddmmBackward0",
            "Optimizer.step#SGD.step",
            "Optimizer.zero_grad#SGD.zero_grad",
        } <= inside
    assert roots[0].end_ns is not None and roots[0].end_ns <= roots[1].start_ns


def test_exception_exits_cleanly_and_native_restarts(runs: Any) -> None:
    log, facts = runs["exception"]
    assert facts["errors"] == ["boom in forward", "boom in backward"]
    assert facts["active"] == ["native"] * 3
    assert clean(facts["before"]) and clean(facts["after"]) and balanced(log)
    roots = [r for r in log.ranges if r.parent is None]
    assert roots[0].name == "ProfilerStep#0" and roots[-1].name == "after"
    (user,) = log.named("user range")
    assert user.parent is roots[0] and [c.name for c in user.children] == ["nn.Module: (Net)"]
    assert "autograd::engine::evaluate_function: BadBackward" in {r.name.split(",")[0] for r in roots}
    after = log.named("after")
    assert len(after) == 1 and [c.name.split(",")[0] for c in after[0].children] == ["aten::ones", "aten::add"]


def test_nested_instance_adds_nothing(runs: Any) -> None:
    log, facts = runs["nested"]
    assert facts["outer"] == "native" and facts["inner"] == "nested" and clean(facts["after"]) and balanced(log)
    decorated = log.named("decorated")
    assert len(decorated) == 1
    ops = [c.name.split(",")[0] for c in decorated[0].children]
    assert ops == ["aten::ones", "aten::mul"]  # each op once: no python mode doubling torch's ranges


def test_under_torch_profiler_auto_takes_the_observer(runs: Any) -> None:
    log, facts = runs["under_profiler"]
    # torch allows one profiler state per thread: native cannot start; the observer (a
    # RecordFunction callback of its own) records beside the profiler
    assert facts["active"] == "observer" and clean(facts["after"]) and balanced(log)
    (profiled,) = log.named("profiled")
    assert [c.name.split(",")[0] for c in profiled.children] == ["aten::ones", "aten::add"]


def test_threads_each_run_their_own_native_state(runs: Any) -> None:
    log, facts = runs["threads"]
    assert facts["active"] == {"a": "native", "b": "native"} and clean(facts["after"]) and balanced(log)
    for name, tid in facts["tids"].items():
        (top,) = log.named(f"thread {name}")
        assert top.tid == tid
        below = [r for r in top.descendants() if r.tid != tid]
        assert not below
        inside = {r.name.split(",")[0] for r in top.descendants()}
        assert {"nn.Module: head (Linear)", "aten::addmm", "AddmmBackward0"} <= inside


def test_no_collector_installs_nothing(tmp_path: Path) -> None:
    log, facts = run_scenario(None, "no_collector", tmp_path, code=_code("no_collector"))
    assert facts["active"] == "off" and clean(facts["during"]) and not log.ranges
