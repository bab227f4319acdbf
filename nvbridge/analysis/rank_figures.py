"""Per-rank figures of a report that holds several ranks (processes, nvbridge.dataset.ranks): each
rank's ops, self CPU and GPU time, ProfilerStep times, and its GPU lanes (its work on each GPU:
busy, span and start-up as nvbridge.dataset.timeline defines them, the lanes advise reports), added a
part of the tables at a time beside the report's own figures."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from nvbridge.analysis.gpu import GpuHeader, GpuTally
from nvbridge.analysis.ranks import step_rows
from nvbridge.columns import np_col
from nvbridge.dataset.ranks import Ranks, RankTally
from nvbridge.dataset.report import DatasetTables


def report_ranks(report: DatasetTables) -> Ranks:
    """The ranks of a report, from its processes' columns (two passes over one or two columns)."""
    tally = RankTally()
    for chunk in report.chunks("ops", RankTally.OPS_COLUMNS):
        tally.add_ops(chunk)
    for chunk in report.chunks("gpu_ops", RankTally.GPU_COLUMNS):
        tally.add_gpu(chunk)
    return tally.result(report.recorded_ranks)


@dataclass(frozen=True, slots=True)
class ProcessFigures:
    """One rank of a report of several."""

    process_id: int
    rank: int
    ops: int
    self_cpu_ns: int
    self_gpu_ns: int
    steps: Mapping[int, int]  # ProfilerStep#N -> ns
    lanes: tuple[GpuHeader, ...]  # its work on each GPU it used

    @property
    def kernels(self) -> int:
        return sum(lane.kernels for lane in self.lanes)


@dataclass
class _Sums:
    ops: int = 0
    self_cpu_ns: int = 0
    self_gpu_ns: int = 0
    steps: dict[int, int] = field(default_factory=dict)
    lanes: GpuTally = field(default_factory=GpuTally)


class ProcessTally:
    """Each kept rank's sums, where the report has several ranks (else nothing is kept)."""

    def __init__(self, ranks: Ranks, keep: set[int] | None) -> None:
        self.ranks = ranks
        several = len(ranks.ranks) > 1
        self._sums = {r.process_id: _Sums() for r in ranks.ranks if several and (keep is None or r.process_id in keep)}
        self.startup: Mapping[int, int] = {}

    def add_ops(self, ops: pa.Table, self_gpu: np.ndarray) -> None:
        """A part of the ops (with ``process_id``) and their self GPU ns."""
        if not self._sums or not ops.num_rows:
            return
        proc = np_col(ops, "process_id", fill=-1)
        cpu = np_col(ops, "self_cpu_ns")
        rows, step = step_rows(ops)
        step_proc = proc[rows]
        dur = (np_col(ops, "end_ns") - np_col(ops, "start_ns"))[rows]
        for p in np.unique(proc).tolist():
            if p not in self._sums:
                continue
            mine = proc == p
            s = self._sums[p]
            s.ops += int(mine.sum())
            s.self_cpu_ns += int(cpu[mine].sum())
            s.self_gpu_ns += int(self_gpu[mine].sum())
            for n, ns in zip(step[step_proc == p].tolist(), dur[step_proc == p].tolist()):
                s.steps[n] = s.steps.get(n, 0) + ns

    def add_gpu(self, gpu_ops: pa.Table, owner: np.ndarray, later_start: int | None) -> None:
        """A part of the GPU ops (GpuTally.COLUMNS), each op's process in ``owner``."""
        for p, s in self._sums.items():
            mine = owner == p
            if mine.any():
                s.lanes.add(gpu_ops.filter(pa.array(mine)), later_start)

    def result(self, devices: pa.Table, source: str | None) -> dict[int, ProcessFigures]:
        out = {}
        for r in self.ranks.ranks:
            s = self._sums.get(r.process_id)
            if s is None:
                continue
            lanes = tuple(s.lanes.headers(devices, source, self.startup)) if s.lanes.counts else ()
            out[r.process_id] = ProcessFigures(
                r.process_id, r.rank, s.ops, s.self_cpu_ns, s.self_gpu_ns, dict(s.steps), lanes
            )
        return out
