"""A small data-parallel training run over torch.distributed (gloo, CPU), for recording many ranks.

Usage (one process per rank; torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT)::

    torchrun --nproc-per-node 2 scripts/workloads/dist.py --steps 4 \
        [--straggler-rank 1 --straggler-step 2 --sleep-ms 40] [--waits waits.json]

Each rank trains the same MLP on its own batch under ``nvbridge.emit_nvtx`` (``ProfilerStep#N``
ranges, one per step). After backward the gradients are averaged with one explicit
``all_reduce`` of a flat tensor, then the loss with a second one (two collectives per step, the
same order on every rank). The planted straggler sleeps ``--sleep-ms`` inside a
``record_function("planted_sleep")`` range in step ``--straggler-step`` before that step's first
collective, so every other rank waits about that long in it.

``--waits`` is the oracle: each rank writes ``<waits>.rank<R>.json`` with, per collective, its own
wall-clock measurement of the time from entering the collective call to leaving it
(``time.perf_counter_ns``), the entry and exit on the wall clock (``time.time_ns``), the step and
the collective's sequence number. Nothing in it comes from nvbridge or Nsight Systems.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import nvbridge


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--straggler-rank", type=int, default=-1, help="the rank that sleeps (-1: none)")
    parser.add_argument("--straggler-step", type=int, default=-1, help="the step it sleeps in")
    parser.add_argument("--sleep-ms", type=float, default=0.0)
    parser.add_argument("--waits", type=Path, default=None, help="write <waits>.rank<R>.json (the oracle)")
    parser.add_argument("--width", type=int, default=64, help="hidden width of the MLP")
    return parser.parse_args(argv)


class Collectives:
    """Collective calls timed by the workload's own clocks, in issue order."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def all_reduce(self, tensor: torch.Tensor, step: int, what: str) -> None:
        wall = time.time_ns()
        start = time.perf_counter_ns()
        dist.all_reduce(tensor)
        end = time.perf_counter_ns()
        self.records.append(
            {
                "seq": len(self.records),
                "step": step,
                "op": "allreduce",
                "what": what,
                "bytes": tensor.numel() * tensor.element_size(),
                "enter_wall_ns": wall,
                "exit_wall_ns": wall + (end - start),
                "inside_ns": end - start,
            }
        )


def train(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The training loop; returns the timed collectives."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same model everywhere (as DDP broadcasts it)
    model = torch.nn.Sequential(torch.nn.Linear(32, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1 + rank)  # each rank its own data
    batches = [
        (torch.randn(16, 32, generator=gen), torch.randint(0, 10, (16,), generator=gen)) for _ in range(args.steps)
    ]
    timed = Collectives()
    with nvbridge.emit_nvtx() as nv:
        # start together once annotation is on (entering it costs each rank a different time):
        # the first step's waits are then the training's, not start-up's
        dist.barrier()
        for step, (x, y) in enumerate(batches):
            nv.step()  # ProfilerStep#<step>
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            if rank == args.straggler_rank and step == args.straggler_step:
                with torch.profiler.record_function("planted_sleep"):
                    time.sleep(args.sleep_ms / 1000)
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            flat = torch.cat([g.reshape(-1) for g in grads])
            timed.all_reduce(flat, step, "gradients")
            flat /= world
            offset = 0
            for g in grads:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()
            opt.step()
            total = loss.detach().reshape(1).clone()
            timed.all_reduce(total, step, "loss")
    return timed.records


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        records = train(args)
        rank = dist.get_rank()
        if args.waits is not None:
            meta = {
                "rank": rank,
                "world_size": dist.get_world_size(),
                "pid": os.getpid(),
                "straggler_rank": args.straggler_rank,
                "straggler_step": args.straggler_step,
                "sleep_ms": args.sleep_ms,
                "collectives": records,
            }
            path = args.waits.with_name(f"{args.waits.name}.rank{rank}.json")
            path.write_text(json.dumps(meta, indent=1) + "\n")
        with contextlib.suppress(RuntimeError):
            dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
