"""``advise``: ranked findings that name the op, module and step to change, with the time at stake.

Each detector (findings.py) gives intervals of wall time on lanes (a rank's GPU timeline).
Rows of one kind are grouped by op and module into findings. Time is then handed out once:
findings are visited by kind (specific causes before plain GPU idle time) and, within a kind,
by their own time, and each keeps only the time no finding before it claimed. So the times
of all findings add up to the union of everything found, which never exceeds a lane's span,
and within a step never exceeds the step (docs/advise.md gives the arithmetic).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from nvbridge.analysis import below_roofline, context, dominant, findings, memory_advice, spans, waits
from nvbridge.analysis.advise_columns import advise_tables
from nvbridge.analysis.context import Context
from nvbridge.analysis.dominant import Dominant
from nvbridge.analysis.fixes import BETWEEN_OPS, NO_OP, fix_for
from nvbridge.analysis.ranks import step_times
from nvbridge.columns import np_col
from nvbridge.conversion.memory import load_tables
from nvbridge.dataset.report import DatasetTables, is_partitioned, report_dirs
from nvbridge.dataset.timeline import timeline
from nvbridge.output import rich

KIND_ORDER = (
    "startup",
    "blocking_copy_sync",
    "host_sync",
    "pageable_copy",
    "exposed_copies",
    "small_copies",
    "launch_bound",
    "nccl_exposed",
    "below_roofline",
    "rank_skew",
    "gpu_idle",
)
IN_STEP = "ProfilerStep (outside ops)"


@dataclass(frozen=True, slots=True)
class StepTime:
    """One step on one lane: its duration, GPU busy time inside it, and the idle share."""

    lane: str
    step: int
    step_ns: int
    busy_ns: int
    # the step's time in each category of the GPU timeline (nvbridge.analysis.dominant); the
    # rest of step_ns lies outside the lane's timeline (before its first or after its last GPU op)
    by_category: tuple[tuple[str, int], ...] = ()

    @property
    def idle_share(self) -> float:
        return 1.0 - self.busy_ns / self.step_ns if self.step_ns else 0.0


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing to change: the op (and module) it is about, where, how often, what it costs.

    ``time_ns`` is this finding's share of the time at stake (none counted by a finding ranked
    before it); ``own_ns`` is its time before that sharing; ``by_step`` is ``time_ns`` per step.
    """

    kind: str
    op: str
    module: str | None
    lanes: tuple[str, ...]
    count: int
    time_ns: int
    own_ns: int
    step: int | None  # the step with the most time at stake
    by_step: tuple[tuple[int, int], ...]
    figures: tuple[tuple[str, int], ...]
    fix: str
    shapes: str | None = None  # below_roofline: the input shapes (and dtype) of the op group


@dataclass(frozen=True, slots=True)
class LaneFigures:
    """One lane's GPU timeline (nvbridge.dataset.timeline.LaneTimeline) as advise reports it."""

    lane: str
    process_id: int
    device_id: int
    start_ns: int
    end_ns: int
    span_ns: int
    busy_ns: int
    startup_ns: int


@dataclass(frozen=True, slots=True)
class Advice:
    """Findings ranked by time at stake (the dominant cost first), the steps' idle shares, and
    the totals they add up to."""

    source: str
    findings: tuple[Finding, ...]
    steps: tuple[StepTime, ...]
    span_ns: int  # the GPU timelines summed over lanes: first to last GPU op of each (nvbridge.dataset.timeline)
    at_stake_ns: int  # union of every finding's intervals == sum of their time_ns
    lanes: tuple[str, ...]  # every (process, GPU) pair with GPU work
    peaks: str | None = None  # the GPU peaks below_roofline compared with (None: unknown GPU)
    startup_ns: int = 0  # CUDA calls before each process's first GPU op: beside span_ns, not in it
    capture_ns: int = 0  # the capture window: first to last event of the report
    timeline: tuple[LaneFigures, ...] = ()
    dominant: Dominant | None = None
    waits: tuple[tuple[str, int, int], ...] = ()  # (API name, calls, ns) the host blocked in, by name

    def _repr_html_(self) -> str | None:
        """The findings and per-step bars, inline in a notebook (drawn by nvbridge/page/notebook.py)."""
        return rich.html("advice", self)


@dataclass
class _Draft:
    kind: str
    op: str
    module: str | None
    lanes: tuple[str, ...]
    count: int
    own: spans.Spans
    figures: tuple[tuple[str, int], ...]
    shapes: str | None = None


def _label(ctx: Context, row: int, kind: str) -> tuple[str, str | None]:
    if row < 0:
        return (NO_OP if kind != "rank_skew" else "ProfilerStep"), None
    name = ctx.op_names[ctx.op_name[row]] or NO_OP
    if ctx.op_step_range[row]:
        return (BETWEEN_OPS if kind == "gpu_idle" else IN_STEP), None
    return name, ctx.modules[ctx.module[row]]


def _drafts(ctx: Context, ev: findings.Evidence) -> list[_Draft]:
    """Rows of one kind grouped by (op name, module[, lane])."""
    keep = ev.lane >= 0  # rows on a process/device pair without GPU work have no lane
    if not keep.any():
        return []
    if not keep.all():
        ev = findings.Evidence(
            ev.kind,
            ev.op_row[keep],
            ev.lane[keep],
            ev.start_ns[keep],
            ev.end_ns[keep],
            {k: v[keep] for k, v in ev.figures.items()},
            ev.per_lane,
            None if ev.event is None else ev.event[keep],
            None if ev.group is None else ev.group[keep],
        )
    row = np.asarray(ev.op_row, np.int64)
    has = row >= 0
    name, mod = np.full(len(row), -1, np.int64), np.full(len(row), -1, np.int64)
    name[has], mod[has] = ctx.op_name[row[has]], ctx.module[row[has]]
    # time in any ProfilerStep outside its ops is one finding, not one per step
    in_step = np.zeros(len(row), bool)
    in_step[has] = ctx.op_step_range[row[has]]
    name[in_step] = -2
    lane_key = ev.lane if ev.per_lane else np.zeros(len(row), np.int64)
    extra = ev.group if ev.group is not None else np.zeros(len(row), np.int64)
    # group by sorting on the keys (np.unique's hashing is slow on millions of rows)
    order = np.lexsort((extra, lane_key, mod, name))
    new = np.zeros(len(order), bool)
    new[:1] = True
    for key in (name, mod, lane_key, extra):  # a key at a time: gpu_idle gives millions of rows
        sorted_key = key[order]
        new[1:] |= sorted_key[1:] != sorted_key[:-1]
    del sorted_key
    bounds = np.append(np.flatnonzero(new), len(order))
    enc_s, enc_e = ctx.enc(ev.lane, ev.start_ns), ctx.enc(ev.lane, ev.end_ns)
    out = []
    for gi in range(len(bounds) - 1):  # one pass per finding, not per row
        rows = order[bounds[gi] : bounds[gi + 1]]
        op, module = _label(ctx, int(row[rows[0]]), ev.kind)
        lanes = tuple(ctx.lane_label(int(x)) for x in spans.distinct(np.sort(ev.lane[rows])))
        figs = tuple((k, int(v[rows].sum())) for k, v in ev.figures.items())
        count = len(rows) if ev.event is None else len(spans.distinct(np.sort(ev.event[rows])))
        shapes = _shapes(ctx, int(row[rows[0]])) if ev.kind == below_roofline.KIND else None
        out.append(_Draft(ev.kind, op, module, lanes, count, spans.union(enc_s[rows], enc_e[rows]), figs, shapes))
    return out


def _shapes(ctx: Context, row: int) -> str | None:
    """An op row's input shapes and compute dtype, as one line of text."""
    ops = ctx.report.ops
    if row < 0 or "input_shapes" not in ops.column_names:
        return None
    at = row if int(np_col(ops, "op_id")[row]) == row else int(np.flatnonzero(np_col(ops, "op_id") == row)[0])
    shapes = ops.column("input_shapes")[at].as_py()
    dtype = ops.column("compute_dtype")[at].as_py() if "compute_dtype" in ops.column_names else None
    return f"{shapes} {dtype}" if dtype else (None if shapes is None else str(shapes))


def _steps(ctx: Context, cut: Mapping[str, spans.Spans]) -> tuple[StepTime, ...]:
    busy = spans.clip_per_window(ctx.busy, ctx.step_start, ctx.step_end)
    per = {c: spans.clip_per_window(x, ctx.step_start, ctx.step_end).tolist() for c, x in cut.items()}
    return tuple(
        StepTime(ctx.lane_label(int(lane)), int(n), int(e - s), int(b), tuple((c, int(ns[i])) for c, ns in per.items()))
        for i, (lane, n, s, e, b) in enumerate(zip(ctx.step_lane, ctx.step_number, ctx.step_start, ctx.step_end, busy))
    )


def advise_report(
    report: DatasetTables,
    min_share: float = 0.0,
    skew_by_step: Mapping[int, int] | None = None,
    peak_tflops: float | None = None,
    peak_gbps: float | None = None,
) -> Advice:
    """Findings for one report (see the module docstring for how time is shared).

    Args:
        report: a loaded report (:func:`nvbridge.load`).
        min_share: drop findings whose time at stake is below this share of the lanes' span.
        skew_by_step: for a report of a partitioned dataset, the steps in which it was the
            slowest report and by how much (ns) it trailed the fastest.
        peak_tflops, peak_gbps: override the GPU table's peaks for below_roofline.

    Returns:
        The findings, largest time at stake first, and the per-step idle shares.
    """
    ctx = context.build(report)
    evidence = _evidence(ctx, skew_by_step, peak_tflops, peak_gbps)
    drafts: list[_Draft] = []
    for ev in evidence:
        drafts += _drafts(ctx, ev)
    # what the time categories read of the evidence: gpu_idle's millions of rows go now
    evidence = [ev for ev in evidence if ev.kind in ("startup", *dominant.WAIT_KINDS)]
    lanes = timeline(report.ops, report.api_calls, report.gpu_ops)
    # the GPU timelines (nvbridge.dataset.timeline) on advise's time axis: one interval per lane
    at = ctx.lane_of(*(np.array([getattr(t, k) for t in lanes.lanes], np.int64) for k in ("process_id", "device_id")))
    on_gpu = spans.union(
        ctx.enc(at, np.array([t.start_ns for t in lanes.lanes], np.int64)),
        ctx.enc(at, np.array([t.end_ns for t in lanes.lanes], np.int64)),
    )
    out, claimed = _shared(ctx, drafts, on_gpu)
    del drafts
    span = spans.length(on_gpu)
    # a wait whose GPU stayed busy after it has no time at stake, but the host did wait: kept,
    # so the findings' wait_ns add up to the blocking calls' time
    kept = [f for f in out if (f.time_ns > 0 or dict(f.figures).get("wait_ns")) and f.time_ns >= min_share * span]
    kept.sort(key=lambda f: (-f.time_ns, KIND_ORDER.index(f.kind), f.op))
    cut = dominant.category_spans(ctx, on_gpu, evidence)
    top = dominant.categorize(ctx, on_gpu, evidence, cut)
    return Advice(
        str(report.meta.get("source")),
        (*_first_of(kept, top), *_memory(report)),
        _steps(ctx, cut),
        span,
        spans.length(claimed),
        tuple(ctx.lane_label(i) for i in range(len(ctx.lane_process))),
        below_roofline.describe(report, peak_tflops, peak_gbps),
        lanes.startup_ns,
        lanes.capture.span_ns,
        tuple(
            LaneFigures(
                ctx.lane_label(i), t.process_id, t.device_id, t.start_ns, t.end_ns, t.span_ns, t.busy_ns, t.startup_ns
            )
            for i, t in enumerate(lanes.lanes)
        ),
        top,
        waits.by_api(ctx),
    )


def _memory(report: DatasetTables) -> list[Finding]:
    """The memory findings (nvbridge.analysis.memory_advice): no time at stake, after the others."""
    return [
        Finding(memory_advice.KIND, m.op, m.module, (m.device,), m.count, 0, 0, m.step, (), m.figures, m.fix)
        for m in memory_advice.memory_findings(report)
    ]


def _shared(ctx: Context, drafts: list[_Draft], on_gpu: spans.Spans) -> tuple[list[Finding], spans.Spans]:
    """The findings, each with the time at stake no finding before it in KIND_ORDER claimed, and
    the time all of them claimed."""
    drafts.sort(key=lambda d: (KIND_ORDER.index(d.kind), -spans.length(d.own)))
    claimed = spans.empty()
    out = []
    for d in drafts:
        own = spans.minus(d.own, spans.minus(d.own, on_gpu))  # a launch call may precede the lane's first GPU op
        mine = spans.minus(own, claimed)
        claimed = spans.add_disjoint(claimed, mine)
        totals: dict[int, int] = {}
        for n, t in zip(ctx.step_number.tolist(), spans.clip_per_window(mine, ctx.step_start, ctx.step_end).tolist()):
            if t > 0:  # a step run on several lanes adds up
                totals[n] = totals.get(n, 0) + t
        worst = max(totals, key=lambda n: totals[n]) if totals else None
        out.append(
            Finding(
                d.kind,
                d.op,
                d.module,
                d.lanes,
                d.count,
                spans.length(mine),
                spans.length(own),
                worst,
                tuple(sorted(totals.items())),
                d.figures,
                fix_for(d.kind, d.op, dict(d.figures), d.count),
                d.shapes,
            )
        )
    return out, claimed


def _evidence(
    ctx: Context, skew_by_step: Mapping[int, int] | None, peak_tflops: float | None, peak_gbps: float | None
) -> list[findings.Evidence]:
    """Every detector's evidence, in the order of KIND_ORDER's kinds."""
    found, blocking = waits.waits(ctx)
    found = [findings.startup(ctx), *found, *findings.copies(ctx, blocking), findings.launch_bound(ctx)]
    found += [findings.nccl_exposed(ctx), findings.rank_skew(ctx), findings.gpu_idle(ctx)]
    if skew_by_step:
        found.append(findings.report_skew(ctx, skew_by_step))
    found.append(below_roofline.below_roofline(ctx, peak_tflops, peak_gbps))
    return found


def _first_of(ranked: list[Finding], top: dominant.Dominant) -> list[Finding]:
    """The findings, the largest of the dominant category's kinds first (unless compute
    dominates: then by time at stake alone)."""
    if top.category == "compute":
        return ranked
    kinds = dominant.CATEGORY_KINDS[top.category]
    at = next((i for i, f in enumerate(ranked) if f.kind in kinds), None)
    return ranked if at is None else [ranked[at], *ranked[:at], *ranked[at + 1 :]]


def advise(
    path: str | os.PathLike[str],
    min_share: float = 0.0,
    peak_tflops: float | None = None,
    peak_gbps: float | None = None,
    skew: list[dict[int, int]] | None = None,
) -> list[Advice]:
    """Findings for a report, a dataset, or each report of a partitioned dataset (one at a time).

    Args:
        path: a profiler database, a dataset directory, or a directory of ``report=<name>/``.
        min_share: drop findings below this share of the GPU timeline (0.01: 1%).
        peak_tflops, peak_gbps: override the GPU table's peaks (below_roofline).
        skew: per report of a partitioned dataset, the steps it held the others back in and by
            how much (nvbridge.analysis.advise_ranks.report_skews); None: by step length.

    Raises:
        InputError, ExportError: as :func:`nvbridge.load`.
    """
    if not is_partitioned(path):
        return [advise_report(advise_tables(path), min_share, None, peak_tflops, peak_gbps)]
    dirs = report_dirs(path)
    skew = skew or slowest_reports([step_times(load_tables(d, STEP_COLUMNS).ops) for d in dirs])
    return [advise_report(advise_tables(d), min_share, skew[i], peak_tflops, peak_gbps) for i, d in enumerate(dirs)]


# What the first pass over a partitioned dataset reads: the step ranges, one column elsewhere.
STEP_COLUMNS = {
    "ops": ["op_name", "start_ns", "end_ns"],
    "gpu_ops": ["gpu_op_id"],
    "api_calls": ["api_call_id"],
    "marks": ["ts_ns"],
    "syncs": ["start_ns"],
    "threads": ["thread_id"],
    "devices": ["device_id"],
}


def slowest_reports(steps: list[dict[int, int]]) -> list[dict[int, int]]:
    """Per report, the steps it was slowest in (of the reports that ran the step) and its lead
    over the fastest: the straggler's extra time per step."""
    out: list[dict[int, int]] = [{} for _ in steps]
    for n in sorted({n for s in steps for n in s}):
        ran = [i for i, s in enumerate(steps) if n in s]
        if len(ran) < 2:
            continue
        slow = max(ran, key=lambda i: steps[i][n])
        out[slow][n] = steps[slow][n] - min(steps[i][n] for i in ran)
    return out
