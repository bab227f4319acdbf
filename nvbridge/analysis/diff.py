"""``diff``: what changed between two reports, by (op, input shapes, direction, module).

Ops are grouped on both sides by the same four keys and joined; kernels by name; steps by
number. Rows whose every figure is equal are dropped, so a report against itself gives
nothing. Rows are ranked by impact: the change in self GPU time where either report has GPU
work, else the change in self CPU time (CPU times of two real runs differ by noise; GPU kernel
times of the same shapes much less).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.analysis.memory_diff import PeakDelta, device_peaks, merged_peaks, peak_deltas, peak_regressions
from nvbridge.analysis.ranks import step_times
from nvbridge.columns import np_col
from nvbridge.conversion.memory import load_tables
from nvbridge.dataset.report import DatasetTables, is_partitioned, report_dirs
from nvbridge.output import rich

KEYS = ("op", "shapes", "backward", "module")
SELF_MEMORY = ("self_cpu_memory_usage", "self_cuda_memory_usage")  # torch's; 0 where a report has none
OP_SUMS = ("calls", "self_cpu_ns", "total_cpu_ns", "self_gpu_ns", "total_gpu_ns", *SELF_MEMORY)


@dataclass(frozen=True, slots=True)
class OpDelta:
    """One (op, shapes, direction, module) group: its figures in A and B. ``status`` is
    ``new`` (only in B), ``gone`` (only in A) or ``changed``."""

    op: str
    shapes: str
    backward: bool
    module: str
    status: str
    a: tuple[int, ...]  # OP_SUMS in A
    b: tuple[int, ...]

    def delta(self, field: str) -> int:
        i = OP_SUMS.index(field)
        return self.b[i] - self.a[i]


@dataclass(frozen=True, slots=True)
class KernelDelta:
    """One kernel (or copy/set) name: launches and summed time in A and B."""

    name: str
    status: str
    a_count: int
    b_count: int
    a_ns: int
    b_ns: int


@dataclass(frozen=True, slots=True)
class StepDelta:
    """``ProfilerStep#N`` duration in A and B (null where a report lacks the step)."""

    step: int
    a_ns: int | None
    b_ns: int | None


@dataclass(frozen=True, slots=True)
class Diff:
    """Everything that differs, largest impact first, with the totals the gate checks."""

    a_source: str
    b_source: str
    gpu_ns: tuple[int, int]  # summed GPU op time in A and B
    mean_step_ns: tuple[float | None, float | None]
    ops: tuple[OpDelta, ...]
    kernels: tuple[KernelDelta, ...]
    steps: tuple[StepDelta, ...]
    peaks: tuple[PeakDelta, ...] = ()  # memory: each device's peak allocated in A and B

    def regressions(self, bound: float | None, memory_bound: float | None = None) -> list[str]:
        """What grew by more than ``bound`` (0.05: 5%): total GPU time, mean step time; and by
        more than ``memory_bound``: a device's peak allocated memory."""
        out = peak_regressions(self.peaks, memory_bound) if memory_bound is not None else []
        if bound is None:
            return out
        (ga, gb), (sa, sb) = self.gpu_ns, self.mean_step_ns
        if ga and gb > ga * (1 + bound):
            out.append(f"total GPU time {100 * (gb / ga - 1):+.1f}%")
        if sa and sb is not None and sb > sa * (1 + bound):
            out.append(f"mean step time {100 * (sb / sa - 1):+.1f}%")
        return out

    def _repr_html_(self) -> str | None:
        """diff's tables and the steps of A and B, inline in a notebook (drawn by nvbridge/page/notebook.py)."""
        return rich.html("diff", self)


def _op_groups(report: DatasetTables) -> pa.Table:
    ops = report.ops
    is_step = pc.starts_with(ops.column("op_name"), "ProfilerStep#")
    ops = ops.filter(pc.invert(is_step.fill_null(False)))
    t = pa.table(
        {
            "op": ops.column("op_name").cast(pa.string()),
            "shapes": ops.column("input_shapes").cast(pa.string()).fill_null(""),
            "backward": ops.column("is_backward").fill_null(False),
            "module": ops.column("module_path").cast(pa.string()).fill_null(""),
            "calls": pa.array(np.ones(ops.num_rows, np.int64)),
            **{c: ops.column(c) for c in OP_SUMS[1:5]},
            **{c: _zero_filled(ops, c) for c in SELF_MEMORY},
        }
    )
    agg = t.group_by(list(KEYS), use_threads=False).aggregate([(c, "sum") for c in OP_SUMS])
    return agg.rename_columns([c.removesuffix("_sum") for c in agg.column_names])


def _zero_filled(ops: pa.Table, column: str) -> pa.ChunkedArray | pa.Array:
    """A memory column with 0 for null (no memory events), or all 0 where the dataset has none."""
    if column not in ops.column_names:
        return pa.array(np.zeros(ops.num_rows, np.int64))
    return ops.column(column).fill_null(0)


def _kernel_groups(report: DatasetTables) -> pa.Table:
    g = report.gpu_ops
    t = pa.table(
        {
            "name": g.column("name").cast(pa.string()),
            "ns": pa.array(np_col(g, "end_ns") - np_col(g, "start_ns")),
            "count": pa.array(np.ones(g.num_rows, np.int64)),
        }
    )
    agg = t.group_by(["name"], use_threads=False).aggregate([("count", "sum"), ("ns", "sum")])
    return agg.rename_columns([c.removesuffix("_sum") for c in agg.column_names])


def _joined(a: pa.Table, b: pa.Table, keys: list[str], sums: list[str]) -> pa.Table:
    """Full outer join on keys; figures of a missing side are 0; a ``side`` column says which
    sides have the row (1 A, 2 B, 3 both)."""
    a = a.append_column("in_a", pa.array(np.ones(a.num_rows, np.int64)))
    b = b.append_column("in_b", pa.array(np.full(b.num_rows, 2, np.int64)))
    j = a.join(b, keys=keys, join_type="full outer", left_suffix="_a", right_suffix="_b", use_threads=False)
    cols = {k: j.column(k) for k in keys}
    for s in sums:
        cols[s + "_a"] = j.column(s + "_a").fill_null(0)
        cols[s + "_b"] = j.column(s + "_b").fill_null(0)
    cols["side"] = pc.add(j.column("in_a").fill_null(0), j.column("in_b").fill_null(0))
    return pa.table(cols)


STATUS = {1: "gone", 2: "new", 3: "changed"}


@dataclass(frozen=True)
class Side:
    """What diff needs of one side: op and kernel groups, step durations, summed GPU time."""

    source: str
    ops: pa.Table
    kernels: pa.Table
    steps: dict[int, int]
    gpu_ns: int
    peaks: dict[str, int]  # memory: peak allocated bytes per device


def side_of(report: DatasetTables) -> Side:
    """One report's groups."""
    g = report.gpu_ops
    return Side(
        str(report.meta.get("source")),
        _op_groups(report),
        _kernel_groups(report),
        step_times(report.ops),
        int((np_col(g, "end_ns") - np_col(g, "start_ns")).sum()),
        device_peaks(report),
    )


def merged(sides: list[Side], source: str) -> Side:
    """The reports of a partitioned dataset as one side: groups add up; a step lasts as long as
    its slowest report (ranks run a step together)."""

    def regroup(tables: list[pa.Table], keys: list[str]) -> pa.Table:
        sums = [c for c in tables[0].column_names if c not in keys]
        agg = pa.concat_tables(tables).group_by(keys, use_threads=False).aggregate([(c, "sum") for c in sums])
        return agg.rename_columns([c.removesuffix("_sum") for c in agg.column_names])

    steps: dict[int, int] = {}
    for side in sides:
        for n, ns in side.steps.items():
            steps[n] = max(steps.get(n, 0), ns)
    return Side(
        source,
        regroup([x.ops for x in sides], list(KEYS)),
        regroup([x.kernels for x in sides], ["name"]),
        steps,
        sum(x.gpu_ns for x in sides),
        merged_peaks([x.peaks for x in sides]),
    )


def _ops(a: Side, b: Side, by_gpu: bool) -> tuple[OpDelta, ...]:
    j = _joined(a.ops, b.ops, list(KEYS), list(OP_SUMS))
    va = (
        np.stack([np_col(j, s + "_a") for s in OP_SUMS], axis=1)
        if j.num_rows
        else np.zeros((0, len(OP_SUMS)), np.int64)
    )
    vb = (
        np.stack([np_col(j, s + "_b") for s in OP_SUMS], axis=1)
        if j.num_rows
        else np.zeros((0, len(OP_SUMS)), np.int64)
    )
    differ = np.flatnonzero((va != vb).any(axis=1))
    impact_col = OP_SUMS.index("self_gpu_ns" if by_gpu else "self_cpu_ns")
    impact = np.abs(vb[differ, impact_col] - va[differ, impact_col])
    side = np_col(j, "side")[differ]
    # ties (the same kernels launched from forward and backward): a new row, the cause, first
    order = np.lexsort((-np.abs(vb[differ, 0] - va[differ, 0]), side != 2, -impact))
    differ, side = differ[order], side[order]
    keys = {k: j.column(k).take(pa.array(differ)).to_pylist() for k in KEYS}
    return tuple(
        OpDelta(
            keys["op"][i],
            keys["shapes"][i],
            bool(keys["backward"][i]),
            keys["module"][i],
            STATUS[int(side[i])],
            tuple(int(x) for x in va[r]),
            tuple(int(x) for x in vb[r]),
        )
        for i, r in enumerate(differ.tolist())
    )


def _kernels(a: Side, b: Side) -> tuple[KernelDelta, ...]:
    j = _joined(a.kernels, b.kernels, ["name"], ["count", "ns"])
    ca, cb, na, nb = (np_col(j, c) for c in ("count_a", "count_b", "ns_a", "ns_b"))
    differ = np.flatnonzero((ca != cb) | (na != nb))
    differ = differ[np.argsort(-np.abs(nb[differ] - na[differ]), kind="stable")]
    names = j.column("name").take(pa.array(differ)).to_pylist()
    side = np_col(j, "side")
    return tuple(
        KernelDelta(names[i], STATUS[int(side[r])], int(ca[r]), int(cb[r]), int(na[r]), int(nb[r]))
        for i, r in enumerate(differ.tolist())
    )


def diff_sides(a: Side, b: Side) -> Diff:
    """What differs from side ``a`` to side ``b`` (see the module docstring)."""
    sa, sb = a.steps, b.steps
    steps = tuple(StepDelta(n, sa.get(n), sb.get(n)) for n in sorted(set(sa) | set(sb)) if sa.get(n) != sb.get(n))
    mean = tuple(sum(s.values()) / len(s) if s else None for s in (sa, sb))
    return Diff(
        a.source,
        b.source,
        (a.gpu_ns, b.gpu_ns),
        (mean[0], mean[1]),
        _ops(a, b, by_gpu=bool(a.gpu_ns or b.gpu_ns)),
        _kernels(a, b),
        steps,
        peak_deltas(a.peaks, b.peaks),
    )


def diff_reports(a: DatasetTables, b: DatasetTables) -> Diff:
    """What differs from report ``a`` to report ``b``."""
    return diff_sides(side_of(a), side_of(b))


def _load_side(path: str | os.PathLike[str]) -> Side:
    if not is_partitioned(path):
        return side_of(load_tables(path))
    # one report in memory at a time; only its groups are kept
    return merged([side_of(load_tables(d)) for d in report_dirs(path)], Path(os.fspath(path)).name)


def diff(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> Diff:
    """Compare two reports or datasets (a profiler database, a dataset directory, or a
    partitioned dataset, whose reports add up).

    Raises:
        InputError, ExportError: as :func:`nvbridge.load`.
    """
    return diff_sides(_load_side(a), _load_side(b))
