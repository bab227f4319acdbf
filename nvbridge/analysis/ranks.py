"""Across the reports of a multi-rank run: GPU busy time per report and the straggler per step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.analysis.gpu import GpuHeader
from nvbridge.columns import np_col
from nvbridge.dataset.timeline import step_numbers


@dataclass(frozen=True, slots=True)
class RankFacts:
    """What the cross-rank summary needs of one rank (a report of one, or one process of a report
    of several: nvbridge.dataset.ranks), so reports can be read one at a time."""

    rank: int | None
    source: str | None
    ops: int
    kernels: int
    gpu_busy_ns: Mapping[int, int]  # by device
    steps: Mapping[int, int]  # ProfilerStep#N -> ns
    process_id: int | None = None  # its process, where a report holds several ranks
    self_cpu_ns: int = 0
    self_gpu_ns: int = 0
    lanes: tuple[GpuHeader, ...] = ()  # its work on each GPU (nvbridge.dataset.timeline), where a report holds several
    name: str | None = None  # the label, where "rank R" alone would repeat across reports

    @property
    def label(self) -> str:
        if self.name is not None:
            return self.name
        return f"rank {self.rank}" if self.rank is not None else str(self.source)


@dataclass(frozen=True, slots=True)
class StepSpread:
    """One ProfilerStep over the ranks that ran it: the slowest and the spread to the fastest."""

    step: int
    slowest: str  # the slowest report's label
    max_ns: int
    min_ns: int
    spread_ns: int
    ranks: int


def step_rows(ops: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(rows, N) of the ``ProfilerStep#N`` ranges in ``ops``: a prefix test on every name, the
    regular expression only on the few that pass it."""
    names = ops.column("op_name") if "op_name" in ops.column_names else ops.column("name")
    rows = np.flatnonzero(np.asarray(pc.fill_null(pc.starts_with(names, "ProfilerStep#"), False)))
    if not len(rows):
        return rows, rows
    n = step_numbers(names.take(pa.array(rows)))
    return rows[n >= 0], n[n >= 0]


def step_times(ops: pa.Table) -> dict[int, int]:
    """Duration (ns) of each ``ProfilerStep#N`` range, by N (summed if a step repeats)."""
    rows, n = step_rows(ops)
    dur = (np_col(ops, "end_ns") - np_col(ops, "start_ns"))[rows]
    out: dict[int, int] = {}
    for step, d in zip(n.tolist(), dur.tolist()):
        out[step] = out.get(step, 0) + d
    return out


def rank_facts(rank: int | None, source: str | None, ops: pa.Table, gpu: Sequence[GpuHeader]) -> RankFacts:
    """One report's facts, from its ops and its GPU header."""
    return RankFacts(
        rank, source, ops.num_rows, sum(d.kernels for d in gpu), {d.device_id: d.busy_ns for d in gpu}, step_times(ops)
    )


def step_spreads(facts: Sequence[RankFacts]) -> list[StepSpread]:
    """Per step run by two or more ranks, the slowest rank and the spread (slowest minus fastest):
    what a straggler looks like."""
    steps: dict[int, dict[str, int]] = {}
    for f in facts:
        for step, ns in f.steps.items():
            steps.setdefault(step, {})[f.label] = ns
    out = []
    for step in sorted(steps):
        by_rank = steps[step]
        if len(by_rank) < 2:
            continue  # one rank's step has no spread
        slow = max(by_rank, key=lambda k: by_rank[k])
        fast = min(by_rank.values())
        out.append(StepSpread(step, slow, by_rank[slow], fast, by_rank[slow] - fast, len(by_rank)))
    return out
