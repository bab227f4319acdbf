"""Model FLOPs and MFU per ``ProfilerStep#N`` (formulas in nvbridge.analysis.throughput and
docs/flops.md), read a part of the ops at a time.

A report whose ops record no FLOPs is settled from the Parquet statistics, one whose ops record
no matmul, convolution or attention cost by one pass over three columns; otherwise a second
pass keeps each op's parent (4 bytes an op) and a third sums the counted FLOPs by step and
precision.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.analysis.gpu import gpu_header
from nvbridge.columns import np_col
from nvbridge.dataset.report import DatasetTables
from nvbridge.engine.costs import flops as costs
from nvbridge.gpu.peaks import Peaks

FIGURE_COLUMNS = ["op_id", "op_name", "compute_dtype", "flops", "dtype_assumed", "step", "start_ns", "end_ns"]


class _ModelOps:
    """Which op names are matmuls, convolutions or attention (flops.is_model_op), each
    distinct name asked once."""

    def __init__(self) -> None:
        self._known: dict[str, bool] = {}

    def costed(self, ops: pa.Table) -> np.ndarray:
        """Rows of ``ops`` that are model ops with known FLOPs."""
        known: np.ndarray = np.asarray(ops.column("flops").is_valid().to_numpy(zero_copy_only=False))
        out: np.ndarray = known & self.mask(ops.column("op_name"))
        return out

    def mask(self, names: pa.ChunkedArray | pa.Array) -> np.ndarray:
        encoded = pc.fill_null(names.cast(pa.string()), "")
        encoded = (encoded.combine_chunks() if isinstance(encoded, pa.ChunkedArray) else encoded).dictionary_encode()
        words = encoded.dictionary.to_pylist()
        model = np.array([self._known.setdefault(w, costs.is_model_op(w)) for w in words], bool)
        return model[np.asarray(encoded.indices.to_numpy(zero_copy_only=False), np.int64)] if len(words) else model


def counted_once(report: DatasetTables) -> np.ndarray | None:
    """Per op id, whether its FLOPs count toward model FLOPs: a model op with known FLOPs and
    no such op among its ancestors (None: no op counts)."""
    n = report.rows("ops")
    if not n or report.all_null("ops", "flops"):
        return None
    model = _ModelOps()
    candidates = [np_col(c, "op_id")[model.costed(c)] for c in report.chunks("ops", ["op_id", "op_name", "flops"])]
    known_ids = np.concatenate(candidates) if candidates else np.zeros(0, np.int64)
    if not len(known_ids):
        return None
    known = np.zeros(n + 1, bool)  # by op id; the last slot stands for "no parent"
    known[known_ids] = True
    parent = np.full(n + 1, -1, np.int32 if n < 2**31 - 1 else np.int64)
    top = 0
    for chunk in report.chunks("ops", ["op_id", "parent_id", "depth"]):
        parent[np_col(chunk, "op_id")] = np_col(chunk, "parent_id", fill=-1)
        top = max(top, int(np_col(chunk, "depth").max(initial=0)))
    covered = np.zeros(len(known_ids), bool)
    up = parent[known_ids]
    for _ in range(top + 1):  # one ancestor level a turn; depth bounds the walk even on a damaged tree
        live = up >= 0
        if not live.any():
            break
        covered[live] |= known[up[live]]
        up[live] = parent[up[live]]
    once = np.zeros(n + 1, bool)
    once[known_ids[~covered]] = True
    return once


def model_flops(
    report: DatasetTables, peaks: Peaks | None, gpus: int, span_ns: int | None = None, processes: set[int] | None = None
) -> dict[str, Any]:
    """Model FLOPs, their precision and MFU per ``ProfilerStep#N`` of ``report``, on ``gpus``
    GPUs (those that ran GPU ops; at least 1), and over the whole GPU timeline: ``span_ns``,
    the GPU timelines summed over GPUs (nvbridge.dataset.timeline: first to last GPU op of each, the
    start-up before it left out), so MFU = FLOPs / (span_ns x peak). ``processes``: only these
    processes' ops and steps (a rank's: nvbridge.dataset.ranks)."""
    if "flops" not in report.column_names("ops"):
        return {"flops": None, "unknown": "the dataset has no cost columns; convert the report again", "steps": []}
    once = counted_once(report)
    if once is None:
        return {"flops": None, "unknown": "no matmul, convolution or attention op records its shapes", "steps": []}
    per_kind: dict[str, int] = {}  # (name, dtype) in order of first appearance -> counted FLOPs
    by_step: dict[int, int] = {}
    step_rows: list[tuple[int, int]] = []  # (N, wall ns) of each ProfilerStep range, in row order
    total = assumed = 0
    columns = FIGURE_COLUMNS + (["process_id"] if processes is not None else [])
    for chunk in report.chunks("ops", columns):
        if processes is not None:
            chunk = chunk.filter(pc.is_in(chunk.column("process_id"), pa.array(sorted(processes), pa.int64())))
        mine = once[np_col(chunk, "op_id")]
        f = np_col(chunk, "flops", fill=0)
        names = chunk.column("op_name").cast(pa.string()).fill_null("")
        dtypes = chunk.column("compute_dtype").cast(pa.string()).fill_null("")
        kind = pc.binary_join_element_wise(names, dtypes, "\x1f").combine_chunks().dictionary_encode()
        index = np.asarray(kind.indices.to_numpy(zero_copy_only=False))
        sums = np.bincount(index[mine], weights=f[mine].astype(np.float64), minlength=len(kind.dictionary))
        for key, value in zip(kind.dictionary.to_pylist(), sums.tolist()):
            per_kind[key] = per_kind.get(key, 0) + value
        total += int(f[mine].sum())
        flagged = np.asarray(chunk.column("dtype_assumed").fill_null(False).to_numpy(zero_copy_only=False))
        assumed += int((flagged & mine).sum())
        step_of = np_col(chunk, "step", fill=-1)
        found, at = np.unique(step_of[mine], return_inverse=True)
        sums_by_step = np.zeros(len(found), np.int64)
        np.add.at(sums_by_step, at.ravel(), f[mine])
        for step, value in zip(found.tolist(), sums_by_step.tolist()):
            by_step[step] = by_step.get(step, 0) + value
        rows = np.flatnonzero(np.asarray(pc.starts_with(names, "ProfilerStep#").to_numpy(zero_copy_only=False)))
        durations = np_col(chunk, "end_ns") - np_col(chunk, "start_ns")
        step_rows += [(int(step_of[r]), int(durations[r])) for r in rows]
    by_precision: dict[str, float] = {}
    for key, value in per_kind.items():
        name, dtype = key.split("\x1f")
        p = costs.precision(name, dtype)
        by_precision[p] = by_precision.get(p, 0) + value
    precision = max(by_precision, key=lambda p: by_precision[p]) if by_precision else None
    peak = peaks.tflops(precision) if peaks is not None and precision else None
    steps = []
    for n, wall in step_rows:
        model = by_step.get(n, 0)
        value = 100 * model / (wall * 1e-9 * peak * 1e12 * gpus) if peak and wall > 0 else None
        steps.append({"step": n, "flops": model, "wall_ns": wall, "mfu_pct": value})
    whole = 100 * total / (span_ns * 1e-9 * peak * 1e12) if peak and span_ns else None
    return {
        "flops": total,
        "precision": precision,
        "peak_tflops": peak,
        "gpus": gpus,
        "span_ns": span_ns,
        "mfu_pct": whole,
        "assumed_dtype_ops": assumed,
        "steps": sorted(steps, key=lambda s: s["step"]),
    }


def mfu(ops: pa.Table, gpu_ops: pa.Table, peaks: Peaks | None) -> dict[str, Any]:
    """Model FLOPs, their precision and MFU per ``ProfilerStep#N`` (docs/flops.md)."""
    gpus = max(len(set(np_col(gpu_ops, "device_id", fill=-1).tolist()) - {-1}), 1)
    no_names = pa.table({"device_id": pa.array([], pa.int64()), "name": pa.array([], pa.string())})
    span = sum(d.span_ns for d in gpu_header(gpu_ops, no_names))  # the summary header's spans
    return model_flops(DatasetTables({}, {"ops": ops}), peaks, gpus, span)
