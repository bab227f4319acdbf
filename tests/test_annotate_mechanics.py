"""emit_nvtx's moving parts in this process, with a recording emitter instead of a collector.

``test_annotate.py`` checks what a real collector records (in subprocesses); these tests check the
mechanisms behind it directly and quickly: the ``Module.__call__`` wrapper is installed only
while annotation is on and put back after exits and exceptions (or left switched off inside a
wrapper someone added later), module ranges on other threads, backward node ranges on the thread
that runs each node (including nodes run on another thread and reentrant backward), the last
node's range ending before the graph task's final callbacks, and that the wrapper traces under
``torch.compile``. No timing: performance is measured by ``scripts/bench/annotate.py`` only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="emit_nvtx needs torch (pip install 'nvbridge[torch]')")

import torch  # noqa: E402

from nvbridge.annotate import _nvtx_lib, emit_nvtx  # noqa: E402
from nvbridge.annotate._backward import run_backward_with_ranges  # noqa: E402
from nvbridge.annotate._modules import ModuleRanges  # noqa: E402
from scripts.workloads.net import Bad, Net  # noqa: E402
from tests.nvtx_inject.nvtx_log import NvtxLog, Range, parse_log  # noqa: E402

ORIGINAL_CALL = torch.nn.Module.__dict__["__call__"]


class Recorder:
    """Stands in for the NVTX library: remembers every push and pop with its thread."""

    def __init__(self, tmp_path: Path) -> None:
        self.events: list[tuple[int, str, str]] = []  # list.append is atomic: threads may share it
        self.path = tmp_path / "events.tsv"

    def push(self, message: str) -> None:
        self.events.append((threading.get_native_id(), "push", message))

    def push_ascii(self, message: bytes) -> None:
        self.events.append((threading.get_native_id(), "push", message.decode("ascii")))

    def pop(self) -> None:
        self.events.append((threading.get_native_id(), "pop", ""))

    def log(self) -> NvtxLog:
        """The events as the collector's log: per-thread range trees."""
        lines = [f"{i}\t{tid}\t{event}\t\t{message}\n" for i, (tid, event, message) in enumerate(self.events)]
        self.path.write_text("".join(lines))
        return parse_log(self.path)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Recorder]:
    """emit_nvtx believes a collector is attached and emits into a Recorder."""
    rec = Recorder(tmp_path)
    emitter = _nvtx_lib.Emitter(push=rec.push, pop=rec.pop, source="recorder", push_ascii=rec.push_ascii)
    monkeypatch.setattr(_nvtx_lib, "collector_attached", lambda: True)
    monkeypatch.setattr(_nvtx_lib, "_cached", emitter)
    yield rec
    assert torch.nn.Module.__dict__["__call__"] is ORIGINAL_CALL
    assert torch._C._len_torch_dispatch_stack() == 0


def names(ranges: list[Range]) -> list[str]:
    return [r.name for r in ranges]


def balanced(log: NvtxLog) -> bool:
    return not log.unclosed and log.pushes == log.pops


def test_module_call_is_wrapped_only_while_annotating(recorder: Recorder) -> None:
    model, x = Net(), torch.randn(2, 1, 8, 8)
    with emit_nvtx(backend="python"):
        assert torch.nn.Module.__dict__["__call__"] is not ORIGINAL_CALL
        model(x)
    assert torch.nn.Module.__dict__["__call__"] is ORIGINAL_CALL
    with pytest.raises(ValueError, match="boom"):
        with emit_nvtx(backend="python"):
            raise ValueError("boom")
    assert torch.nn.Module.__dict__["__call__"] is ORIGINAL_CALL
    with emit_nvtx(backend="python", modules=False):
        assert torch.nn.Module.__dict__["__call__"] is ORIGINAL_CALL
    log = recorder.log()
    assert balanced(log)
    assert names(log.named("nn.Module:"))[:3] == [
        "nn.Module: (Net)",
        "nn.Module: features (Sequential)",
        "nn.Module: features.0 (Conv2d)",
    ]


def test_exception_in_forward_pops_module_ranges(recorder: Recorder) -> None:
    model, x = Net(), torch.randn(2, 1, 8, 8)

    def boom(module: Any, args: Any) -> None:
        raise RuntimeError("boom in relu")

    handle = model.features[1].register_forward_pre_hook(boom)
    with pytest.raises(RuntimeError, match="boom in relu"):
        with emit_nvtx(backend="python"):
            model(x)
    handle.remove()
    log = recorder.log()
    assert balanced(log)
    relu = log.named("nn.Module: features.1 (ReLU)")
    assert len(relu) == 1 and not relu[0].children
    with emit_nvtx(backend="python"):
        model(x)  # the depth counter recovered: Net is a root again, so paths are unchanged
    assert names(recorder.log().named("nn.Module: features.1"))[-1] == "nn.Module: features.1 (ReLU)"


def test_module_call_stays_installed_until_the_last_thread_exits(recorder: Recorder) -> None:
    entered, release = threading.Event(), threading.Event()

    def worker() -> None:
        with emit_nvtx(backend="python"):
            entered.set()
            release.wait(30)

    thread = threading.Thread(target=worker)
    thread.start()
    entered.wait(30)
    with emit_nvtx(backend="python"):
        wrapped = torch.nn.Module.__dict__["__call__"]
        assert wrapped is not ORIGINAL_CALL
    assert torch.nn.Module.__dict__["__call__"] is wrapped  # the worker's block is still open
    release.set()
    thread.join()
    assert torch.nn.Module.__dict__["__call__"] is ORIGINAL_CALL


def test_a_later_wrapper_of_module_call_survives_exit(recorder: Recorder) -> None:
    model, x = torch.nn.Linear(3, 2), torch.randn(1, 3)
    calls = []
    with emit_nvtx(backend="python"):
        ours = torch.nn.Module.__dict__["__call__"]

        def theirs(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            calls.append(type(self).__name__)
            return ours(self, *args, **kwargs)

        torch.nn.Module.__call__ = theirs  # type: ignore[method-assign]
    try:
        assert torch.nn.Module.__dict__["__call__"] is theirs  # not clobbered on exit
        model(x)  # ours is still in their chain, switched off
        assert calls == ["Linear"]
        assert recorder.log().named("nn.Module:") == []
    finally:
        torch.nn.Module.__call__ = ORIGINAL_CALL  # type: ignore[method-assign]


def test_modules_on_another_thread_get_ranges_with_paths(recorder: Recorder) -> None:
    model, x = Net(), torch.randn(2, 1, 8, 8)
    tids: list[int] = []

    def worker() -> None:
        tids.append(threading.get_native_id())
        with torch.no_grad():
            model(x)

    with emit_nvtx(backend="python"):  # module ranges are process-wide, like torch's global hooks
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        model.head(torch.randn(2, 72))  # a submodule called alone on this thread is a root
    log = recorder.log()
    assert balanced(log)
    theirs = [r for r in log.named("nn.Module:") if r.tid == tids[0]]
    assert names(theirs) == [
        "nn.Module: (Net)",
        "nn.Module: features (Sequential)",
        "nn.Module: features.0 (Conv2d)",
        "nn.Module: features.1 (ReLU)",
        "nn.Module: head (Linear)",
    ]
    assert [a.name for a in theirs[2].ancestors()] == ["nn.Module: features (Sequential)", "nn.Module: (Net)"]
    ours = [r for r in log.named("nn.Module:") if r.tid == threading.get_native_id()]
    assert names(ours) == ["nn.Module: head (Linear)"]


def _backward_roots(rec: Recorder, run: Callable[[torch.Tensor], Any]) -> tuple[NvtxLog, int]:
    """Record ranges for a small graph's backward, run by ``run(loss)``; returns (log, caller)."""
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 2, requires_grad=True)
    loss = torch.relu(x @ w).sum()
    run(loss)
    return rec.log(), threading.get_native_id()


def test_backward_nodes_are_sequential_and_hold_their_ops(recorder: Recorder) -> None:
    with emit_nvtx(backend="python"):
        log, caller = _backward_roots(recorder, lambda loss: loss.backward())  # type: ignore[no-untyped-call]
    assert balanced(log)
    nodes = [r for r in log.ranges if "Backward" in r.name or r.name == "torch::autograd::AccumulateGrad"]
    assert [n.name.split(",")[0] for n in nodes] == [
        "SumBackward0",
        "ReluBackward0",
        "MmBackward0",
        "torch::autograd::AccumulateGrad",
        "torch::autograd::AccumulateGrad",
    ]
    assert all(n.tid == caller and n.parent is None for n in nodes)  # one after the other, none nested
    for a, b in zip(nodes, nodes[1:]):
        assert a.end_ns is not None and a.end_ns <= b.start_ns
    mm = next(n for n in nodes if n.name.startswith("MmBackward0, stashed seq = "))
    assert [c.name.split(",")[0] for c in mm.children].count("aten::mm") == 2
    assert mm.name.endswith(f", fwd_tid = {caller}")


def test_nodes_run_on_another_thread_get_exact_ranges_there(recorder: Recorder) -> None:
    """A node run by a thread other than the caller (CUDA device threads) pops in a post-hook."""
    tids: list[int] = []

    def elsewhere(loss: torch.Tensor) -> None:
        def engine() -> None:
            tids.append(threading.get_native_id())
            torch.autograd.backward(loss)

        thread = threading.Thread(target=engine)
        thread.start()
        thread.join()

    def run(loss: torch.Tensor) -> None:
        push, pop = _nvtx_lib.load_emitter().ascii_push(), _nvtx_lib.load_emitter().pop
        run_backward_with_ranges(elsewhere, [loss], (loss,), {}, push, pop)

    log, caller = _backward_roots(recorder, run)
    assert balanced(log)
    nodes = [r for r in log.ranges if "Backward" in r.name or "AccumulateGrad" in r.name]
    assert len(nodes) == 5 and {n.tid for n in nodes} == {tids[0]} != {caller}
    assert all(n.parent is None for n in nodes)


def test_last_node_ends_before_final_callbacks(recorder: Recorder) -> None:
    x = torch.randn(3, requires_grad=True)
    seen: list[str] = []

    def queue_final(grad: torch.Tensor) -> None:
        def final() -> None:
            push = _nvtx_lib.load_emitter().push
            push("final callback")
            seen.append("ran")
            _nvtx_lib.load_emitter().pop()

        torch.autograd.Variable._execution_engine.queue_callback(final)

    with emit_nvtx(backend="python"):
        y = (x * 2).sum()
        x.register_hook(queue_final)  # type: ignore[no-untyped-call]
        y.backward()  # type: ignore[no-untyped-call]
    log = recorder.log()
    assert seen == ["ran"] and balanced(log)
    final = log.named("final callback")
    assert len(final) == 1 and final[0].parent is None


def test_reentrant_backward_nests_inside_its_node(recorder: Recorder) -> None:
    from torch.utils.checkpoint import checkpoint

    layer = torch.nn.Linear(3, 3)
    x = torch.randn(2, 3, requires_grad=True)
    with emit_nvtx(backend="python"):
        checkpoint(layer, x, use_reentrant=True).sum().backward()
    log = recorder.log()
    assert balanced(log)
    outer = log.named("CheckpointFunctionBackward, stashed seq = ")
    assert len(outer) == 1
    inner = {r.name.split(",")[0] for r in outer[0].descendants()}
    assert {"AddmmBackward0", "nn.Module: (Linear)"} <= inner  # recomputed forward and its backward


def test_exception_in_a_node_closes_its_range(recorder: Recorder) -> None:
    with pytest.raises(ValueError, match="boom in backward"):
        with emit_nvtx(backend="python"):
            (Bad.apply(torch.ones(2, requires_grad=True)) * 2).sum().backward()  # type: ignore[no-untyped-call]
    log = recorder.log()
    assert balanced(log)
    assert len(log.named("BadBackward, stashed seq = ")) == 1


def test_module_wrapper_traces_under_torch_compile(recorder: Recorder) -> None:
    """Dynamo inlines the wrapper; is_compiling() keeps the ctypes calls out of the graph."""
    import torch._dynamo  # first, so dynamo's record of the unpatched Module.__call__ is torch's

    model, x = Net(), torch.randn(2, 1, 8, 8)
    ranges = ModuleRanges(_nvtx_lib.load_emitter().ascii_push(), _nvtx_lib.load_emitter().pop)
    try:
        compiled = torch.compile(model, backend="eager", fullgraph=True)
        out = compiled(x)
    finally:
        ranges.remove()
        torch._dynamo.reset()
    assert torch.allclose(out, model(x))
    log = recorder.log()
    assert balanced(log)
    # the OptimizedModule wrapper itself ran eagerly; nothing inside the compiled graph pushed
    assert names(log.named("nn.Module:")) == ["nn.Module: (OptimizedModule)"]
