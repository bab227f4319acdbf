"""Workloads run in a subprocess under the test NVTX collector (``inject.c``).

Usage: ``python workloads.py SCENARIO OUT.json``. NVTX_INJECTION64_PATH must be set before Python
starts, hence the subprocess. Each scenario writes facts the test cannot see from the NVTX log
(thread ids, torch.profiler's events, mode stacks after an exception) to OUT.json.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

import nvbridge.annotate as annotate
from nvbridge.annotate import emit_nvtx


class Net(torch.nn.Module):
    """A small CNN + MLP head: conv, relu, view, linear, loss, SGD step."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU())
        self.head = torch.nn.Linear(2 * 6 * 6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.head(self.features(x).flatten(1))
        return result


class Double(torch.autograd.Function):
    """A custom Function: torch names its range by the class and gives it a seq."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2


class Bad(torch.autograd.Function):
    """A custom Function whose backward raises: its range (BadBackward) must still close."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor) -> torch.Tensor:
        return t * 1

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise ValueError("boom in backward")


def setup() -> tuple[Net, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    """Model, optimizer and data, built before annotation starts (as a training script does)."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, opt, torch.randn(2, 1, 8, 8), torch.tensor([0, 2])


def train(
    steps: int,
    nv: emit_nvtx | None,
    custom: bool = False,
    state: tuple[Net, torch.optim.Optimizer, torch.Tensor, torch.Tensor] | None = None,
) -> None:
    """A few training steps of Net with an optimizer."""
    model, opt, x, target = state if state is not None else setup()
    for _ in range(steps):
        if nv is not None:
            nv.step()
        opt.zero_grad()
        out = model(x)
        if custom:
            out = Double.apply(out)  # type: ignore[no-untyped-call]
        loss = torch.nn.functional.cross_entropy(out, target)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()


def profiler_events(prof: Any) -> list[dict[str, Any]]:
    """torch.profiler's CPU events with the facts the seq comparison needs."""
    events = []
    for e in prof.events():
        parent = e.cpu_parent
        events.append(
            {
                "name": e.name,
                "seq": e.sequence_nr,
                "intercepted": any(c.name == "PythonDispatchMode" for c in e.cpu_children),
                "parent": parent.name if parent is not None else None,
                "parent_seq": parent.sequence_nr if parent is not None else None,
                "thread": e.thread,
                "fwd_thread": e.fwd_thread,
            }
        )
    return events


def scenario_profiled(record_shapes: bool) -> dict[str, Any]:
    state = setup()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with emit_nvtx(record_shapes=record_shapes, backend="python") as nv:
            train(2, nv, custom=True, state=state)
    return {"tid": threading.get_native_id(), "events": profiler_events(prof)}


def scenario_transformer() -> dict[str, Any]:
    """Attention, layer norm, embedding, dropout-free MLP and AdamW: a second op mix."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), layer, torch.nn.Linear(16, 50))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    tokens = torch.randint(0, 50, (2, 8))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with emit_nvtx(record_shapes=True, backend="python") as nv:
            for _ in range(2):
                nv.step()
                opt.zero_grad()
                logits = model(tokens[:, :-1])
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 50), tokens[:, 1:].reshape(-1))
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
    return {"tid": threading.get_native_id(), "events": profiler_events(prof)}


def scenario_double_backward() -> dict[str, Any]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with emit_nvtx(backend="python"):
            x = torch.randn(3, requires_grad=True)
            y = (x * x).sum()
            (g,) = torch.autograd.grad(y, x, create_graph=True)
            g.sum().backward()  # type: ignore[no-untyped-call]
    return {"tid": threading.get_native_id(), "events": profiler_events(prof)}


def scenario_threads() -> dict[str, Any]:
    tids: dict[str, int] = {}

    def worker(name: str) -> None:
        tids[name] = threading.get_native_id()
        with emit_nvtx(backend="python"):
            with annotate.range(f"thread {name}"):
                train(1, None)

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
        t.join()  # one after the other: the log then separates cleanly by thread
    return {"tid": threading.get_native_id(), "tids": tids}


def scenario_cross_thread() -> dict[str, Any]:
    """Forward on a worker thread, backward on the main thread."""
    model, _, x, target = setup()
    box: dict[str, Any] = {}

    def worker() -> None:
        box["tid"] = threading.get_native_id()
        with emit_nvtx(backend="python"):
            box["loss"] = torch.nn.functional.cross_entropy(model(x), target)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    with emit_nvtx(backend="python"):
        box["loss"].backward()
    return {"tid": threading.get_native_id(), "worker": box["tid"]}


_ORIGINAL_APPLY = torch.autograd.Function.__dict__["apply"]
_ORIGINAL_MODULE_CALL = torch.nn.Module.__dict__["__call__"]


def _state() -> dict[str, Any]:
    """Everything emit_nvtx may install, to prove it is all gone."""
    from torch.nn.modules import module as module_mod

    return {
        "dispatch_modes": torch._C._len_torch_dispatch_stack(),
        "function_modes": torch._C._len_torch_function_stack(),
        "module_pre_hooks": len(module_mod._global_forward_pre_hooks),
        "module_hooks": len(module_mod._global_forward_hooks),
        # Identity with the object saved at import: works whether apply is a classmethod (2.13)
        # or a C descriptor (2.14), and a functools.wraps copy would not pass.
        "apply_is_original": torch.autograd.Function.__dict__["apply"] is _ORIGINAL_APPLY,
        # module ranges wrap Module.__call__ while annotation is on
        "module_call_is_original": torch.nn.Module.__dict__["__call__"] is _ORIGINAL_MODULE_CALL,
    }


def scenario_exception() -> dict[str, Any]:
    before = _state()
    errors = []
    model = Net()
    x = torch.randn(2, 1, 8, 8)

    def bad_hook(module: Any, args: Any) -> None:
        raise ValueError("boom in head")

    handle = model.head.register_forward_pre_hook(bad_hook)
    try:
        with emit_nvtx(backend="python") as nv:
            nv.step()
            with annotate.range("user range"):
                model(x)
    except ValueError as exc:
        errors.append(str(exc))
    handle.remove()

    try:
        with emit_nvtx(backend="python"):
            model(x).sum().backward()  # a clean backward first  # type: ignore[no-untyped-call]
            Bad.apply(torch.ones(2, requires_grad=True)).sum().backward()  # type: ignore[no-untyped-call]
    except ValueError as exc:
        errors.append(str(exc))
    return {"before": before, "after": _state(), "errors": errors}


def scenario_disabled() -> dict[str, Any]:
    before = _state()
    with emit_nvtx(enabled=False, backend="python") as nv:
        during = _state()
        nv.step()
        train(1, None)
    return {"before": before, "during": during, "after": _state()}


def scenario_reentry() -> dict[str, Any]:
    nv = emit_nvtx(backend="python")
    message = ""
    with nv:
        try:
            with nv:
                pass
        except RuntimeError as exc:
            message = str(exc)
        torch.ones(2) + 1
    decorated_calls = []

    @emit_nvtx(backend="python")
    def decorated() -> None:
        decorated_calls.append(torch._C._len_torch_dispatch_stack())
        torch.ones(2) * 3

    decorated()
    decorated()
    with emit_nvtx(backend="python"):
        decorated()  # nested on the same thread: must not emit each op twice
        torch.ones(2) - 1
    return {"message": message, "decorated_modes": decorated_calls, "after": _state()}


SCENARIOS = {
    "profiled": lambda: scenario_profiled(False),
    "profiled_shapes": lambda: scenario_profiled(True),
    "double_backward": scenario_double_backward,
    "transformer": scenario_transformer,
    "threads": scenario_threads,
    "cross_thread": scenario_cross_thread,
    "exception": scenario_exception,
    "disabled": scenario_disabled,
    "reentry": scenario_reentry,
}

if __name__ == "__main__":
    result = SCENARIOS[sys.argv[1]]()
    with open(sys.argv[2], "w") as fh:
        json.dump(result, fh)
