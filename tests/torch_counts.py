"""What torch counts, for the FLOP tests: FlopCounterMode's total while a call runs, record_shapes'
view of the arguments, and random tensors of a shape. Importing it skips the importing test
module when torch is absent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402


def counted(fn: Callable[[], Any]) -> int:
    """FLOPs torch's FlopCounterMode counts while ``fn`` runs."""
    with FlopCounterMode(display=False) as mode:
        fn()
    return int(mode.get_total_flops())


def t(*shape: int, device: str = "cpu", grad: bool = False) -> Any:
    return torch.randn(*shape, device=device, requires_grad=grad)


def shapes_of(*args: Any) -> list[tuple[int, ...]]:
    """record_shapes' view of the arguments: a tensor's sizes, ``()`` for anything else."""
    return [tuple(a.shape) if isinstance(a, torch.Tensor) else () for a in args]
