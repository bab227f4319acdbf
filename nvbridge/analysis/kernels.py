"""``summary --kernels``: which kernels take the time, per GPU, and the ops that launch them.

One row per (report, device, kernel name): calls, total, mean, min and max duration, the share
of that GPU's kernel time (as ``nsys stats``' cuda_gpu_kern_sum counts it: kernel durations
summed, overlaps counted twice), and the ops whose ranges launched it, by time. CUDA graph
launches traced whole (``nsys --cuda-graph-trace=graph``, kind ``graph``) are rows of their own
(``CUDA graph N``): their kernels are not listed one by one. A dataset is read a row group at a
time: the ops' names once (a name code per op id), then the GPU ops, aggregated columnar per
part; memory holds a code per op and the aggregates, not the rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.analysis.op_table import NO_OP
from nvbridge.columns import np_col
from nvbridge.conversion.memory import load_tables
from nvbridge.dataset.report import DatasetTables, is_partitioned, report_dirs

KINDS = ("kernel", "graph")
COLUMNS = ("report", "device_id", "device", "name", "calls", "total_ns", "mean_ns", "min_ns", "max_ns", "share", "ops")
TOP_OPS = 3  # the ops named per kernel, by time


@dataclass(frozen=True)
class LaunchingOp:
    """An op (by name; ``[no op]``: launched outside every op) and its time in one kernel."""

    op: str
    ns: int


@dataclass(frozen=True)
class KernelRow:
    """One kernel's figures on one GPU of one report."""

    report: str | None  # a partitioned dataset's report (rank); None for one report
    device_id: int
    device: str | None  # the GPU's name, where the report records it
    name: str
    calls: int
    total_ns: int
    min_ns: int
    max_ns: int
    gpu_kernel_ns: int  # this GPU's kernel time: what ``share`` divides by
    ops: tuple[LaunchingOp, ...]  # the TOP_OPS ops with most of its time, most first

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.calls

    @property
    def share(self) -> float:
        """Of this GPU's kernel time."""
        return self.total_ns / self.gpu_kernel_ns if self.gpu_kernel_ns else 0.0


def kernel_table(
    path: str | os.PathLike[str],
    *,
    device: int | None = None,
    name_regex: str | None = None,
    min_time_ns: int = 0,
    limit: int = -1,
) -> list[KernelRow]:
    """Kernels of a report, dataset or partitioned dataset (reports one at a time), each GPU's
    by total time, the largest first.

    Args:
        path: a report database, a dataset or a partitioned dataset.
        device: only this device's kernels.
        name_regex: only kernels whose name matches this regular expression (searched).
        min_time_ns: only kernels whose total is at least this.
        limit: rows per GPU (-1: all).

    Raises:
        NvbridgeError: a report or dataset that cannot be read.
    """
    out: list[KernelRow] = []
    partitioned = is_partitioned(path)
    for source in report_dirs(path) if partitioned else [path]:
        report = load_tables(source, streamed=True)
        label = (
            (f"rank {report.rank}" if report.rank is not None else report.meta.get("source")) if partitioned else None
        )
        for rows in _per_device(report, label, device):
            match = [True] * len(rows)
            if name_regex:  # RE2, as summary's --filter (analysis.check_regex checks it)
                match = pc.match_substring_regex(pa.array([r.name for r in rows], pa.string()), name_regex).to_pylist()
            kept = [r for r, m in zip(rows, match) if m and r.total_ns >= min_time_ns]
            out += kept[:limit] if limit >= 0 else kept
    return out


def _op_codes(report: DatasetTables) -> tuple[np.ndarray, list[str]]:
    """Each op id's name code (-1: no such op) and the names, from the ops' parts."""
    names: dict[str, int] = {}
    ids: list[np.ndarray] = []
    codes: list[np.ndarray] = []
    for chunk in report.chunks("ops", ["op_id", "op_name"]):
        enc = chunk.column("op_name").cast(pa.string()).fill_null("").combine_chunks().dictionary_encode()
        local = np.array([names.setdefault(v, len(names)) for v in enc.dictionary.to_pylist()], np.int64)
        ids.append(np_col(chunk, "op_id"))
        codes.append(local[np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64)])
    op_id = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    by_id = np.full(int(op_id.max()) + 1 if len(op_id) else 0, -1, np.int64)
    if len(op_id):
        by_id[op_id] = np.concatenate(codes)
    return by_id, list(names)


def _per_device(report: DatasetTables, label: str | None, device: int | None) -> Iterator[list[KernelRow]]:
    """The kernel rows of each GPU of one report, by total time."""
    by_id, op_names = _op_codes(report)
    totals, by_op = [], []
    for chunk in report.chunks("gpu_ops", ["device_id", "kind", "name", "op_id", "start_ns", "end_ns"]):
        keep = pc.is_in(chunk.column("kind").cast(pa.string()), pa.array(KINDS))
        if device is not None:
            keep = pc.and_(keep, pc.equal(chunk.column("device_id"), device))
        chunk = chunk.filter(pc.fill_null(keep, False))
        if not chunk.num_rows:
            continue
        op = np_col(chunk, "op_id", fill=-1)
        code = np.full(chunk.num_rows, -1, np.int64)  # -1: launched outside every op
        inside = (op >= 0) & (op < len(by_id))
        code[inside] = by_id[op[inside]]
        part = pa.table(
            {
                "device_id": pc.fill_null(chunk.column("device_id"), -1),
                "name": chunk.column("name").cast(pa.string()).fill_null(""),
                "op": code,
                "ns": np_col(chunk, "end_ns") - np_col(chunk, "start_ns"),
            }
        )
        totals.append(
            part.group_by(["device_id", "name"]).aggregate(
                [("ns", "count"), ("ns", "sum"), ("ns", "min"), ("ns", "max")]
            )
        )
        by_op.append(part.group_by(["device_id", "name", "op"]).aggregate([("ns", "sum")]))
    if not totals:
        return
    kernels = (
        pa.concat_tables(totals)
        .group_by(["device_id", "name"])
        .aggregate([("ns_count", "sum"), ("ns_sum", "sum"), ("ns_min", "min"), ("ns_max", "max")])
    )
    launched = _top_ops(pa.concat_tables(by_op), op_names)
    names = dict(zip(np_col(report.devices, "device_id", fill=-1).tolist(), report.devices.column("name").to_pylist()))
    for d in sorted(set(np_col(kernels, "device_id").tolist())):
        mine = kernels.filter(pc.equal(kernels.column("device_id"), d))
        mine = mine.sort_by([("ns_sum_sum", "descending"), ("name", "ascending")])
        gpu_ns = int(pc.sum(mine.column("ns_sum_sum")).as_py())
        yield [
            KernelRow(label, d, names.get(d), n, c, t, lo, hi, gpu_ns, launched.get((d, n), ()))
            for n, c, t, lo, hi in zip(
                mine.column("name").to_pylist(),
                mine.column("ns_count_sum").to_pylist(),
                mine.column("ns_sum_sum").to_pylist(),
                mine.column("ns_min_min").to_pylist(),
                mine.column("ns_max_max").to_pylist(),
            )
        ]


def _top_ops(parts: pa.Table, op_names: list[str]) -> dict[tuple[int, str], tuple[LaunchingOp, ...]]:
    """(device, kernel) -> the TOP_OPS op names with most of its time (ops of one name add up)."""
    label = np.asarray([*op_names, NO_OP], object)
    code = np_col(parts, "op")
    named = pa.table(
        {
            "device_id": parts.column("device_id"),
            "name": parts.column("name"),
            "op": pa.array(label[np.where(code >= 0, code, len(op_names))].tolist(), pa.string()),
            "ns": parts.column("ns_sum"),
        }
    )
    summed = named.group_by(["device_id", "name", "op"]).aggregate([("ns", "sum")])
    summed = summed.sort_by(
        [("device_id", "ascending"), ("name", "ascending"), ("ns_sum", "descending"), ("op", "ascending")]
    )
    out: dict[tuple[int, str], tuple[LaunchingOp, ...]] = {}
    for d, n, op, ns in zip(*(summed.column(c).to_pylist() for c in ("device_id", "name", "op", "ns_sum"))):
        have = out.get((d, n), ())
        if len(have) < TOP_OPS:
            out[(d, n)] = (*have, LaunchingOp(op, ns))
    return out
