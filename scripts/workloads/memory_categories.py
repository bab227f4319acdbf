"""A Linear+ReLU stack trained with Adam, built inside ``emit_nvtx(profile_memory=True)``, for the
memory categories' recorded test (tests/test_memory_categories.py).

Usage (under ``nsys profile -t nvtx``)::

    python -m scripts.workloads.memory_categories OUT.json

The model is built inside the recording, so its parameters' allocations are seen; gradients are
kept across steps (``zero_grad(set_to_none=False)``), so at any time after the first backward
they are all live. OUT.json gives the shapes the test computes each category's bytes from:
layers, batch, width, steps, and the parameters' element counts and element size.
"""

from __future__ import annotations

import json
import sys

import torch
from torch import nn

import nvbridge

LAYERS, BATCH, WIDTH, STEPS = 4, 48, 64, 3


def main(out: str) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    with nvbridge.emit_nvtx(profile_memory=True) as nv:
        layers: list[nn.Module] = []
        for i in range(LAYERS):
            layers.append(nn.Linear(WIDTH, WIDTH))
            if i < LAYERS - 1:
                layers.append(nn.ReLU())
        model = nn.Sequential(*layers)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(STEPS):
            nv.step()
            opt.zero_grad(set_to_none=False)
            x = torch.randn(BATCH, WIDTH)
            loss = model(x).sum()
            loss.backward()
            opt.step()
    facts = {
        "layers": LAYERS,
        "batch": BATCH,
        "width": WIDTH,
        "steps": STEPS,
        "params": [p.numel() for p in model.parameters()],
        "element_size": 4,
    }
    with open(out, "w") as f:
        json.dump(facts, f)


if __name__ == "__main__":
    main(sys.argv[1])
