"""What holds the memory: each block a report's allocator events show, in one category.

torch's memory timeline (torch/profiler/_memory_profiler.py) categorizes tensors from a data-flow
graph of every op's inputs and outputs (which nvbridge's dataset does not have) plus the python
tracer's view of modules and optimizers. What the dataset has is each block's allocation and free,
the op open on the thread at each (``memory.op_id``), and that op's place in the op tree: under an
autograd node (``ops.is_backward``), under torch's ``Optimizer.step#...`` or
``Optimizer.zero_grad#...`` ranges, or elsewhere (the forward, and everything else of a step). So a
block's category follows from the *phase* it was allocated and freed in:

- ``temporary``: allocated and freed within one phase (the same forward, backward or optimizer
  step, with no other phase in between on its process);
- ``activation``: allocated in a forward, freed in a backward (saved for backward);
- ``gradient``: allocated in a backward and outliving it (AccumulateGrad keeps it as ``.grad``);
- ``optimizer_state``: allocated in an optimizer step and outliving it (Adam's ``exp_avg``);
- ``parameter``: allocated outside backward and optimizer, outliving a whole backward without
  being freed in one, and of the size of a gradient block (a parameter's gradient has its size:
  torch's "used to compute a gradient" test, by size instead of data flow);
- ``other``: the rest (inputs kept across a step, the loss, outputs held by the caller, blocks
  whose free or allocation the capture did not see).

docs/memory.md says where this can be wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col
from nvbridge.dataset.schema import ReportTables

CATEGORIES = ("parameter", "gradient", "optimizer_state", "activation", "temporary", "other")
PARAMETER, GRADIENT, OPTIMIZER_STATE, ACTIVATION, TEMPORARY, OTHER = range(len(CATEGORIES))
# Phases an op can be in (NONE: an event with no op open)
NONE, FORWARD, BACKWARD, OPTIMIZER, ZERO_GRAD = range(5)
PHASES = ("none", "forward", "backward", "optimizer", "zero_grad")
OPTIMIZER_STEP = r"^Optimizer\.step#"  # torch's optimizers' record_function names
OPTIMIZER_ZERO_GRAD = r"^Optimizer\.zero_grad#"
OPS_COLUMNS = ["op_id", "parent_id", "depth", "op_name", "is_backward", "module_path"]
MEMORY_COLUMNS = ["ts_ns", "process_id", "device", "address", "bytes", "op_id", "alloc_ns", "free_ns"]


def columns_of(report: ReportTables, name: str, columns: Sequence[str]) -> pa.Table:
    """Only ``columns`` of table ``name``, a row group at a time where the report was opened
    streamed: ``report.table`` reads every column of the table (the ops' shapes, stacks and
    names: 1.7 GB for 2M ops against 0.1 GB for the columns the categories need)."""
    parts = list(report.chunks(name, columns))
    return pa.concat_tables(parts) if len(parts) != 1 else parts[0]


def op_phases(ops: pa.Table) -> np.ndarray:
    """Per op id, its phase: its own (an autograd node, an optimizer step or zero_grad range)
    or else its parent's, FORWARD at the roots."""
    ids = np_col(ops, "op_id")
    n = int(ids.max(initial=-1)) + 1
    names = ops.column("op_name").cast(pa.string())
    own = np.full(n, -1, np.int8)
    own[ids[np_col(ops, "is_backward", fill=False).astype(bool)]] = BACKWARD
    own[ids[pc.match_substring_regex(names, OPTIMIZER_STEP).fill_null(False).to_numpy(zero_copy_only=False)]] = (
        OPTIMIZER
    )
    zero = pc.match_substring_regex(names, OPTIMIZER_ZERO_GRAD).fill_null(False).to_numpy(zero_copy_only=False)
    own[ids[zero]] = ZERO_GRAD
    parent = np.full(n, -1, np.int64)
    parent[ids] = np_col(ops, "parent_id", fill=-1)
    depth = np.zeros(n, np.int64)
    depth[ids] = np_col(ops, "depth")
    phase = np.where(own >= 0, own, FORWARD).astype(np.int8)
    for d in range(1, int(depth.max(initial=0)) + 1):  # parents first: the tree is shallow
        at = np.flatnonzero((depth == d) & (own < 0) & (parent >= 0))
        phase[at] = phase[parent[at]]
    return phase


def event_phases(memory: pa.Table, phase: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each memory row's phase (its op's; NONE without one) and phase instance: a number that
    changes each time its process's events move to another phase (events with no op open
    continue the phase before them), so two events share an instance when no other phase
    came between them."""
    op = np_col(memory, "op_id", fill=-1)
    known = (op >= 0) & (op < len(phase))
    ev = np.where(known, phase[np.where(known, op, 0)], NONE).astype(np.int8)
    process = np_col(memory, "process_id", fill=-1)
    order = np.lexsort((np.arange(len(op)), np_col(memory, "ts_ns"), process))
    p, e = process[order], ev[order]
    # carry the last known phase over events without one (and across nothing at a process's start)
    last = np.where(e != NONE, np.arange(len(e)), -1)
    starts = np.r_[True, p[1:] != p[:-1]] if len(p) else np.zeros(0, bool)
    last = np.maximum.accumulate(np.where(starts & (last < 0), np.arange(len(e)), last)) if len(e) else last
    carried = e[last] if len(e) else e
    change = np.r_[True, (carried[1:] != carried[:-1]) | starts[1:]] if len(e) else starts
    instance = np.empty(len(e), np.int64)
    instance[order] = np.cumsum(change)
    return ev, instance


@dataclass(frozen=True)
class Blocks:
    """One row per block whose allocation the capture saw: ``device``, ``process_id``,
    ``address``, ``bytes``, ``alloc_ns``, ``free_ns`` (null: still live at the end), ``op_id``
    (the allocating op), ``module_path``, ``category`` (index into CATEGORIES), and the
    phases it was allocated and freed in."""

    table: pa.Table

    def live_at(self, ts_ns: int, device: str) -> pa.Table:
        """The blocks of ``device`` live at ``ts_ns`` (allocated at or before, freed after it)."""
        t = self.table
        alloc, free = np_col(t, "alloc_ns"), np_col(t, "free_ns", fill=np.iinfo(np.int64).max)
        mine = pc.equal(t.column("device").cast(pa.string()), device).to_numpy(zero_copy_only=False)
        return t.filter(pa.array(mine & (alloc <= ts_ns) & (free > ts_ns)))

    def bytes_by_category(self, ts_ns: int, device: str) -> dict[str, int]:
        """Live bytes per category at ``ts_ns`` on ``device`` (every category, 0 where none)."""
        live = self.live_at(ts_ns, device)
        sums = np.bincount(np_col(live, "category"), np_col(live, "bytes"), len(CATEGORIES))
        return {c: int(v) for c, v in zip(CATEGORIES, sums)}


def _join_frees(memory: pa.Table, ev: np.ndarray, instance: np.ndarray) -> pa.Table:
    """The allocation rows with their free row's phase and instance (null where not seen)."""
    rows = memory.select(["process_id", "device", "address", "bytes", "alloc_ns", "free_ns", "op_id"])
    rows = rows.set_column(1, "device", rows.column("device").cast(pa.string()))
    rows = rows.append_column("phase", pa.array(ev, pa.int8())).append_column("instance", pa.array(instance))
    size = np_col(rows, "bytes", fill=0)
    allocs = rows.filter(pa.array(size > 0))
    frees = rows.filter(pa.array(size < 0)).select(["process_id", "device", "address", "alloc_ns", "phase", "instance"])
    frees = frees.rename_columns(["process_id", "device", "address", "alloc_ns", "free_phase", "free_instance"])
    keys = ["process_id", "device", "address", "alloc_ns"]
    return allocs.join(frees, keys, join_type="left outer", use_threads=False).sort_by(
        [("alloc_ns", "ascending"), ("address", "ascending")]
    )


def categorize(memory: pa.Table, ops: pa.Table) -> Blocks:
    """Every block of ``memory`` (the report's memory table) in a category, from ``ops``
    (columns OPS_COLUMNS)."""
    phase = op_phases(ops)
    ev, instance = event_phases(memory, phase)
    blocks = _join_frees(memory, ev, instance)
    a, f = np_col(blocks, "phase"), np_col(blocks, "free_phase", fill=-1)
    ai, fi = np_col(blocks, "instance"), np_col(blocks, "free_instance", fill=-1)
    freed = f >= 0
    category = np.full(blocks.num_rows, OTHER, np.int8)
    outlives = ~freed | (fi != ai)
    category[outlives & (a == BACKWARD)] = GRADIENT
    category[outlives & (a == OPTIMIZER)] = OPTIMIZER_STATE
    category[freed & (a == FORWARD) & (f == BACKWARD)] = ACTIVATION
    # a parameter outlives a whole backward (an instance of it began and ended while it lived),
    # is not freed in one, and has a gradient's size
    candidate = np.isin(a, (FORWARD, NONE)) & outlives & (f != BACKWARD)
    candidate &= _outlives_a_backward(blocks, memory, ev, instance)
    sized = _device_and_size(blocks)
    category[candidate & np.isin(sized, sized[category == GRADIENT])] = PARAMETER
    category[freed & (fi == ai)] = TEMPORARY
    module = _modules(ops, np_col(blocks, "op_id", fill=-1))
    table = blocks.select(["device", "process_id", "address", "bytes", "alloc_ns", "free_ns", "op_id"])
    table = table.append_column("module_path", module).append_column("category", pa.array(category))
    return Blocks(table.append_column("alloc_phase", pa.array(a, pa.int8())).append_column("free_phase", pa.array(f)))


def _outlives_a_backward(blocks: pa.Table, memory: pa.Table, ev: np.ndarray, instance: np.ndarray) -> np.ndarray:
    """Whether each block was live over a whole backward instance of its process: one that
    began after its allocation and ended before its free (or the capture's end)."""
    process = np_col(memory, "process_id", fill=-1)
    ts = np_col(memory, "ts_ns")
    back = ev == BACKWARD
    out = np.zeros(blocks.num_rows, bool)
    b_process = np_col(blocks, "process_id", fill=-1)
    alloc, free = np_col(blocks, "alloc_ns"), np_col(blocks, "free_ns", fill=np.iinfo(np.int64).max)
    for p in np.unique(b_process):
        mine = back & (process == p)
        if not mine.any():
            continue
        inst = instance[mine]
        first = np.full(int(inst.max()) + 1, np.iinfo(np.int64).max)
        last = np.full(int(inst.max()) + 1, np.iinfo(np.int64).min)
        np.minimum.at(first, inst, ts[mine])
        np.maximum.at(last, inst, ts[mine])
        used = np.unique(inst)
        starts, ends = first[used], last[used]
        rows = np.flatnonzero(b_process == p)
        # the first backward starting after the allocation: does it end before the free?
        k = np.searchsorted(starts, alloc[rows], side="right")
        ok = k < len(starts)
        out[rows[ok]] = ends[k[ok]] < free[rows[ok]]
    return out


def _device_and_size(blocks: pa.Table) -> np.ndarray:
    """One number per block for its (device, bytes): the device's code above the size's 48 bits."""
    codes = pc.dictionary_encode(blocks.column("device")).combine_chunks().indices.to_numpy(zero_copy_only=False)
    key: np.ndarray = (codes.astype(np.int64) << 48) | np_col(blocks, "bytes", fill=0)
    return key


def _modules(ops: pa.Table, op: np.ndarray) -> pa.Array:
    """The module path of each op id in ``op`` (null for -1 or an op without one)."""
    ids = np_col(ops, "op_id")
    row = np.full(int(ids.max(initial=-1)) + 2, -1, np.int64)
    row[ids] = np.arange(ops.num_rows)
    at = row[np.where((op >= 0) & (op < len(row) - 1), op, len(row) - 1)]
    paths = ops.column("module_path").combine_chunks().cast(pa.string())
    return pc.take(paths, pa.array(at, mask=at < 0))


def row_categories(memory: pa.Table, blocks: Blocks) -> np.ndarray:
    """The category of each row of ``memory`` (its block's: an allocation's and its free's),
    -1 where the block's allocation was not seen (a free of a block older than the capture)."""
    keys = ["process_id", "device", "address", "alloc_ns"]
    rows = memory.select(keys)
    rows = rows.set_column(1, "device", rows.column("device").cast(pa.string()))
    rows = rows.append_column("row", pa.array(np.arange(memory.num_rows, dtype=np.int64)))
    joined = rows.join(blocks.table.select([*keys, "category"]), keys, join_type="left outer", use_threads=False)
    out = np.full(memory.num_rows, -1, np.int8)
    out[np_col(joined, "row")] = np_col(joined, "category", fill=-1)
    return out
