"""advise's memory finding (kind ``memory_peak``): what holds each device's peak, by category
(nvbridge.analysis.memory_categories) and module range, the op that allocated the most of it,
and the fix that applies.

A memory finding has no time at stake (``time_ns`` 0): it comes after the time findings, one
per device that recorded allocator events. Its figures are bytes: the peak, each category's
live bytes at it, the top op's, and the growth of the steps' starting allocation where every
step after the first starts higher than the one before (a reference kept across steps).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.analysis.memory import DevicePeak, memory_peaks, memory_rows
from nvbridge.analysis.memory_categories import CATEGORIES, MEMORY_COLUMNS, OPS_COLUMNS, Blocks, categorize, columns_of
from nvbridge.columns import np_col
from nvbridge.dataset.schema import ReportTables

KIND = "memory_peak"
LEAK_STEPS = 3  # steps (after the first) whose starting allocation must each grow before it is a leak
CATEGORY_TEXT = {
    "activation": "activations saved for backward",
    "parameter": "parameters",
    "gradient": "gradients",
    "optimizer_state": "optimizer state",
    "temporary": "temporaries",
    "other": "other blocks",
}


def module_range(paths: list[str]) -> str | None:
    """The modules ``paths`` name, as a range of numbered blocks where they are some:
    ``blocks.3-blocks.11`` for paths under blocks.3 ... blocks.11, else the commonest path."""
    numbered: dict[str, set[int]] = {}
    paths = [re.sub(r" \([^)]*\)$", "", p) for p in paths]  # "layers.3 (Linear)" -> "layers.3"
    for path in paths:
        parts = path.split(".")
        at = [i for i, p in enumerate(parts) if p.isdigit()]
        if at:
            numbered.setdefault(".".join(parts[: at[-1]]), set()).add(int(parts[at[-1]]))
    if numbered:
        prefix, ids = max(numbered.items(), key=lambda kv: (len(kv[1]), kv[0]))
        low, high = (f"{prefix}.{i}" if prefix else str(i) for i in (min(ids), max(ids)))  # Sequential: "0"
        return low if low == high else f"{low}-{high}"
    named = Counter(p for p in paths if p)
    return named.most_common(1)[0][0] if named else None


def step_starts(memory: pa.Table, device: str) -> list[tuple[int, int]]:
    """(step, total allocated just before the step's first event on ``device``) per step."""
    mine = memory.filter(pc.equal(memory.column("device").cast(pa.string()), device))
    step = np_col(mine, "step", fill=-1)
    if not (step >= 0).any():
        return []
    ts, total, size = np_col(mine, "ts_ns"), np_col(mine, "total_allocated"), np_col(mine, "bytes")
    out = []
    for s in np.unique(step[step >= 0]):
        rows = np.flatnonzero(step == s)
        first = rows[np.argmin(ts[rows])]
        out.append((int(s), int(total[first] - size[first])))
    return out


def growth_per_step(starts: list[tuple[int, int]]) -> int:
    """Bytes the step's starting allocation grows by per step, where it grows at every step
    after the first (warm-up: the optimizer state and first gradients) for LEAK_STEPS steps;
    else 0."""
    later = [b for _, b in starts[1:]]
    if len(later) < LEAK_STEPS or not all(b > a for a, b in zip(later, later[1:])):
        return 0
    return (later[-1] - later[0]) // (len(later) - 1)


def fix(top: str, modules: str | None, growth: int, stale_grads: bool) -> str:
    """The one sentence of fix for a peak held mostly by ``top``."""
    if growth:
        return (
            "The step's starting allocation grows every step: a reference is kept across steps (a loss or output "
            "tensor appended to a list: keep loss.item() instead, or detach)."
        )
    if stale_grads:
        return "Gradients of the previous step are still live: call optimizer.zero_grad(set_to_none=True)."
    where = f" of {modules}" if modules else ""
    return {
        "activation": f"Checkpoint the activations{where} (torch.utils.checkpoint), or use a smaller micro-batch.",
        "temporary": "Temporaries of one phase hold it: use in-place ops or a smaller micro-batch.",
        "optimizer_state": "Optimizer state holds it: shard it (ZeRO/FSDP) or use a lighter optimizer.",
        "parameter": "Parameters hold it: shard them (FSDP) or keep them in lower precision.",
        "gradient": "Gradients hold it: free them sooner (zero_grad(set_to_none=True)) or shard them (FSDP).",
    }.get(top, "Blocks nvbridge cannot place hold it: look at the ops that allocated them (plot --memory-blocks).")


@dataclass(frozen=True, slots=True)
class PeakFinding:
    """A device's memory finding: the fields of advise's Finding it fills, and ``top``, the
    category holding the most of the peak."""

    op: str
    module: str | None
    device: str
    count: int  # blocks live at the peak
    step: int | None
    figures: tuple[tuple[str, int], ...]
    fix: str
    top: str


def _one(blocks: Blocks, peak: DevicePeak, memory: pa.Table, ops: pa.Table) -> PeakFinding:
    """A device's memory finding."""
    at = peak.peak
    live = blocks.live_at(at.peak_ns, peak.device)
    sums = np.bincount(np_col(live, "category"), np_col(live, "bytes"), len(CATEGORIES))
    top = CATEGORIES[int(np.argmax(sums))]
    held = live.filter(pc.equal(live.column("category"), CATEGORIES.index(top)))
    modules = module_range([m for m in held.column("module_path").to_pylist() if m])
    per_op = live.select(["op_id", "bytes"]).group_by("op_id", use_threads=False).aggregate([("bytes", "sum")])
    names = _callers(ops, np_col(per_op, "op_id", fill=-1))
    by_op: Counter[str] = Counter()  # one entry per allocating op id (few), summed by name
    for op, nbytes in zip(per_op.column("op_id").to_pylist(), per_op.column("bytes_sum").to_pylist()):
        by_op[names.get(op, "(no op)") if op is not None else "(no op)"] += nbytes
    op, op_bytes = by_op.most_common(1)[0] if by_op else ("(no op)", 0)
    growth = growth_per_step(step_starts(memory, peak.device))
    grads = live.filter(pc.equal(live.column("category"), CATEGORIES.index("gradient")))
    stale = at.step is not None and bool(
        grads.num_rows and (np_col(grads, "alloc_ns") < _step_start(memory, peak.device, at.step)).any()
    )
    total = int(sums.sum()) or 1
    figures = {
        "peak_allocated_bytes": at.peak_allocated_bytes,
        "peak_ns": at.peak_ns,
        **{f"{c}_bytes": int(v) for c, v in zip(CATEGORIES, sums)},
        "top_share_pct": round(100 * int(sums.max()) / total),
        "op_bytes": int(op_bytes),
        "growth_bytes_per_step": growth,
    }
    return PeakFinding(
        op, modules, peak.device, live.num_rows, at.step, tuple(figures.items()), fix(top, modules, growth, stale), top
    )


def _step_start(memory: pa.Table, device: str, step: int) -> int:
    """The time of the step's first event on ``device``."""
    mine = memory.filter(
        pc.and_(pc.equal(memory.column("device").cast(pa.string()), device), pc.equal(memory.column("step"), step))
    )
    return int(pc.min(mine.column("ts_ns")).as_py())


def memory_findings(report: ReportTables) -> list[PeakFinding]:
    """Per device with allocator events, its memory finding."""
    if not memory_rows(report):
        return []
    memory = columns_of(report, "memory", [*MEMORY_COLUMNS, "step", "total_allocated"])
    ops = columns_of(report, "ops", OPS_COLUMNS)
    blocks = categorize(memory, ops)
    return [_one(blocks, peak, memory, ops) for peak in memory_peaks(report)]


def _callers(ops: pa.Table, wanted: np.ndarray) -> dict[int, str]:
    """Per op id of ``wanted``, the name of the outermost aten op in its chain of aten ops: an allocation in
    ``aten::empty_strided`` under ``aten::empty_like`` under ``aten::zeros_like`` is the
    zeros_like's (what the user's code called), one in ``aten::mm`` under ``AddmmBackward0``
    the mm's."""
    ids = np_col(ops, "op_id")
    n = int(ids.max(initial=-1)) + 1
    names = ops.column("op_name").cast(pa.string())
    parent = np.full(n, -1, np.int64)
    parent[ids] = np_col(ops, "parent_id", fill=-1)
    aten = np.zeros(n + 1, bool)  # the last slot: "no parent"
    aten[ids] = pc.starts_with(names, "aten::").fill_null(False).to_numpy(zero_copy_only=False)
    top = wanted[(wanted >= 0) & (wanted < n)]
    start = top.copy()
    for _ in range(n):
        up = parent[top]
        climb = aten[top] & aten[up]  # up == -1 reads the last slot: False
        if not climb.any():
            break
        top = np.where(climb, up, top)
    row = np.full(n, -1, np.int64)
    row[ids] = np.arange(len(ids))
    return dict(zip(start.tolist(), names.take(pa.array(row[top])).to_pylist()))


def describe(figures: dict[str, int], module: str | None) -> str:
    """What holds the peak, largest first: ``activations saved for backward of blocks.3-blocks.11 61%, ...``."""
    total = sum(figures.get(f"{c}_bytes", 0) for c in CATEGORIES) or 1
    parts: list[str] = []
    for c in sorted(CATEGORIES, key=lambda c: -figures.get(f"{c}_bytes", 0)):
        share = 100 * figures.get(f"{c}_bytes", 0) / total
        if share >= 1:
            where = f" of {module}" if module and not parts else ""
            parts.append(f"{CATEGORY_TEXT[c]}{where} {share:.0f}%")
    return ", ".join(parts)
