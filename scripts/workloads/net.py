"""The small CNN + MLP the tests of emit_nvtx's mechanics train (tests/nvtx_inject/scenarios.py,
test_annotate_native, test_annotate_nsys): its module ranges are NET_MODULE_RANGES there.

``Double`` is a custom autograd Function (torch names its range by the class and gives it a seq),
``Bad`` one whose backward raises (its range must still close).
"""

from __future__ import annotations

from typing import Any

import torch

from scripts.workloads.loop import Training


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


def parts(momentum: float = 0.0) -> tuple[Net, torch.optim.SGD, torch.Tensor, torch.Tensor]:
    """Net, its SGD optimizer and one fixed batch of two 8x8 images with their targets, seeded."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=momentum)
    return model, opt, torch.randn(2, 1, 8, 8), torch.tensor([0, 2])


def steps_of(
    model: Net, opt: torch.optim.Optimizer, x: torch.Tensor, target: torch.Tensor, steps: int = 2, custom: bool = False
) -> Training:
    """SGD steps of ``model`` on one batch (``custom``: its output through ``Double``)."""

    def loss(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        out = model(batch[0])
        if custom:
            out = Double.apply(out)  # type: ignore[no-untyped-call]
        return torch.nn.functional.cross_entropy(out, batch[1])

    return Training(opt, [(x, target)] * steps, loss)


def net(steps: int = 2, custom: bool = False, momentum: float = 0.0) -> Training:
    """SGD steps of a fresh, seeded Net on its batch."""
    return steps_of(*parts(momentum), steps=steps, custom=custom)
