"""Small CPU training loops recorded by scripts/record_samples.sh into sample_db/.

Usage: ``python scripts/sample_workloads.py {cnn,transformer_shapes,threads}``. Each runs two
training steps (forward, backward, optimizer step) under ``nvbridge.emit_nvtx`` with a
``ProfilerStep#N`` range per step. Models are tiny so the exported SQLite stays a few hundred KB.

``python scripts/sample_workloads.py exact WORKLOAD`` runs one of the workloads the observer is
checked on against torch.profiler (tests/nvtx_inject/exact_workloads.py) under
``emit_nvtx(backend="observer", record_shapes=True)``, every thread it starts annotated too.

``python scripts/sample_workloads.py flops`` runs the held-out FLOPs workload
(tests/nvtx_inject/flops_workloads.py: every convolution shape class, every CPU attention kernel,
a bfloat16-autocast MLP, einsum, baddbmm, AdamW) under the observer with ``record_shapes=True``
and module ranges: its FLOPs are checked against FlopCounterMode (tests/test_flops_sample.py).
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import nvbridge.annotate as annotate  # noqa: E402
from nvbridge.annotate import emit_nvtx  # noqa: E402


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


def train_cnn(steps: int = 2, record_shapes: bool = False) -> None:
    """Two SGD steps of SmallCNN on random 16x16 images."""
    torch.manual_seed(0)
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(4, 1, 16, 16), torch.randint(0, 10, (4,))
    with emit_nvtx(record_shapes=record_shapes) as nv:
        for _ in range(steps):
            nv.step()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()


def train_transformer(steps: int = 2, record_shapes: bool = True) -> None:
    """Two AdamW steps of TinyTransformer on random token sequences."""
    torch.manual_seed(0)
    model = TinyTransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    tokens = torch.randint(0, 50, (2, 8))
    with emit_nvtx(record_shapes=record_shapes) as nv:
        for _ in range(steps):
            nv.step()
            opt.zero_grad()
            logits = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 50), tokens[:, 1:].reshape(-1))
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()


def train_threads() -> None:
    """The main thread trains the CNN while a second Python thread trains its own copy."""

    def worker() -> None:
        with annotate.range("worker thread"):
            train_cnn(steps=2)

    thread = threading.Thread(target=worker, name="trainer-2")
    thread.start()
    with annotate.range("main thread"):
        train_cnn(steps=2)
    thread.join()


def run_exact(workload: str) -> None:
    """One of test_annotate_exact's workloads under the observer backend."""
    from tests.nvtx_inject.exact_workloads import WORKLOADS

    with emit_nvtx(backend="observer", record_shapes=True) as nv:
        WORKLOADS[workload](nv.step, lambda: emit_nvtx(backend="observer", record_shapes=True))


def train_flops() -> None:
    """The held-out FLOPs workload, two steps, under the observer backend."""
    from tests.nvtx_inject.flops_workloads import annotated

    annotated("observer")


if __name__ == "__main__":
    torch.set_num_threads(1)  # fewer intra-op threads: smaller, easier-to-read reports
    if sys.argv[1] == "exact":
        run_exact(sys.argv[2])
    else:
        workloads = {
            "cnn": train_cnn,
            "transformer_shapes": train_transformer,
            "threads": train_threads,
            "flops": train_flops,
        }
        workloads[sys.argv[1]]()
