"""Training workloads run twice: under torch.profiler alone (the reference) and under emit_nvtx.

Usage: ``python -m scripts.workloads.exact WORKLOAD MODE OUT.json`` with MODE ``reference`` (torch.profiler,
nvbridge not imported) or ``observer`` / ``python`` (emit_nvtx with that backend, the test
collector attached, and torch.profiler running too so the op multiset of both runs can be
compared: torch.profiler records what torch ran, whatever emits NVTX). Each run is a fresh
process, so sequence numbers (per-thread counters) are comparable between the runs.

OUT.json holds torch.profiler's ops: name, seq, thread, whether it ran in backward, and the
forward op each backward node is linked to by torch's own ``fwdbwd`` flows.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.checkpoint import checkpoint

from scripts.workloads.flops import held
from scripts.workloads.loop import Training

STEPS = 2
Annotate = Callable[[], contextlib.AbstractContextManager[Any]]
# Native ids of the worker threads a workload started (the reference cannot see their ops).
WORKER_TIDS: list[int] = []


class Scale(torch.autograd.Function):
    """A custom Function (its forward range is the class name, with a seq)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        return grad * w, (grad * x).sum(0)


def _train(
    model: torch.nn.Module, body: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, step: Callable[[], None]
) -> None:
    """STEPS iterations: forward through ``body``, a sum loss, backward, SGD."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def loss(batch: torch.Tensor) -> torch.Tensor:
        value = body(batch).sum()
        value.item()  # a sync every step, as real loops print the loss
        return value

    Training(opt, [x] * STEPS, loss).run(step)


def inplace(step: Callable[[], None]) -> None:
    """In-place ops that save a clone (mul_ by a tensor needing grad), 3-D linear bias, relu_."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    gain = torch.nn.Parameter(torch.ones(8))

    def body(x: torch.Tensor) -> torch.Tensor:
        h = lin(x)  # 3-D input: the bias add differs under a dispatch mode (add, not add_)
        h.mul_(gain)  # saves a clone of h first: the node is made before mul_ runs
        h = h.relu_()
        out: torch.Tensor = (h + 1.0).reshape(-1, 8)
        return out

    model = torch.nn.ModuleDict({"lin": lin})
    model.register_parameter("gain", gain)
    _train(model, body, torch.randn(2, 3, 8), step)


def checkpointed(step: Callable[[], None]) -> None:
    """torch.utils.checkpoint, reentrant and non-reentrant, around small MLP blocks."""
    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())
    b = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
    model = torch.nn.ModuleList([a, b])

    def body(x: torch.Tensor) -> torch.Tensor:
        h = checkpoint(a, x, use_reentrant=False)
        out: torch.Tensor = checkpoint(b, h, use_reentrant=True)
        return out

    _train(model, body, torch.randn(4, 8, requires_grad=True), step)


def rnn(step: Callable[[], None]) -> None:
    """A GRU then an LSTM over a short sequence."""
    torch.manual_seed(0)
    gru = torch.nn.GRU(6, 6, batch_first=True)
    lstm = torch.nn.LSTM(6, 4, batch_first=True)
    model = torch.nn.ModuleList([gru, lstm])

    def body(x: torch.Tensor) -> torch.Tensor:
        h, _ = gru(x)
        out, _ = lstm(h)
        result: torch.Tensor = out
        return result

    _train(model, body, torch.randn(2, 3, 6), step)


def function_copyslices(step: Callable[[], None]) -> None:
    """A custom Function, a list-of-tensors op (stack), and CopySlices (in-place into a slice)."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(6, 6)
    w = torch.nn.Parameter(torch.full((6,), 0.5))

    def body(x: torch.Tensor) -> torch.Tensor:
        h = Scale.apply(lin(x), w)  # type: ignore[no-untyped-call]
        buf = torch.zeros(4, 6)
        buf[1:3] = h[:2] * 2  # CopySlices wrapping MulBackward0 / CopyBackwards
        buf[0].add_(h[3])
        return torch.stack([buf, h]).sum(0)

    model = torch.nn.ModuleDict({"lin": lin})
    model.register_parameter("w", w)
    _train(model, body, torch.randn(4, 6), step)


def compiled(step: Callable[[], None]) -> None:
    """A torch.compile'd module (aot_eager backend: AOT autograd graphs, no C++ codegen)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.ReLU(), torch.nn.Linear(6, 2))
    fn = torch.compile(net, backend="aot_eager")
    fn(torch.randn(3, 6)).sum().backward()  # compile outside the measured run
    _train(net, fn, torch.randn(3, 6), step)


def _in_threads(count: int, target: Callable[[int], None], annotate: Annotate) -> None:
    """Run ``target(i)`` on ``count`` new threads at once, each annotated as emit_nvtx requires."""
    barrier = threading.Barrier(count)

    def body(i: int) -> None:
        WORKER_TIDS.append(threading.get_native_id())
        with annotate():
            barrier.wait()
            target(i)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def dp_threads(step: Callable[[], None], annotate: Annotate) -> None:
    """DataParallel-style: replicas' forwards run on two worker threads, backward on the main one."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    chunks = torch.randn(2, 4, 6).unbind(0)

    def loss(_: None) -> torch.Tensor:
        outputs: list[torch.Tensor] = [torch.empty(0)] * len(chunks)

        def replica(i: int) -> None:
            outputs[i] = net(chunks[i])

        _in_threads(len(chunks), replica, annotate)
        return torch.cat(outputs).sum()

    Training(opt, [None] * STEPS, loss).run(step)


def two_threads(step: Callable[[], None], annotate: Annotate) -> None:
    """Two threads train their own models at the same time (seq numbers collide across threads)."""

    def train(i: int) -> None:
        torch.manual_seed(i)
        # The two models differ in part (ReLU and GELU, one layer more), so some colliding seqs
        # name ops of different classes: there a node's fitting forward op is unique whatever the
        # threads' timing, and the converter must link it; where both fit, it must not guess.
        layers = [torch.nn.Linear(6, 6), torch.nn.ReLU() if i else torch.nn.GELU(), torch.nn.Linear(6, 2)]
        net = torch.nn.Sequential(*layers, *([torch.nn.Tanh()] if i else []))
        _train(net, net, torch.randn(3, 6), lambda: None)

    worker = threading.Thread(target=lambda: _in_threads(1, train, annotate))
    worker.start()
    train(1)  # the main thread trains too: the reference profiler sees this thread
    worker.join()


def flops(step: Callable[[], None]) -> None:
    """The held-out FLOPs workload (scripts/workloads/flops.py): every convolution shape class,
    every CPU attention kernel, a bfloat16-autocast MLP, einsum, baddbmm, AdamW."""
    held().run(step)


WORKLOADS: dict[str, Callable[[Callable[[], None], Annotate], None]] = {
    "inplace": lambda step, _: inplace(step),
    "checkpoint": lambda step, _: checkpointed(step),
    "rnn": lambda step, _: rnn(step),
    "function_copyslices": lambda step, _: function_copyslices(step),
    "compiled": lambda step, _: compiled(step),
    "dp_threads": dp_threads,
    "two_threads": two_threads,
    "flops": lambda step, _: flops(step),
}


def _flows(trace: dict[str, Any]) -> dict[tuple[int, float], tuple[int, float]]:
    """torch's fwdbwd flows: (tid, ts) of the backward node -> (tid, ts) of its forward op."""
    starts: dict[int, tuple[int, float]] = {}
    ends: dict[int, tuple[int, float]] = {}
    for e in trace["traceEvents"]:
        if e.get("cat") == "fwdbwd":
            (starts if e["ph"] == "s" else ends)[e["id"]] = (e["tid"], e["ts"])
    return {ends[i]: starts[i] for i in ends if i in starts}


def profiler_ops(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """Every CPU op of the exported trace with seq, thread and the forward op of backward nodes."""
    flows = _flows(trace)
    ops = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    by_place = {(e["tid"], e["ts"]): i for i, e in enumerate(ops)}
    out = []
    for e in ops:
        args = e.get("args", {})
        fwd = flows.get((e["tid"], e["ts"]))
        fwd_index = by_place.get(fwd) if fwd is not None else None
        out.append(
            {
                "name": e["name"],
                "tid": e["tid"],
                "ts": e["ts"],
                "dur": e.get("dur", 0),
                "seq": args.get("Sequence number", -1),
                "fwd_thread": args.get("Fwd thread id", 0),
                "fwd": None
                if fwd_index is None
                else [ops[fwd_index]["name"], ops[fwd_index]["args"].get("Sequence number", -1)],
            }
        )
    return out


@contextlib.contextmanager
def _profiled(path: str) -> Iterator[None]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        yield
    prof.export_chrome_trace(path)


def main() -> None:
    name, mode, out = sys.argv[1], sys.argv[2], sys.argv[3]
    workload = WORKLOADS[name]
    trace_path = out + ".trace.json"
    if mode == "reference":
        with _profiled(trace_path):
            workload(lambda: None, contextlib.nullcontext)
    else:
        from nvbridge.annotate import emit_nvtx

        def annotate() -> contextlib.AbstractContextManager[Any]:
            return emit_nvtx(backend=mode, record_shapes=True)  # type: ignore[arg-type]

        with _profiled(trace_path), emit_nvtx(backend=mode, record_shapes=True) as nv:  # type: ignore[arg-type]
            assert nv.active_backend == mode, nv.active_backend
            workload(nv.step, annotate)
    with open(trace_path) as f:
        trace = json.load(f)
    facts = {"ops": profiler_ops(trace), "main_tid": threading.get_native_id(), "workers": WORKER_TIDS}
    with open(out, "w") as f:
        json.dump(facts, f)


if __name__ == "__main__":
    main()
