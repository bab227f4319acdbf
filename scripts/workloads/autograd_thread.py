#!/usr/bin/env python3
"""A CPU stand-in for the thread layout of a PyTorch training step on a GPU, for nsys to record.

    nsys profile -t nvtx,osrt ... python -m scripts.workloads.autograd_thread   (scripts/record/autograd.sh)

On a GPU, ``loss.backward()`` runs every backward kernel launch on torch's autograd device
thread ``pt_autograd_0`` while the calling (main) thread waits, and a DataLoader's
``pt_data_pin`` thread works for the main thread too. When the user marks only their own
ranges (``Forward``, ``Backward``), those threads launch GPU work with no range open on them.
This machine has no GPU, so the script reproduces the layout on the CPU and records where each
launch would happen:

- the main thread (``python``) opens ``ProfilerStep#N`` and inside it ``Forward``, ``Backward``
  and ``Optimizer``: push/pop ranges, the user's own, no per-op ranges;
- ``pt_autograd_0`` runs ``loss.backward()`` while the main thread waits inside ``Backward``;
- ``pt_data_pin`` prepares the next batch between steps, while the main thread has no range open;
- ``monitor`` opens its own ``monitor`` range for the length of each backward pass (a second
  thread with an open range at every backward launch: the tie the attribution rule decides);
- every aten op that would launch a kernel leaves an NVTX mark ``launch aten::<op>`` on the
  thread that ran it, and every batch tensor the pin thread prepares a mark ``copy <bytes>``:
  instants, not ranges, so no thread gains an open range. scripts/record/autograd_gpu.py turns each
  mark into a synthetic CUDA launch on that thread at that time.

The OS thread names are set with prctl(PR_SET_NAME), which is how nsys learns them (ThreadNames).
"""

from __future__ import annotations

import ctypes
import queue
import sys
import threading
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

STEPS = 3
BATCH, WIDTH = 16, 64
BATCH_BYTES = (BATCH * WIDTH * 4, BATCH * 8)  # float32 inputs, int64 labels
PR_SET_NAME = 15
# aten ops that only make views or empty tensors: no kernel on a real GPU.
NO_KERNEL = frozenset({"t", "view", "detach", "empty", "empty_like", "expand", "reshape", "_unsafe_view", "alias"})


def _nvtx() -> ctypes.CDLL:
    import nvidia.nvtx  # the libnvtx3interop wheel nvbridge.emit_nvtx also loads

    for base in nvidia.nvtx.__path__:
        lib = Path(base) / "lib" / "libnvtx3interop.so.1"
        if lib.exists():
            return ctypes.CDLL(str(lib))
    sys.exit("libnvtx3interop.so.1 not found: pip install nvidia-nvtx-cu12")


NVTX = _nvtx()


def push(text: str) -> None:
    NVTX.nvtxRangePushA(text.encode())


def pop() -> None:
    NVTX.nvtxRangePop()


def mark(text: str) -> None:
    NVTX.nvtxMarkA(text.encode())


def name_thread(name: str) -> None:
    """Name the calling OS thread (what ``comm`` and nsys show)."""
    ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode(), 0, 0, 0)


class LaunchMarks(TorchDispatchMode):
    """A mark per aten op that would launch a kernel, on the thread that ran it, when it ran."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func._schema.name  # "aten::addmm" (record_function's own ops are "profiler::...")
        if name.startswith("aten::") and name.removeprefix("aten::") not in NO_KERNEL:
            mark(f"launch {name}")
        return out


class Worker(threading.Thread):
    """A named thread running the jobs it is given, one at a time; ``run_job`` waits for one."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.jobs: queue.Queue[Any] = queue.Queue()
        self.done: queue.Queue[None] = queue.Queue()

    def start(self) -> None:
        # A new thread takes its creator's name at creation, which is when nsys reads it: name
        # the main thread for the moment it starts this one (and the new thread again, for ps).
        name_thread(self.name)
        try:
            super().start()
        finally:
            name_thread("python")

    def run(self) -> None:
        name_thread(self.name)
        while True:
            job = self.jobs.get()
            if job is None:
                return
            job()
            self.done.put(None)

    def start_job(self, job: Any) -> None:
        self.jobs.put(job)

    def wait(self) -> None:
        self.done.get()

    def run_job(self, job: Any) -> None:
        self.start_job(job)
        self.wait()


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    autograd, pin, monitor = Worker("pt_autograd_0"), Worker("pt_data_pin"), Worker("monitor")
    for w in (autograd, pin, monitor):
        w.start()
    monitor_stop = threading.Event()

    def watch() -> None:
        push("monitor")
        monitor_stop.wait()
        pop()

    batch: dict[str, torch.Tensor] = {}

    def load() -> None:
        batch["x"], batch["y"] = torch.randn(BATCH, WIDTH), torch.randint(0, 10, (BATCH,))
        for nbytes in BATCH_BYTES:
            mark(f"copy {nbytes}")

    for step in range(STEPS):
        pin.run_job(load)  # between steps: no range open on the main thread
        push(f"ProfilerStep#{step}")
        push("Forward")
        with LaunchMarks():
            loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])
        pop()
        push("Backward")
        monitor_stop.clear()
        monitor.start_job(watch)

        def backward(loss: torch.Tensor = loss) -> None:
            with LaunchMarks():
                loss.backward()

        autograd.run_job(backward)  # the main thread waits, as it does for the device thread
        monitor_stop.set()
        monitor.wait()
        pop()
        push("Optimizer")
        with LaunchMarks():
            opt.step()
            opt.zero_grad()
        pop()
        pop()
    # The workers stay alive to the end: nsys reads thread names from the running threads.


if __name__ == "__main__":
    main()
