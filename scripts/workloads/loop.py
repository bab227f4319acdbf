"""The one training loop every workload runs: step, zero_grad, forward, backward, optimizer.

A workload builds its model, optimizer and data first (as a training script does, before any
annotation or counting starts) and returns a :class:`Training`; ``run`` is the loop. Each pass
runs inside ``phase(name)`` ("forward", "backward", "optimizer"): nothing by default,
FlopCounterMode where a test counts a pass's FLOPs. ``step`` opens the next ``ProfilerStep#N``
(emit_nvtx's ``nv.step``) at the top of each iteration; ``after`` runs once the optimizer stepped
(a ``loss.item()`` sync, a straggler's sleep).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

Phase = Callable[[str], contextlib.AbstractContextManager[Any]]


def no_phase(_name: str) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext()


def no_step() -> None:
    return None


@dataclass(frozen=True)
class Training:
    """A built workload: its optimizer, its batches (one per iteration) and its loss of a batch."""

    opt: torch.optim.Optimizer
    batches: Iterable[Any]
    loss: Callable[[Any], torch.Tensor]

    def run(
        self,
        step: Callable[[], None] = no_step,
        phase: Phase = no_phase,
        after: Callable[[torch.Tensor], None] | None = None,
    ) -> None:
        """One iteration per batch: ``step()``, zero_grad, ``loss(batch)``, backward, ``opt.step()``."""
        for batch in self.batches:
            step()
            self.opt.zero_grad()
            with phase("forward"):
                value = self.loss(batch)
            with phase("backward"):
                value.backward()  # type: ignore[no-untyped-call]
            with phase("optimizer"):
                self.opt.step()
            if after is not None:
                after(value)
