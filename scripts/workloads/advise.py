"""CPU training loops with planted performance problems, recorded for ``nvbridge advise``/``diff``.

Usage: ``python -m scripts.workloads.advise {advise,diff_base,diff_extra,ranks}`` (run under
``nsys profile`` by scripts/record/advise.sh; see sample_db/README.md).

- ``advise``: a small MLP, 4 SGD steps under ``emit_nvtx``; each batch comes from a DataLoader
  whose dataset sleeps 2 ms per sample (a slow data loader: 16 ms per batch of 8), and each step
  reads the loss with ``.item()`` (``aten::item`` -> ``aten::_local_scalar_dense``, a host sync
  on a GPU). scripts/record/advise_gpu.py adds the synthetic GPU layer that makes these GPU problems.
- ``diff_base`` / ``diff_extra``: the same 3-step training loop of a two-block model with
  ``record_shapes=True``; ``diff_extra`` plants one change: block ``blocks.1`` multiplies by one
  more 64x64 matrix (one extra ``aten::mm`` per forward, in module ``blocks.1``).
- ``ranks``: two processes (``rank 0``, ``rank 1``; started as subprocesses, so one capture
  holds both) each run ``diff_base``'s loop for 3 steps; rank 1 is the straggler: it sleeps
  RANK1_SLEEP_S in every step, inside a ``straggler work`` range.
"""

from __future__ import annotations

import subprocess
import sys
import time

import torch

import nvbridge.annotate as annotate
from nvbridge.annotate import emit_nvtx
from scripts.workloads.loop import Training

SAMPLE_SLEEP_S = 0.002  # per sample: the slow data loader
RANK1_SLEEP_S = 0.005  # per step, on rank 1 only


class SlowDataset(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random samples that take SAMPLE_SLEEP_S each to "load"."""

    def __init__(self, n: int) -> None:
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 32, generator=gen)
        self.y = torch.randint(0, 10, (n,), generator=gen)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(SAMPLE_SLEEP_S)
        return self.x[i], self.y[i]


def slow_loader(steps: int = 4) -> Training:
    """MLP steps fed by a slow DataLoader (batches of 8)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(SlowDataset(8 * steps), batch_size=8, num_workers=0)
    return Training(opt, loader, lambda b: torch.nn.functional.cross_entropy(model(b[0]), b[1]))


def train_advise(steps: int = 4) -> None:
    """slow_loader's steps, with a ``loss.item()`` per step (the planted host sync)."""
    training = slow_loader(steps)
    losses: list[float] = []
    with emit_nvtx() as nv:
        training.run(nv.step, after=lambda loss: losses.append(loss.item()))
    print(f"mean loss {sum(losses) / steps:.4f}")


class Block(torch.nn.Module):
    """Linear + ReLU; with ``extra``, one more 64x64 matmul (the planted change)."""

    def __init__(self, extra: bool) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(64, 64)
        self.extra = torch.nn.Parameter(torch.randn(64, 64) / 8) if extra else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.linear(x))
        if self.extra is not None:
            x = torch.mm(x, self.extra)
        return x


class TwoBlocks(torch.nn.Module):
    """blocks.0, blocks.1 (the one that changes), then a head."""

    def __init__(self, extra: bool) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(Block(False), Block(extra))
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.head(self.blocks(x))
        return result


def two_blocks(extra: bool, steps: int = 3) -> Training:
    """SGD steps of TwoBlocks on one fixed batch of 16."""
    torch.manual_seed(0)
    model = TwoBlocks(extra)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))
    return Training(opt, [(x, y)] * steps, lambda b: torch.nn.functional.cross_entropy(model(b[0]), b[1]))


def straggle(_loss: torch.Tensor) -> None:
    with annotate.range("straggler work"):
        time.sleep(RANK1_SLEEP_S)


def train_diff(extra: bool, steps: int = 3, straggler: bool = False) -> None:
    """two_blocks' steps with record_shapes (``straggler``: sleep in each step)."""
    training = two_blocks(extra, steps)
    with emit_nvtx(record_shapes=True) as nv:
        training.run(nv.step, after=straggle if straggler else None)


def run_ranks() -> None:
    """Two rank processes, started at once, waited for."""
    procs = [subprocess.Popen([sys.executable, "-m", "scripts.workloads.advise", "rank", str(r)]) for r in (0, 1)]
    if any(p.wait() for p in procs):
        sys.exit("a rank process failed")


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1] == "advise":
        train_advise()
    elif sys.argv[1] == "ranks":
        run_ranks()
    elif sys.argv[1] == "rank":
        train_diff(extra=False, straggler=sys.argv[2] == "1")
    else:
        train_diff(extra={"diff_base": False, "diff_extra": True}[sys.argv[1]])
