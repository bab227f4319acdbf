"""Small CPU training loops recorded by scripts/record/samples.sh into sample_db/.

Usage: ``python -m scripts.workloads.samples {cnn,transformer_shapes,threads}``. Each runs two
training steps (forward, backward, optimizer step) under ``nvbridge.emit_nvtx`` with a
``ProfilerStep#N`` range per step. Models are tiny so the exported SQLite stays a few hundred KB.

``python -m scripts.workloads.samples exact WORKLOAD`` runs one of the workloads the observer is
checked on against torch.profiler (scripts/workloads/exact.py) under
``emit_nvtx(backend="observer", record_shapes=True)``, every thread it starts annotated too.

``python -m scripts.workloads.samples flops`` runs the held-out FLOPs workload
(scripts/workloads/flops.py: every convolution shape class, every CPU attention kernel,
a bfloat16-autocast MLP, einsum, baddbmm, AdamW) under the observer with ``record_shapes=True``
and module ranges: its FLOPs are checked against FlopCounterMode (tests/test_flops_sample.py).

The workloads (``cnn``, ``transformer``) are plain torch; the entry point annotates them.
"""

from __future__ import annotations

import sys
import threading

import torch

import nvbridge.annotate as annotate
from nvbridge.annotate import emit_nvtx
from scripts.workloads import flops
from scripts.workloads.exact import WORKLOADS
from scripts.workloads.loop import Training


class SmallCNN(torch.nn.Module):
    """conv-bn-relu-pool twice, then a linear classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(1, 4, 3, padding=1),
            torch.nn.BatchNorm2d(4),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(4, 8, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = torch.nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.classifier(self.features(x).flatten(1))
        return result


class TinyTransformer(torch.nn.Module):
    """Embedding, one pre-norm encoder layer (self-attention + MLP), and a vocabulary head."""

    def __init__(self, vocab: int = 50, dim: int = 16) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.encoder = torch.nn.TransformerEncoder(
            torch.nn.TransformerEncoderLayer(
                dim, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True, norm_first=True
            ),
            num_layers=1,
            enable_nested_tensor=False,
        )
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.head(self.encoder(self.embed(tokens)))
        return result


def cnn(steps: int = 2) -> Training:
    """SGD steps of SmallCNN on random 16x16 images."""
    torch.manual_seed(0)
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(4, 1, 16, 16), torch.randint(0, 10, (4,))
    return Training(opt, [(x, y)] * steps, lambda b: torch.nn.functional.cross_entropy(model(b[0]), b[1]))


def transformer(steps: int = 2) -> Training:
    """AdamW steps of TinyTransformer on random token sequences (next-token loss)."""
    torch.manual_seed(0)
    model = TinyTransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    tokens = torch.randint(0, 50, (2, 8))

    def loss(t: torch.Tensor) -> torch.Tensor:
        logits = model(t[:, :-1])
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 50), t[:, 1:].reshape(-1))

    return Training(opt, [tokens] * steps, loss)


def _annotated(training: Training, record_shapes: bool) -> None:
    with emit_nvtx(record_shapes=record_shapes) as nv:
        training.run(nv.step)


def _annotated_cnn() -> None:
    _annotated(cnn(), record_shapes=False)


def _annotated_transformer() -> None:
    _annotated(transformer(), record_shapes=True)


def _annotated_threads() -> None:
    """The main thread trains the CNN while a second Python thread trains its own copy."""

    def worker() -> None:
        with annotate.range("worker thread"):
            _annotated_cnn()

    thread = threading.Thread(target=worker, name="trainer-2")
    thread.start()
    with annotate.range("main thread"):
        _annotated_cnn()
    thread.join()


def _annotated_exact(workload: str) -> None:
    """One of test_annotate_exact's workloads under the observer backend."""
    with emit_nvtx(backend="observer", record_shapes=True) as nv:
        WORKLOADS[workload](nv.step, lambda: emit_nvtx(backend="observer", record_shapes=True))


def _annotated_flops() -> None:
    """The held-out FLOPs workload, two steps, under the observer backend."""
    flops.annotated("observer")


if __name__ == "__main__":
    torch.set_num_threads(1)  # fewer intra-op threads: smaller, easier-to-read reports
    if sys.argv[1] == "exact":
        _annotated_exact(sys.argv[2])
    else:
        workloads = {
            "cnn": _annotated_cnn,
            "transformer_shapes": _annotated_transformer,
            "threads": _annotated_threads,
            "flops": _annotated_flops,
        }
        workloads[sys.argv[1]]()
