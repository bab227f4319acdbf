"""``key_averages`` over a report's whole tables (``Report.key_averages``), with the same device
and rank filters ``nvbridge summary`` applies a row group at a time (nvbridge.analysis.streamed).

A filter keeps the processes it names (nvbridge.dataset.ranks): ``rank`` that rank's, ``device``
the ones that ran GPU work on that GPU, and then every figure is theirs: their ops (CPU times,
calls), their GPU ops (of that device only, with ``device``), their ``[no op]`` time.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.analysis.op_table import Grouping, KeyAverages, finish
from nvbridge.columns import np_col, roll_up, sum_by
from nvbridge.dataset.ranks import Ranks, Recorded, ranks_of


def gpu_time_by_op(ops: pa.Table, gpu_ops: pa.Table, device: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(self, total) GPU ns per op row, optionally of one device.

    Over all devices these are the conversion's own ``self_gpu_ns`` / ``total_gpu_ns``; for one
    device they are summed again from that device's GPU ops and rolled up the op tree.
    """
    if device is None:
        return np_col(ops, "self_gpu_ns"), np_col(ops, "total_gpu_ns")
    # Ops in any row order (a dataset read without its op_id sort): ids -> row positions.
    ids = np_col(ops, "op_id")
    row = np.full(int(ids.max(initial=-1)) + 2, -1, np.int64)  # the last slot maps id -1 to -1
    row[ids] = np.arange(ops.num_rows)
    op = row[np.minimum(np_col(gpu_ops, "op_id", fill=-1), len(row) - 1)]
    op = np.where(np_col(gpu_ops, "device_id", fill=-1) == device, op, -1)
    self_ns = sum_by(op, np_col(gpu_ops, "end_ns") - np_col(gpu_ops, "start_ns"), ops.num_rows)
    return self_ns, roll_up(self_ns, row[np_col(ops, "parent_id", fill=-1)], np_col(ops, "depth"))


def selected(
    ops: pa.Table, gpu_ops: pa.Table, ranks: Ranks, device: int | None, rank: int | None
) -> tuple[pa.Table, pa.Table]:
    """The ops and GPU ops of the processes ``device`` and ``rank`` select (all: no filter), the
    GPU ops of ``device`` only."""
    processes = ranks.processes(rank, device)
    if processes is None:
        return ops, gpu_ops
    keep = list(processes)
    ops = ops.filter(pc.is_in(ops.column("process_id"), pa.array(keep, pa.int64())))
    owner = ranks.owner(np_col(gpu_ops, "process_id", fill=-1), np_col(gpu_ops, "device_id", fill=-1))
    mine = np.isin(owner, keep)
    if device is not None:
        mine &= np_col(gpu_ops, "device_id", fill=-1) == device
    return ops, gpu_ops.filter(pa.array(mine))


def key_averages(
    ops: pa.Table,
    gpu_ops: pa.Table,
    *,
    group_by_input_shape: bool = False,
    group_by_stack_n: int = 0,
    group_by_module: bool = False,
    top_level_events_only: bool = False,
    device: int | None = None,
    unattributed: bool = False,
    rank: int | None = None,
    recorded_rank: Recorded = None,
) -> KeyAverages:
    """Group ops like torch's ``EventList.key_averages``.

    Args:
        ops, gpu_ops: a report's tables (with the PyTorch columns).
        group_by_input_shape: one row per (name, input shapes).
        group_by_stack_n: one row per (name, first n stack frames) where ops carry a stack.
        group_by_module: one row per (name, enclosing module path).
        top_level_events_only: only ops without a parent range.
        device: only the processes that ran GPU work on this device, and GPU time of it only.
        unattributed: add a ``[no op]`` row for GPU ops launched outside every op.
        rank: only this rank's processes (nvbridge.dataset.ranks).
        recorded_rank: the rank(s) the report's capture recorded (``Report.recorded_ranks``).
    """
    if device is not None or rank is not None:
        ops, gpu_ops = selected(ops, gpu_ops, ranks_of(ops, gpu_ops, recorded_rank), device, rank)
    self_gpu, total_gpu = gpu_time_by_op(ops, gpu_ops, device)
    grouping = Grouping(group_by_input_shape, group_by_stack_n, group_by_module, top_level_events_only)
    agg = grouping.aggregate(ops, self_gpu, total_gpu)
    no_op: tuple[int, int] | None = None
    if unattributed:
        outside = np_col(gpu_ops, "op_id", fill=-1) < 0
        ns = int((np_col(gpu_ops, "end_ns") - np_col(gpu_ops, "start_ns"))[outside].sum())
        no_op = (int(outside.sum()), ns)
    return finish([agg], grouping, int(np.sum(np_col(ops, "self_cpu_ns"))), int(self_gpu.sum()), no_op)
