"""CPU training workloads for the memory oracle (issue 27), runnable two ways in a fresh interpreter.

Usage::

    python -m scripts.workloads.memory WORKLOAD nvbridge [OUT.json]   # emit_nvtx(profile_memory=True)
    python -m scripts.workloads.memory WORKLOAD ops [OUT.json]        # emit_nvtx(), no profile_memory
    python -m scripts.workloads.memory WORKLOAD torch OUT.json        # torch.profiler, no nvbridge

``nvbridge``: the loop under ``emit_nvtx(profile_memory=True)`` (run it under nsys or the test
collector), steps from ``nv.step()``; OUT.json (optional) says which backend ran and how many
allocator events were marked; ``ops`` is the same without profile_memory (the op ranges
to compare with). ``torch``: the same loop under ``torch.profiler.profile(
profile_memory=True)`` with nvbridge never imported, steps as ``record_function("ProfilerStep#N")``
scopes opened at the top of each iteration (what ``nv.step()`` marks); OUT.json holds torch's
``key_averages()`` (name, count, self and total CPU memory), every memory event torch recorded
(in time order: ts_ns, thread, device, bytes, total_allocated, total_reserved) and, per step, the
highest ``Total Allocated`` among the step's memory events.

Each workload builds its model, data and optimizer before recording starts (the allocations the
oracle compares are the training steps'), runs STEPS iterations, and is deterministic (seeded,
one intra-op thread), so two fresh processes allocate the same sizes in the same order.
Workloads: ``cnn``, ``transformer`` (scaled_dot_product_attention), ``rnn`` (LSTM + GRU),
``checkpoint`` (torch.utils.checkpoint), ``views`` (views and in-place ops), ``adam`` (an
optimizer whose state is allocated in the first step).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - torch's own convention
from torch import nn
from torch.utils.checkpoint import checkpoint

from scripts.workloads.loop import Training

STEPS = 3


def _sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.01)


def cnn() -> Training:
    """Conv / batch norm / pool / linear, SGD."""
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(16 * 16, 10),
    )
    batches = [(torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))) for _ in range(STEPS)]
    return Training(_sgd(model), batches, lambda b: F.cross_entropy(model(b[0]), b[1]))


class _Block(nn.Module):
    """Pre-norm attention block with scaled_dot_product_attention and an MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        out: torch.Tensor = x + self.mlp(self.norm2(x))
        return out


def transformer() -> Training:
    """Two attention blocks over token embeddings, SGD."""
    model = nn.Sequential(nn.Embedding(50, 32), _Block(32, 4), _Block(32, 4), nn.Linear(32, 50))
    batches = [torch.randint(0, 50, (2, 12)) for _ in range(STEPS)]
    return Training(_sgd(model), batches, lambda b: F.cross_entropy(model(b).flatten(0, 1), b.flatten()))


class _Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.gru = nn.GRU(16, 16, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(x)
        h, _ = self.gru(h)
        out: torch.Tensor = self.head(h[:, -1])
        return out


def rnn() -> Training:
    """A two-layer LSTM feeding a GRU, SGD."""
    model = _Recurrent()
    batches = [torch.randn(3, 7, 8) for _ in range(STEPS)]
    return Training(_sgd(model), batches, lambda b: model(b).square().mean())


def checkpointed() -> Training:
    """Four MLP blocks, the middle two recomputed in backward (torch.utils.checkpoint)."""
    blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32)) for _ in range(4))

    def forward(x: torch.Tensor) -> torch.Tensor:
        for i, block in enumerate(blocks):
            x = checkpoint(block, x, use_reentrant=False) if i in (1, 2) else block(x)
        return x

    batches = [torch.randn(16, 32) for _ in range(STEPS)]
    return Training(_sgd(blocks), batches, lambda b: forward(b).square().mean())


def views() -> Training:
    """Views (view, transpose, narrow, expand, slicing) and in-place ops on them, SGD."""
    lin = nn.Linear(12, 12)

    def forward(x: torch.Tensor) -> torch.Tensor:
        h = lin(x).view(4, 3, 12).transpose(0, 1)
        h = h.clone()
        h.narrow(2, 0, 6).mul_(2.0)
        h[:, 1].add_(1.0)
        h.relu_()
        h = h.reshape(12, 12) + x.t().expand(12, 12)
        h.masked_fill_(h > 3.0, 3.0)
        out: torch.Tensor = h.unsqueeze(0).squeeze(0).contiguous()
        return out

    batches = [torch.randn(12, 12) for _ in range(STEPS)]
    return Training(_sgd(lin), batches, lambda b: forward(b).sum())


def adam() -> Training:
    """An MLP under Adam: exp_avg and exp_avg_sq allocated in the first step, kept after."""
    model = nn.Sequential(nn.Linear(24, 48), nn.Tanh(), nn.Linear(48, 24))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = [torch.randn(8, 24) for _ in range(STEPS)]
    return Training(opt, batches, lambda b: model(b).square().mean())


WORKLOADS: dict[str, Callable[[], Training]] = {
    "cnn": cnn,
    "transformer": transformer,
    "rnn": rnn,
    "checkpoint": checkpointed,
    "views": views,
    "adam": adam,
}


def build(name: str) -> Training:
    """The workload, seeded, built before any recording starts."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    return WORKLOADS[name]()


class TorchSteps:
    """``record_function("ProfilerStep#N")`` opened at each call, the previous one closed (nv.step())."""

    def __init__(self) -> None:
        self.count = 0
        self.scope: contextlib.AbstractContextManager[Any] | None = None

    def __call__(self) -> None:
        self.close()
        self.scope = torch.profiler.record_function(f"ProfilerStep#{self.count}")
        self.scope.__enter__()  # type: ignore[no-untyped-call]
        self.count += 1

    def close(self) -> None:
        if self.scope is not None:
            self.scope.__exit__(None, None, None)
            self.scope = None


def _walk(nodes: list[Any]) -> Iterator[Any]:
    stack = list(reversed(nodes))
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children))


def torch_memory(prof: torch.profiler.profile) -> dict[str, Any]:
    """torch's own view: key_averages' memory columns, its memory events, each step's peak."""
    rows = [
        {
            "name": e.key,
            "count": e.count,
            "self_cpu_memory_usage": e.self_cpu_memory_usage,
            "cpu_memory_usage": e.cpu_memory_usage,
        }
        for e in prof.key_averages()
    ]
    tree = prof.profiler.kineto_results.experimental_event_tree()  # type: ignore[union-attr]
    allocation = torch._C._profiler._EventType.Allocation
    events, steps = [], []
    for node in _walk(tree):
        if node.tag == allocation:
            f = node.extra_fields
            device = str(f.device)  # torch.device: "cpu", "cuda:0"
            fields = [node.start_time_ns, node.start_tid, device, f.alloc_size, f.total_allocated, f.total_reserved]
            events.append(fields)
        elif node.name.startswith("ProfilerStep#"):
            steps.append(
                {"step": int(node.name.split("#")[1]), "start_ns": node.start_time_ns, "end_ns": node.end_time_ns}
            )
    events.sort(key=lambda e: e[0])
    for step in steps:
        inside = [e[4] for e in events if step["start_ns"] <= e[0] <= step["end_ns"]]
        step["events"] = len(inside)
        step["peak_total_allocated"] = max(inside, default=None)
    return {"key_averages": rows, "events": events, "steps": sorted(steps, key=lambda s: s["step"])}


def run_torch(name: str) -> dict[str, Any]:
    """The workload under torch.profiler(profile_memory=True); nvbridge is not imported."""
    assert "nvbridge" not in sys.modules, "the reference must not import nvbridge"
    training = build(name)
    steps = TorchSteps()
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True, record_shapes=False) as prof:
        training.run(steps)
        steps.close()
    return {"workload": name, **torch_memory(prof)}


def run_nvbridge(name: str, profile_memory: bool = True) -> dict[str, Any]:
    """The workload under emit_nvtx(profile_memory=...): the capture holds the marks."""
    import nvbridge
    from nvbridge.annotate import _observer

    training = build(name)
    with nvbridge.emit_nvtx(profile_memory=profile_memory) as nv:
        training.run(nv.step)
        backend, recording = nv.active_backend, nv.memory_recording
    observer = _observer.load() if backend == "observer" else None
    events = observer.memory_events() if observer is not None else 0
    return {"workload": name, "backend": backend, "memory_recording": recording, "events": events}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in WORKLOADS or argv[1] not in ("nvbridge", "ops", "torch"):
        print(f"usage: python -m scripts.workloads.memory {{{','.join(WORKLOADS)}}} {{nvbridge,ops,torch}} [OUT.json]")
        return 2
    if argv[1] == "torch" and len(argv) < 3:
        print("the torch mode needs OUT.json")
        return 2
    facts = run_torch(argv[0]) if argv[1] == "torch" else run_nvbridge(argv[0], argv[1] == "nvbridge")
    if len(argv) > 2:
        Path(argv[2]).write_text(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
