"""A made-up training loop at the level of the dataset: ops (with torch's names, autograd nodes
and optimizer ranges) and allocator events as the spec's memory table holds them, each block
labelled by the test with what it is. For the categories' and advice's unit tests; the recorded
tests check the same on real captures."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tests.memory_tables import memory_table

FLOAT = 4


@dataclass
class Fake:
    """Ops and allocator events of one thread, in time order, 10 ns apart."""

    ops: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    truth: dict[int, str] = field(default_factory=dict)  # address -> category, as labelled
    stack: list[int] = field(default_factory=list)
    t: int = 0
    next_address: int = 4096
    step: int | None = None

    def tick(self) -> int:
        self.t += 10
        return self.t

    @contextmanager
    def op(self, name: str, backward: bool = False, module: str | None = None) -> Iterator[int]:
        parent = self.stack[-1] if self.stack else None
        op_id = len(self.ops)
        row: dict[str, Any] = {
            "op_id": op_id,
            "parent_id": parent,
            "depth": len(self.stack),
            "op_name": name,
            "is_backward": backward,
            "module_path": module
            if module is not None
            else (self.ops[parent]["module_path"] if parent is not None else None),
            "start_ns": self.tick(),
            "end_ns": None,
            "thread_id": 7,
            "step": self.step,
        }
        self.ops.append(row)
        self.stack.append(op_id)
        try:
            yield op_id
        finally:
            self.stack.pop()
            row["end_ns"] = self.tick()

    def alloc(self, nbytes: int, truth: str) -> int:
        address = self.next_address
        self.next_address += 1 << 20
        self.truth[address] = truth
        self._event(address, nbytes)
        return address

    def free(self, address: int, nbytes: int) -> None:
        self._event(address, -nbytes)

    def _event(self, address: int, nbytes: int) -> None:
        op = self.stack[-1] if self.stack else None
        self.events.append(
            {"ts_ns": self.tick(), "bytes": nbytes, "address": address, "op_id": op, "thread_id": 7, "step": self.step}
        )

    def tables(self) -> tuple[pa.Table, pa.Table]:
        """(ops, memory) as the dataset holds them."""
        ops = pa.Table.from_pylist(
            self.ops,
            schema=pa.schema(
                [
                    ("op_id", pa.int64()),
                    ("parent_id", pa.int64()),
                    ("depth", pa.int64()),
                    ("op_name", pa.string()),
                    ("is_backward", pa.bool_()),
                    ("module_path", pa.string()),
                    ("start_ns", pa.int64()),
                    ("end_ns", pa.int64()),
                    ("thread_id", pa.int64()),
                    ("step", pa.int64()),
                ]
            ),
        )
        return ops, memory_table(self.events)


def mlp_adam(
    layers: int, batch: int, width: int, steps: int, set_to_none: bool = True, keep_loss: bool = False
) -> Fake:
    """A Linear+ReLU stack trained with Adam, each allocation as torch's CPU run makes it
    (weights built inside the capture; activations the ReLU outputs; grads by AccumulateGrad;
    exp_avg, exp_avg_sq and step per parameter), labelled. Layer i's ops are under module
    ``layers.i``."""
    f = Fake()
    params = []
    for _ in range(layers):
        with f.op("aten::empty"):
            params.append((f.alloc(width * width * FLOAT, "parameter"), width * width * FLOAT))
        with f.op("aten::empty"):
            params.append((f.alloc(width * FLOAT, "parameter"), width * FLOAT))
    x = None
    grads: list[tuple[int, int]] = []
    for step in range(steps):
        f.step = step
        with f.op(f"ProfilerStep#{step}"):
            if x is not None:
                f.free(*x)  # the previous batch dropped when the next one is made
            with f.op("aten::randn"):
                x = (f.alloc(batch * width * FLOAT, "other"), batch * width * FLOAT)
            saved = _forward(f, layers, batch, width)
            with f.op("aten::sum"):
                loss = (f.alloc(FLOAT, "other"), FLOAT)
            grads = _backward(f, saved, params, batch, width, grads, set_to_none)
            if not keep_loss:  # keep_loss: appended to a list, as a leaking loop does
                f.free(*loss)
            _adam(f, params, first=step == 0)
            with f.op("Optimizer.zero_grad#Adam.zero_grad"):
                if set_to_none:
                    for g in grads:
                        f.free(*g)
    return f


def _forward(f: Fake, layers: int, batch: int, width: int) -> list[tuple[int, int]]:
    saved = []
    size = batch * width * FLOAT
    for i in range(layers):
        with f.op("nn.Module: Linear", module=f"layers.{i} (Linear)"):
            with f.op("aten::addmm"):
                out = f.alloc(size, "temporary")
        with f.op("aten::relu", module=f"layers.{i} (ReLU)"):
            saved.append((f.alloc(size, "activation"), size))
        f.free(out, size)
    return saved


def _backward(
    f: Fake,
    saved: list[tuple[int, int]],
    params: list[tuple[int, int]],
    batch: int,
    width: int,
    grads: list[tuple[int, int]],
    set_to_none: bool,
) -> list[tuple[int, int]]:
    size = batch * width * FLOAT
    new = []
    for i in reversed(range(len(saved))):
        with f.op("autograd::engine::evaluate_function: ReluBackward0", backward=True):
            g = f.alloc(size, "temporary")
            f.free(*saved[i])
            f.free(g, size)
        for _, nbytes in (params[2 * i], params[2 * i + 1]):
            with f.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", backward=True):
                if set_to_none or not grads:
                    new.append((f.alloc(nbytes, "gradient"), nbytes))
    return new if new else grads


def _adam(f: Fake, params: list[tuple[int, int]], first: bool) -> None:
    with f.op("Optimizer.step#Adam.step"):
        for _, nbytes in params:
            if first:
                with f.op("aten::zeros_like"):
                    f.alloc(nbytes, "optimizer_state")
                    f.alloc(nbytes, "optimizer_state")
                with f.op("aten::scalar_tensor"):
                    f.alloc(FLOAT, "optimizer_state")
            with f.op("aten::sqrt"):
                tmp = f.alloc(nbytes, "temporary")
            f.free(tmp, nbytes)
