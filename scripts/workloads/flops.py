"""A held-out training workload for FLOPs: every convolution shape class, every attention kernel
torch dispatches to on CPU, a bfloat16-autocast MLP, einsum, baddbmm, AdamW.

Usage: ``python -m scripts.workloads.flops MODE OUT.json``. MODE ``reference`` counts each pass with
torch's FlopCounterMode (nvbridge is never imported): per pass (``forward``, ``backward``,
``optimizer``) and step, FLOPs per aten op. FlopCounterMode's registry has no CPU flash
attention (``_scaled_dot_product_flash_attention_for_cpu`` and its backward); the reference maps
them to torch's own formulas for the CUDA flash kernel, whose schema starts the same way
(query, key, value, ...; grad_out, query, key, value, ...). MODE ``observer`` or ``python`` runs
the same steps under ``emit_nvtx(backend=MODE, record_shapes=True)`` (the test collector
attached), each step a ``ProfilerStep#N`` range.

The model is small (a few hundred thousand FLOPs a step) and seeded: every run is the same
program on the same shapes.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from scripts.workloads.loop import Training

STEPS = 2


class Held(torch.nn.Module):
    """Convolutions of every shape class, attention of every CPU kernel, an autocast MLP."""

    def __init__(self) -> None:
        super().__init__()
        conv = torch.nn
        self.strided = conv.Conv2d(3, 8, 3, stride=2, padding=1)  # the first layer: no input gradient
        self.grouped = conv.Conv2d(8, 8, 3, padding=2, dilation=2, groups=4)  # grouped and dilated
        self.depthwise = conv.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.transposed = conv.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.grouped_t = conv.ConvTranspose1d(4, 6, 4, stride=2, groups=2, dilation=2)
        self.conv1d = conv.Conv1d(6, 6, 5, stride=3, padding=2, bias=False)
        self.conv3d = conv.Conv3d(2, 4, (2, 3, 3), stride=(1, 2, 1), padding=(0, 1, 1))
        self.attn = conv.MultiheadAttention(16, 2, batch_first=True)
        self.attn_w = conv.MultiheadAttention(16, 4, batch_first=True)
        self.mlp = conv.Sequential(conv.Linear(16, 32), conv.GELU(), conv.Linear(32, 16))
        self.out = conv.Linear(16, 8)

    def forward(self, image: torch.Tensor, seq: torch.Tensor, vol: torch.Tensor) -> torch.Tensor:
        y = self.transposed(F.relu(self.depthwise(self.grouped(self.strided(image)))))  # (2, 4, 16, 16)
        z = self.conv1d(self.grouped_t(y.flatten(2)[:, :, :40]))
        v = self.conv3d(vol)
        length = seq.shape[1]
        mask = torch.randn(length, length)  # a float mask: the CPU flash kernel
        a, _ = self.attn(seq, seq, seq, attn_mask=mask, need_weights=False)
        b, _ = self.attn_w(a, a, a, need_weights=True)  # weights asked for: baddbmm/bmm in torch
        q = b.view(2, length, 4, 4).transpose(1, 2)
        kv = q[:, :2]
        c = F.scaled_dot_product_attention(q, q, q, is_causal=True)  # CPU flash, causal
        c = c + F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)  # grouped-query heads
        c = c + F.scaled_dot_product_attention(q, q, q, dropout_p=0.25)  # dropout: the math path
        with sdpa_kernel(SDPBackend.MATH):
            c = c + F.scaled_dot_product_attention(q, q, q, attn_mask=mask > 0)  # math, a bool mask
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = self.mlp(c.transpose(1, 2).reshape(2, length, 16))
        e = torch.einsum("bld,bmd->blm", h.float(), seq)
        f = torch.baddbmm(e, e, e.transpose(1, 2), beta=0.5, alpha=2.0)
        g = torch.baddbmm(e, e, e, beta=0.0)
        total: torch.Tensor = z.sum() + v.sum() + self.out(a).sum() + f.sum() + g.sum()
        return total


def inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    image = torch.randn(2, 3, 16, 16)
    seq = torch.randn(2, 10, 16, requires_grad=True)
    vol = torch.randn(1, 2, 3, 8, 6)
    return image, seq, vol


def held() -> Training:
    """STEPS steps of forward, backward and AdamW of Held on fixed inputs, seeded."""
    torch.manual_seed(0)
    model = Held()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    image, seq, vol = inputs()
    return Training(opt, [(image, seq, vol)] * STEPS, lambda b: model(*b))


def reference() -> dict[str, Any]:
    """FlopCounterMode's counts, per pass, summed over the steps: {pass: {aten op: flops}}."""
    from torch.utils import flop_counter
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    # torch's own formulas for its CUDA flash kernel and that kernel's backward, unwrapped: the
    # registered ones already take tensors, and FlopCounterMode wraps a custom mapping again.
    cpu_flash = {
        aten._scaled_dot_product_flash_attention_for_cpu: cast(Any, flop_counter.sdpa_flop).__wrapped__,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: cast(
            Any, flop_counter.sdpa_backward_flop
        ).__wrapped__,
    }
    counts: dict[str, dict[str, int]] = {}

    @contextlib.contextmanager
    def phase(name: str) -> Iterator[None]:
        with FlopCounterMode(display=False, custom_mapping=cpu_flash) as mode:
            yield
        mine = counts.setdefault(name, {})
        for op, flops in mode.get_flop_counts().get("Global", {}).items():
            mine[str(op)] = mine.get(str(op), 0) + int(flops)

    held().run(phase=phase)
    return {"passes": counts}


def annotated(backend: str) -> dict[str, Any]:
    from nvbridge.annotate import emit_nvtx

    with emit_nvtx(backend=backend, record_shapes=True, modules=True) as nv:  # type: ignore[arg-type]
        assert nv.active_backend == backend, nv.active_backend
        held().run(nv.step)  # built inside the annotation, as recorded in sample_db/flops_cpu.sqlite
    return {"backend": backend}


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    facts = reference() if mode == "reference" else annotated(mode)
    with open(out, "w") as f:
        json.dump(facts, f)


if __name__ == "__main__":
    main()
