"""One report's summary figures, read a part of each table at a time.

A dataset opened with ``load(..., streamed=True)`` hands its tables over a row group at a time
(``Report.chunks``), each with only the columns the chosen grouping needs: the key_averages rows
add up group by group, the GPU header device by device, so memory holds one row group and the
groups, not the report. Only ``--device`` keeps something per op (its parent and GPU time,
20 bytes an op, to roll that device's time up the op tree), and MFU where ops record model FLOPs
(nvbridge.analysis.mfu). Every part read is checked as ``dataset.load`` checks a whole table, in
the same order (ops, GPU ops, API calls).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from nvbridge.analysis.gpu import GpuHeader, GpuTally
from nvbridge.analysis.ranks import step_times
from nvbridge.analysis.summary import Grouping, KeyAverages, add_up, finish
from nvbridge.analysis.throughput import peaks_of
from nvbridge.columns import np_col
from nvbridge.dataset import Report
from nvbridge.engine import OPEN_AT_END
from nvbridge.gpus import Peaks

PENDING_PARTS = 32  # per-part group rows held before they are added up into one


@dataclass(frozen=True, slots=True)
class ReportFigures:
    """What ``summarize`` takes from one report."""

    averages: KeyAverages
    gpus: list[GpuHeader]
    ops: int
    open_at_end: int
    steps: dict[int, int]  # ProfilerStep#N -> ns (ranks.step_times)
    gpu_ops_by_device: list[int]  # GPU ops on device 0, 1, ... (the peaks' default device)
    gpus_used: int  # devices that ran GPU ops, at least 1 (MFU's denominator)

    def peaks(
        self, devices: pa.Table, device: int | None, peak_tflops: float | None, peak_gbps: float | None
    ) -> Peaks | None:
        """The peaks of ``device`` (default: the one that ran the most GPU ops), with overrides."""
        return peaks_of(devices, self.gpu_ops_by_device, device, peak_tflops, peak_gbps)


def ops_columns(report: Report, grouping: Grouping, device: int | None) -> list[str]:
    """The ops columns the grouping pass reads: the grouping's own, the cost inputs, the flags
    and times (checks, steps), and GPU times (or, for one device, op ids to look them up)."""
    have = set(report.column_names("ops"))
    costs = [c for c in ("flops", "bytes", "compute_dtype") if c in have]
    gpu = ["self_gpu_ns", "total_gpu_ns"] if device is None else ["op_id"]
    return list(dict.fromkeys([*grouping.columns, *costs, *gpu, "flags", "start_ns", "end_ns"]))


def report_figures(report: Report, grouping: Grouping, device: int | None = None) -> ReportFigures:
    """The key_averages rows (with ``[no op]``), GPU header and rank facts of one report."""
    tally = GpuTally()
    by_op: tuple[np.ndarray, np.ndarray] | None = None
    if device is not None:  # the tree first, so the ops are checked before the GPU ops
        parent, top = _tree(report)
        self_ns = _gpu_pass(report, tally, device, len(parent))
        by_op = self_ns, _roll_up(self_ns, parent, top)
        del parent
    parts: list[pa.Table] = []
    cpu_total = gpu_total = open_at_end = 0
    steps: dict[int, int] = {}
    for chunk in report.chunks("ops", ops_columns(report, grouping, device)):
        if by_op is None:
            self_gpu, total_gpu = np_col(chunk, "self_gpu_ns"), np_col(chunk, "total_gpu_ns")
        else:
            ids = np_col(chunk, "op_id")
            self_gpu, total_gpu = by_op[0][ids], by_op[1][ids]
        parts.append(grouping.aggregate(chunk, self_gpu, total_gpu))
        if len(parts) > PENDING_PARTS:
            parts = [add_up(parts, list(grouping.keys))]
        cpu_total += int(np.sum(np_col(chunk, "self_cpu_ns")))
        gpu_total += int(self_gpu.sum())
        open_at_end += int(np.count_nonzero(np_col(chunk, "flags", fill=0) & OPEN_AT_END))
        for step, ns in step_times(chunk).items():
            steps[step] = steps.get(step, 0) + ns
    if device is None:
        _gpu_pass(report, tally, None, 0)
    for _ in report.chunks("api_calls", ["start_ns", "end_ns"]):
        pass  # read for the check only: no API call ends before it starts
    # the start-up: CUDA calls before each process's first GPU op (nvbridge.timeline), from the
    # few row groups that start before the last of those (the rest are skipped unread)
    startup = tally.startup()
    if startup.until is not None:
        for chunk in report.chunks("api_calls", startup.COLUMNS, (None, startup.until)):
            startup.add(chunk)
    averages = finish(parts, grouping, cpu_total, gpu_total, tally.no_op(device))
    counts = {d: c[0] for d, c in tally.counts.items() if d >= 0}
    by_device = [counts.get(d, 0) for d in range(max(counts) + 1)] if counts else []
    return ReportFigures(
        averages,
        tally.headers(report.devices, report.meta.get("source"), startup.result()),
        report.rows("ops"),
        open_at_end,
        steps,
        by_device,
        max(len(counts), 1),
    )


def _tree(report: Report) -> tuple[np.ndarray, int]:
    """Per op id, its parent's id (-1: none; the last slot stands for "no op"), and the
    deepest depth."""
    n = report.rows("ops")
    parent = np.full(n + 1, -1, np.int32 if n < 2**31 - 1 else np.int64)  # 4 bytes an op
    top = 0
    for chunk in report.chunks("ops", ["op_id", "parent_id", "depth", "start_ns", "end_ns"]):  # times: the check
        parent[np_col(chunk, "op_id")] = np_col(chunk, "parent_id", fill=-1)
        top = max(top, int(np_col(chunk, "depth").max(initial=0)))
    return parent, top


def _roll_up(self_ns: np.ndarray, parent: np.ndarray, top: int) -> np.ndarray:
    """Each op's GPU time plus its descendants': each op that launched GPU work hands its time
    to its ancestors, one level a turn (the ops without GPU work, most of them, cost nothing)."""
    total: np.ndarray = self_ns.copy()
    ids = np.flatnonzero(self_ns)
    values = self_ns[ids]
    for _ in range(top + 1):  # the depth bounds the walk, even on a damaged tree
        up = parent[ids]
        live = up >= 0
        if not live.any():
            break
        ids, values = up[live], values[live]
        np.add.at(total, ids, values)
    return total


def _gpu_pass(report: Report, tally: GpuTally, device: int | None, ops: int) -> np.ndarray:
    """Tally the GPU ops; with ``device``, also the GPU ns each op id launched on it."""
    self_ns = np.zeros(ops, np.int64)
    later = report.later_starts("gpu_ops")
    for i, chunk in enumerate(report.chunks("gpu_ops", GpuTally.COLUMNS)):
        tally.add(chunk, later[i] if i < len(later) else None)
        if device is not None:
            op = np_col(chunk, "op_id", fill=-1)
            mine = (np_col(chunk, "device_id", fill=-1) == device) & (op >= 0)
            np.add.at(self_ns, op[mine], (np_col(chunk, "end_ns") - np_col(chunk, "start_ns"))[mine])
    return self_ns
