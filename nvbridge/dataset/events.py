"""FunctionEvent views: one small object per op, made only when a user asks for it.

The tables stay columnar; a view holds its report's index and a row number and reads columns on
demand, so iterating a million-op report costs nothing until attributes are touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col


@dataclass(frozen=True, slots=True)
class Kernel:
    """A GPU op an op launched directly (kernel, memcpy, memset)."""

    name: str
    kind: str
    device: int | None
    stream: int | None
    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


class EventIndex:
    """Per-report lookups built once: column lists, children and GPU ops by op."""

    def __init__(self, ops: pa.Table, gpu_ops: pa.Table) -> None:
        self.cols: dict[str, list[Any]] = {}
        self.ops = ops
        parent = np_col(ops, "parent_id", fill=-1)
        order = np.argsort(parent, kind="stable")
        bounds = np.searchsorted(parent[order], np.arange(-1, ops.num_rows + 1))
        self.children_order, self.children_bounds = order, bounds
        g = gpu_ops
        op = np_col(g, "op_id", fill=-1)
        self.gpu_order = np.argsort(op, kind="stable")
        self.gpu_bounds = np.searchsorted(op[self.gpu_order], np.arange(-1, ops.num_rows + 1))
        self.gpu = g

    def col(self, name: str) -> list[Any]:
        if name not in self.cols:
            self.cols[name] = self.ops.column(name).to_pylist()
        return self.cols[name]

    def children(self, i: int) -> list[int]:
        lo, hi = self.children_bounds[i + 1], self.children_bounds[i + 2]
        return [int(x) for x in self.children_order[lo:hi]]

    def kernels(self, i: int) -> list[Kernel]:
        lo, hi = self.gpu_bounds[i + 1], self.gpu_bounds[i + 2]
        rows = self.gpu.take(self.gpu_order[lo:hi]).to_pylist()
        return [Kernel(r["name"], r["kind"], r["device_id"], r["stream_id"], r["start_ns"], r["end_ns"]) for r in rows]


@dataclass(frozen=True, slots=True)
class FunctionEvent:
    """One op (NVTX range) with torch-like accessors; see ``Report.events()``."""

    _index: EventIndex
    id: int

    def _get(self, column: str) -> Any:
        return self._index.col(column)[self.id]

    @property
    def name(self) -> str:
        return str(self._get("op_name"))

    @property
    def full_name(self) -> str:
        return str(self._get("name"))

    @property
    def thread(self) -> int:
        return int(self._get("thread_id"))

    @property
    def start_ns(self) -> int:
        return int(self._get("start_ns"))

    @property
    def end_ns(self) -> int:
        return int(self._get("end_ns"))

    @property
    def sequence_nr(self) -> int:
        seq = self._get("seq")
        return -1 if seq is None else int(seq)

    @property
    def input_shapes(self) -> str | None:
        value = self._get("input_shapes")
        return None if value is None else str(value)

    @property
    def module_path(self) -> str | None:
        value = self._get("module_path")
        return None if value is None else str(value)

    @property
    def is_backward(self) -> bool:
        return bool(self._get("is_backward"))

    @property
    def self_cpu_time_total_ns(self) -> int:
        return int(self._get("self_cpu_ns"))

    @property
    def self_device_time_total_ns(self) -> int:
        return int(self._get("self_gpu_ns"))

    @property
    def device_time_total_ns(self) -> int:
        return int(self._get("total_gpu_ns"))

    @property
    def kernels(self) -> list[Kernel]:
        return self._index.kernels(self.id)

    @property
    def cpu_parent(self) -> FunctionEvent | None:
        parent = self._get("parent_id")
        return None if parent is None else FunctionEvent(self._index, int(parent))

    @property
    def cpu_children(self) -> list[FunctionEvent]:
        return [FunctionEvent(self._index, i) for i in self._index.children(self.id)]

    @property
    def fwd_event(self) -> FunctionEvent | None:
        fwd = self._get("fwd_op_id")
        return None if fwd is None else FunctionEvent(self._index, int(fwd))

    def __repr__(self) -> str:
        return f"<FunctionEvent id={self.id} name={self.name!r} thread={self.thread} start_ns={self.start_ns}>"
