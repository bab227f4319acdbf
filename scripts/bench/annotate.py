"""Microseconds emit_nvtx adds per op and per training step, against no annotation and torch.profiler.

Usage: ``python -m scripts.bench.annotate [--ops N] [--steps N] [--repeat N] [--record-shapes]``.
All modes run in one process, in two phases:

1. No collector: ``baseline`` (no annotation), ``emit_nvtx, no collector`` (what a run pays when
   nsys is not attached: nothing is installed) and ``torch.profiler (CPU)``, for scale.
2. Collector attached: ``emit_nvtx observer, <collector>`` (the C++ RecordFunction observer),
   ``emit_nvtx python, <collector>``, ``emit_nvtx native`` on CUDA builds of torch (torch's own
   NVTX ranges, the reference the observer is held to), and ``baseline, collector phase`` again.
   Under ``nsys profile`` the collector is Nsight Systems itself; otherwise the test collector
   (scripts/workloads/collector.c) is compiled and attached here, writing its log to /dev/null.

``--record-shapes`` runs every emit_nvtx mode with ``record_shapes=True``: sizes, dtypes and, for
the ops whose FLOPs need them (the convolution workload's), argument values in every name.

Order matters: NVTX reads NVTX_INJECTION64_PATH at its first call, so the collector is attached
only after the modes that must run without one.

How each number is taken (the machine may be shared, and the first pass after a full
``gc.collect()`` runs slower while memory is faulted back in): within a phase the modes take
turns, round after round; each round collects garbage, enters the mode fresh, runs the workload
once untimed and then once timed. A mode's number is the median of its ``--repeat`` timed runs,
and the collector rows' "added" column is against the baseline measured in the same rounds.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from nvbridge.annotate import emit_nvtx
from scripts.workloads import samples
from scripts.workloads.collector import build_injection


def op_loop(n: int) -> Callable[[], None]:
    """n tiny adds that need no grad: the per-op overhead dominates."""
    x = torch.ones(4)

    def run() -> None:
        for _ in range(n):
            x.add(1)

    return run


def grad_op_loop(n: int) -> Callable[[], None]:
    """n tiny adds on a tensor that requires grad (each makes an autograd node)."""
    x = torch.ones(4, requires_grad=True)

    def run() -> None:
        for _ in range(n):
            x.add(1)

    return run


def conv_loop(n: int) -> Callable[[], None]:
    """n tiny 2-D convolutions that need no grad (with record_shapes their ranges carry values)."""
    x, w = torch.ones(1, 2, 4, 4), torch.ones(2, 2, 3, 3)

    def run() -> None:
        for _ in range(n):
            torch.nn.functional.conv2d(x, w, padding=1)

    return run


def train_step() -> Callable[[], None]:
    """One SGD step of sample_db/cnn_cpu's CNN (forward, backward, optimizer)."""
    return samples.cnn(steps=1).run


def timed(
    modes: dict[str, Callable[[], AbstractContextManager[object]]], body: Callable[[], None], repeat: int
) -> dict[str, float]:
    """Median seconds of one steady-state ``body()`` per mode, the modes taking turns each round."""
    samples: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(repeat):
        for name, ctx in modes.items():
            gc.collect()
            with ctx():
                body()  # untimed: first pass in a fresh context, memory faulted back in
                start = time.perf_counter()
                body()
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def count_ranges(body: Callable[[], None], backend: str = "python") -> int:
    """How many NVTX ranges one call of ``body`` emits: those through the Python emitter, plus
    for the C++ backends one per RecordFunction (torch.profiler counts the same records)."""
    from nvbridge.annotate import _nvtx_lib

    records = 0
    if backend != "python":
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            body()
        records = len(prof.events())

    counter = [0]
    real = _nvtx_lib.load_emitter()
    counting = _nvtx_lib.Emitter(
        push=lambda m: counter.__setitem__(0, counter[0] + 1), pop=lambda: None, source="count"
    )
    _nvtx_lib._cached = counting
    try:
        with emit_nvtx(backend="python" if backend == "python" else "observer"):
            # observer: its own ranges bypass the emitter; only modules are counted here
            body()
    finally:
        _nvtx_lib._cached = real
    return counter[0] + records


Modes = dict[str, Callable[[], AbstractContextManager[object]]]


def _collector_phase(saved: str | None, under_tool: bool, shapes: bool) -> tuple[Modes, str, str, str, str | None]:
    """The modes timed with an NVTX collector attached (nsys's, or the test collector built here):
    the modes, then the names of its baseline, the python and observer backends and the native
    one (None where torch has no CUDA)."""
    collector = "nsys" if under_tool else "test collector (collector.c)"
    if saved is not None:
        os.environ["NVTX_INJECTION64_PATH"] = saved
    else:
        lib = build_injection(Path(tempfile.mkdtemp()))
        os.environ["NVTX_INJECTION64_PATH"] = str(lib)
        os.environ["NVBRIDGE_NVTX_LOG"] = os.devnull
    with_collector = f"emit_nvtx python, {collector}"
    observer = f"emit_nvtx observer, {collector}"
    rebase = "baseline, collector phase"
    collector_modes: Modes = {
        rebase: nullcontext,
        observer: lambda: emit_nvtx(backend="observer", record_shapes=shapes),
        with_collector: lambda: emit_nvtx(backend="python", record_shapes=shapes),
    }
    # The native backend exists only where torch was built with CUDA (no GPU needed to run it).
    native = f"emit_nvtx native, {collector}" if torch.version.cuda else None
    if native:
        collector_modes[native] = lambda: emit_nvtx(backend="native", record_shapes=shapes)
    return collector_modes, rebase, with_collector, observer, native


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--record-shapes", action="store_true", help="emit_nvtx(record_shapes=True) in every mode")
    args = parser.parse_args()
    shapes = args.record_shapes
    torch.set_num_threads(1)
    under_tool = bool(os.environ.get("NVTX_INJECTION64_PATH"))
    saved = os.environ.pop("NVTX_INJECTION64_PATH", None)

    def steps(n: int) -> Callable[[], None]:
        one = train_step()

        def run() -> None:
            for _ in range(n):
                one()

        return run

    workloads = {
        "op (no grad)": (op_loop(args.ops), args.ops),
        "op (requires grad)": (grad_op_loop(args.ops), args.ops),
        "conv2d op": (conv_loop(args.ops // 10), args.ops // 10),
        "training step": (steps(args.steps), args.steps),
    }
    modes: dict[str, Callable[[], AbstractContextManager[object]]] = {
        "baseline": nullcontext,
        "emit_nvtx, no collector": lambda: emit_nvtx(record_shapes=shapes),
        "torch.profiler (CPU)": lambda: profile(activities=[ProfilerActivity.CPU]),
    }
    results: dict[tuple[str, str], float] = {}
    for wname, (body, _) in workloads.items():
        body()  # warm up
        for mname, seconds in timed(modes, body, args.repeat).items():
            results[(wname, mname)] = seconds

    collector_modes, rebase, with_collector, observer, native = _collector_phase(saved, under_tool, shapes)
    for wname, (body, _) in workloads.items():
        for mname, seconds in timed(collector_modes, body, args.repeat).items():
            results[(wname, mname)] = seconds
    ranges_per_step = count_ranges(train_step())
    observer_ranges = count_ranges(train_step(), "observer")

    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, median of {args.repeat} runs, record_shapes={shapes}")
    print(f"{'workload':<20} {'mode':<42} {'us/unit':>10} {'added us/unit':>14}")
    for wname, (_, units) in workloads.items():
        for phase, base_name in ((modes, "baseline"), (collector_modes, rebase)):
            base = results[(wname, base_name)] / units * 1e6
            for mname in phase:
                per = results[(wname, mname)] / units * 1e6
                print(f"{wname:<20} {mname:<42} {per:>10.2f} {per - base:>14.2f}")
    per_range: dict[str, float] = {}
    counted = [(with_collector, ranges_per_step), (observer, observer_ranges)]
    for mname, count in counted + ([(native, observer_ranges)] if native else []):
        added = (results[("training step", mname)] - results[("training step", rebase)]) / args.steps
        per_range[mname] = added / count * 1e6
        print(f"training step, {mname}: {count} ranges/step, {per_range[mname]:.2f} us added per range")
    if native:
        print(f"observer / native per range: {per_range[observer] / per_range[native]:.2f}x")
    else:
        print(
            f"native backend: not measured, torch {torch.__version__} is a CPU build (docs/annotate.md "
            "gives numbers measured with torch 2.14.1+cu130)"
        )


if __name__ == "__main__":
    main()
