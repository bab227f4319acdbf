"""One report's summary figures, read a part of each table at a time.

A dataset opened with ``load(..., streamed=True)`` hands its tables over a row group at a time
(``DatasetTables.chunks``), each with only the columns the chosen grouping needs: the key_averages rows
add up group by group, the GPU header device by device, so memory holds one row group and the
groups, not the report. Only ``--device`` keeps something per op (its parent and GPU time,
20 bytes an op, to roll that device's time up the op tree), and MFU where ops record model FLOPs
(nvbridge.analysis.mfu). Every part read is checked as ``dataset.load`` checks a whole table, in
the same order (ops, GPU ops, API calls).

A report's ranks (nvbridge.dataset.ranks) come first, from two columns: a ``--rank`` or
``--device`` filter keeps the processes it selects in every figure (ops, CPU and GPU times,
``[no op]``, the GPU header, MFU), and a report of several ranks gets each rank's figures and GPU
lanes beside the whole report's (nvbridge.analysis.rank_figures).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.analysis.gpu import GpuHeader, GpuTally
from nvbridge.analysis.launches import Launches, LaunchTally
from nvbridge.analysis.memory_columns import MEMORY_COLUMNS
from nvbridge.analysis.op_table import NO_OP, Grouping, KeyAverages, add_up, finish
from nvbridge.analysis.rank_figures import ProcessFigures, ProcessTally, report_ranks
from nvbridge.analysis.ranks import step_times
from nvbridge.analysis.throughput import peaks_of
from nvbridge.columns import np_col
from nvbridge.dataset.ranks import Ranks
from nvbridge.dataset.report import DatasetTables
from nvbridge.engine import OPEN_AT_END
from nvbridge.gpu.peaks import Peaks

PENDING_PARTS = 32  # per-part group rows held before they are added up into one


@dataclass(frozen=True, slots=True)
class ReportFigures:
    """What ``summarize`` takes from one report (of the processes its filter selects)."""

    averages: KeyAverages
    gpus: list[GpuHeader]
    ops: int
    open_at_end: int
    steps: dict[int, int]  # ProfilerStep#N -> ns (ranks.step_times)
    gpu_ops_by_device: list[int]  # GPU ops on device 0, 1, ... (the peaks' default device)
    gpus_used: int  # devices that ran GPU ops, at least 1 (MFU's denominator)
    ranks: Ranks
    processes: set[int] | None  # what the filter kept (None: no filter)
    by_process: dict[int, ProcessFigures]  # the kept ranks', where the report has several
    launches: Launches  # who launched the [no op] row's GPU time

    def peaks(
        self, devices: pa.Table, device: int | None, peak_tflops: float | None, peak_gbps: float | None
    ) -> Peaks | None:
        """The peaks of ``device`` (default: the one that ran the most GPU ops), with overrides."""
        return peaks_of(devices, self.gpu_ops_by_device, device, peak_tflops, peak_gbps)


def ops_columns(report: DatasetTables, grouping: Grouping, device: int | None) -> list[str]:
    """The ops columns the grouping pass reads: the grouping's own, the cost inputs, the flags
    and times (checks, steps), the process (ranks), and GPU times (or, for one device, op ids
    to look them up)."""
    have = set(report.column_names("ops"))
    costs: list[str] = [c for c in ("flops", "bytes", "compute_dtype") if c in have]
    # torch's memory columns where the report recorded memory (all null otherwise: statistics say so unread)
    costs += [c for c in MEMORY_COLUMNS if c in have and not report.all_null("ops", c)]
    gpu = ["self_gpu_ns", "total_gpu_ns"] if device is None else ["op_id"]
    return list(dict.fromkeys([*grouping.columns, *costs, *gpu, "flags", "start_ns", "end_ns", "process_id"]))


def report_figures(
    report: DatasetTables, grouping: Grouping, device: int | None = None, rank: int | None = None
) -> ReportFigures:
    """The key_averages rows (with ``[no op]``), GPU header and per-rank figures of one report,
    of the processes ``device`` and ``rank`` select."""
    ranks = report_ranks(report)
    keep = ranks.processes(rank, device)
    processes = ProcessTally(ranks, keep)
    tally, launches = GpuTally(), LaunchTally()
    by_op: tuple[np.ndarray, np.ndarray] | None = None
    if device is not None:  # the tree first, so the ops are checked before the GPU ops
        parent, top = _tree(report)
        self_ns = _gpu_pass(report, ranks, keep, device, (tally, processes, launches), len(parent))
        by_op = self_ns, _roll_up(self_ns, parent, top)
        del parent
    parts: list[pa.Table] = []
    cpu_total = gpu_total = open_at_end = rows = 0
    steps: dict[int, int] = {}
    for chunk in report.chunks("ops", ops_columns(report, grouping, device)):
        if keep is not None:
            chunk = chunk.filter(pc.is_in(chunk.column("process_id"), pa.array(sorted(keep), pa.int64())))
        if by_op is None:
            self_gpu, total_gpu = np_col(chunk, "self_gpu_ns"), np_col(chunk, "total_gpu_ns")
        else:
            ids = np_col(chunk, "op_id")
            self_gpu, total_gpu = by_op[0][ids], by_op[1][ids]
        parts.append(grouping.aggregate(chunk, self_gpu, total_gpu))
        if len(parts) > PENDING_PARTS:
            parts = [add_up(parts, list(grouping.keys))]
        rows += chunk.num_rows
        cpu_total += int(np.sum(np_col(chunk, "self_cpu_ns")))
        gpu_total += int(self_gpu.sum())
        open_at_end += int(np.count_nonzero(np_col(chunk, "flags", fill=0) & OPEN_AT_END))
        for step, ns in step_times(chunk).items():
            steps[step] = steps.get(step, 0) + ns
        processes.add_ops(chunk, self_gpu)
    if device is None:
        _gpu_pass(report, ranks, keep, None, (tally, processes, launches), 0)
    for _ in report.chunks("api_calls", ["start_ns", "end_ns"]):
        pass  # read for the check only: no API call ends before it starts
    startup = _startup(report, tally, processes)
    averages = finish(parts, grouping, cpu_total, gpu_total, tally.no_op())
    counts = {d: c[0] for d, c in tally.counts.items() if d >= 0}
    by_device = [counts.get(d, 0) for d in range(max(counts) + 1)] if counts else []
    own: dict[str, int] = {}  # Self CUDA per op name (rows may split a name by shape or module)
    for r in averages.rows.select(["name", "self_gpu_ns"]).to_pylist():
        if r["name"] != NO_OP:
            own[r["name"]] = own.get(r["name"], 0) + r["self_gpu_ns"]
    return ReportFigures(
        averages,
        tally.headers(report.devices, report.meta.get("source"), startup),
        rows,
        open_at_end,
        steps,
        by_device,
        max(len(counts), 1),
        ranks,
        keep,
        processes.result(report.devices, report.meta.get("source")),
        launches.result(_names(report, launches.time_ops()), own, report.threads),
    )


def _names(report: DatasetTables, ids: set[int]) -> dict[int, str]:
    """The op names of ``ids`` (the ops GPU work was attributed to by time: one more pass over
    two columns, only where there are some)."""
    out: dict[int, str] = {}
    if not ids:
        return out
    wanted = np.fromiter(ids, np.int64)
    for chunk in report.chunks("ops", ["op_id", "op_name"]):
        hit = np.flatnonzero(np.isin(np_col(chunk, "op_id"), wanted))
        out.update(zip(np_col(chunk, "op_id")[hit].tolist(), chunk.column("op_name").take(pa.array(hit)).to_pylist()))
    return out


def _startup(report: DatasetTables, tally: GpuTally, processes: ProcessTally) -> dict[int, int]:
    """The start-up: CUDA calls before each process's first GPU op (nvbridge.dataset.timeline), from the
    few API-call row groups that start before the last of those (the rest are skipped unread)."""
    startup = tally.startup()
    if startup.until is not None:
        for chunk in report.chunks("api_calls", startup.COLUMNS, (None, startup.until)):
            startup.add(chunk)
    result = startup.result()
    processes.startup = result
    return result


def _tree(report: DatasetTables) -> tuple[np.ndarray, int]:
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


def _gpu_pass(
    report: DatasetTables,
    ranks: Ranks,
    keep: set[int] | None,
    device: int | None,
    tallies: tuple[GpuTally, ProcessTally, LaunchTally],
    ops: int,
) -> np.ndarray:
    """Tally the GPU ops of the kept processes (of ``device`` only, with one); with ``device``,
    also the GPU ns each op id launched on it."""
    tally, processes, launches = tallies
    self_ns = np.zeros(ops, np.int64)
    later = report.later_starts("gpu_ops")
    extra = ["thread_id", *(["time_op_id"] if "time_op_id" in report.column_names("gpu_ops") else [])]
    for i, chunk in enumerate(report.chunks("gpu_ops", [*GpuTally.COLUMNS, *extra])):
        owner = ranks.owner(np_col(chunk, "process_id", fill=-1), np_col(chunk, "device_id", fill=-1))
        if keep is not None or device is not None:
            mine = np.isin(owner, sorted(keep)) if keep is not None else np.ones(chunk.num_rows, bool)
            if device is not None:
                mine &= np_col(chunk, "device_id", fill=-1) == device
            chunk, owner = chunk.filter(pa.array(mine)), owner[mine]
        bound = later[i] if i < len(later) else None
        tally.add(chunk, bound)
        processes.add_gpu(chunk, owner, bound)
        launches.add(chunk)
        if device is not None:
            op = np_col(chunk, "op_id", fill=-1)
            np.add.at(self_ns, op[op >= 0], (np_col(chunk, "end_ns") - np_col(chunk, "start_ns"))[op >= 0])
    return self_ns
