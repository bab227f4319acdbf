"""Scenarios run in a subprocess under the test NVTX collector (scripts/workloads/collector.c).

Usage: ``python -m tests.nvtx_inject.scenarios SCENARIO OUT.json``. NVTX_INJECTION64_PATH must be set before Python
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
from scripts.workloads import samples
from scripts.workloads.net import Bad, Net, net, parts


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
    training = net(custom=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with emit_nvtx(record_shapes=record_shapes, backend="python") as nv:
            training.run(nv.step)
    return {"tid": threading.get_native_id(), "events": profiler_events(prof)}


def scenario_transformer() -> dict[str, Any]:
    """Attention, layer norm, embedding, dropout-free MLP and AdamW (the transformer sample's
    workload): a second op mix."""
    training = samples.transformer()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with emit_nvtx(record_shapes=True, backend="python") as nv:
            training.run(nv.step)
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
                net(steps=1).run()

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
        t.join()  # one after the other: the log then separates cleanly by thread
    return {"tid": threading.get_native_id(), "tids": tids}


def scenario_cross_thread() -> dict[str, Any]:
    """Forward on a worker thread, backward on the main thread."""
    model, _, x, target = parts()
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
        net(steps=1).run()
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
