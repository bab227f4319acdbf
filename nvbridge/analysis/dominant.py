"""What dominates a report's GPU timeline, by interval arithmetic, and the finding that names it.

Each lane's GPU timeline (nvbridge.dataset.timeline: first to last GPU op) is cut into categories that
never overlap, in this order:

- ``compute``: kernels (but NCCL's), memsets and graph launches running;
- ``communication``: NCCL kernels running, no compute;
- ``copies``: memcpys running, neither of the above;
- ``startup``: nothing running, inside a start-up call (advise's ``startup`` evidence);
- ``syncs``: nothing running, right after a host wait (the ``host_sync`` and blocking-copy
  evidence: idle time after each wait, capped at the wait);
- ``idle``: nothing running, the rest.

The largest category dominates. When it is not compute, advise puts the largest finding of a
kind in that category first (``CATEGORY_KINDS``); otherwise it says compute dominates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nvbridge.analysis import spans
from nvbridge.analysis.context import DTOD, DTOH, HTOD, Context
from nvbridge.analysis.findings import Evidence
from nvbridge.columns import np_col

CATEGORIES = ("compute", "communication", "copies", "startup", "syncs", "idle")
CATEGORY_KINDS = {
    "compute": ("below_roofline",),
    "communication": ("nccl_exposed",),
    "copies": ("blocking_copy_sync", "pageable_copy", "exposed_copies", "small_copies"),
    "startup": ("startup",),
    "syncs": ("blocking_copy_sync", "host_sync"),
    "idle": ("gpu_idle", "launch_bound", "rank_skew"),
}
WAIT_KINDS = ("host_sync", "blocking_copy_sync")


@dataclass(frozen=True, slots=True)
class Dominant:
    """The GPU timeline by category, the largest one, and the copies' volume and rate."""

    category: str
    ns: int
    of_ns: int  # the GPU timeline (advise's span_ns)
    by_category: tuple[tuple[str, int], ...]
    copy_bytes: tuple[tuple[str, int], ...]  # by direction: HtoD, DtoH, DtoD
    copy_ns: int  # time with a copy running (any category)
    link_peak_gbps: float | None = None  # PCIe/NVLink peak: no export nvbridge reads records it

    @property
    def share(self) -> float:
        return self.ns / self.of_ns if self.of_ns else 0.0

    @property
    def copy_gbps(self) -> float | None:
        """Bytes copied per second of copying (None: no copy time)."""
        total = sum(b for _, b in self.copy_bytes)
        return total / self.copy_ns if self.copy_ns else None


def _gpu_union(ctx: Context, mask: np.ndarray) -> spans.Spans:
    g = ctx.report.gpu_ops
    s, e = ctx.enc(ctx.gpu_lane, np_col(g, "start_ns")), ctx.enc(ctx.gpu_lane, np_col(g, "end_ns"))
    return spans.union(s[mask], e[mask])


def _evidence_union(ctx: Context, evidence: list[Evidence], kinds: tuple[str, ...]) -> spans.Spans:
    parts = [ev for ev in evidence if ev.kind in kinds]
    if not parts:
        return spans.empty()
    lane = np.concatenate([ev.lane for ev in parts])
    keep = lane >= 0
    s = np.concatenate([ev.start_ns for ev in parts])[keep]
    e = np.concatenate([ev.end_ns for ev in parts])[keep]
    return spans.union(ctx.enc(lane[keep], s), ctx.enc(lane[keep], e))


def _within(a: spans.Spans, b: spans.Spans) -> spans.Spans:
    """a intersected with b."""
    return spans.minus(a, spans.minus(a, b))


def category_spans(ctx: Context, timeline: spans.Spans, evidence: list[Evidence]) -> dict[str, spans.Spans]:
    """The timeline cut into CATEGORIES (module docstring), as lane-encoded spans that never
    overlap: per step, ``spans.clip_per_window`` gives each category's time in it."""
    compute = _within(_gpu_union(ctx, ctx.compute), timeline)
    comm = spans.minus(_within(_gpu_union(ctx, ctx.nccl), timeline), compute)
    memcpy = _within(_gpu_union(ctx, ctx.direction > 0), timeline)
    copies = spans.minus(spans.minus(memcpy, compute), comm)
    idle = spans.minus(timeline, ctx.busy)
    startup = _within(idle, _evidence_union(ctx, evidence, ("startup",)))
    syncs = _within(spans.minus(idle, startup), _evidence_union(ctx, evidence, WAIT_KINDS))
    rest = spans.minus(spans.minus(idle, startup), syncs)
    return dict(zip(CATEGORIES, (compute, comm, copies, startup, syncs, rest)))


def categorize(
    ctx: Context, timeline: spans.Spans, evidence: list[Evidence], cut: dict[str, spans.Spans] | None = None
) -> Dominant:
    """The timeline's categories (module docstring) from the GPU ops and advise's evidence
    (``cut``: :func:`category_spans`, where the caller has it already)."""
    g = ctx.report.gpu_ops
    cut = cut if cut is not None else category_spans(ctx, timeline, evidence)
    memcpy = _within(_gpu_union(ctx, ctx.direction > 0), timeline)
    by = {c: spans.length(cut[c]) for c in CATEGORIES}
    top = max(CATEGORIES, key=lambda c: by[c])  # ties: the earlier category
    way = ctx.direction
    nbytes = np_col(g, "bytes", fill=0)
    first, last = timeline if len(timeline[0]) else (np.zeros(0, np.int64),) * 2
    lane_s = ctx.enc(ctx.gpu_lane, np_col(g, "start_ns"))
    inside = spans.inside((first, last), lane_s) if len(first) else np.zeros(len(lane_s), bool)
    copy_bytes = tuple(
        (name, int(nbytes[(way == code) & inside].sum()))
        for code, name in ((HTOD, "HtoD"), (DTOH, "DtoH"), (DTOD, "DtoD"))
    )
    return Dominant(
        top,
        by[top],
        spans.length(timeline),
        tuple(by.items()),
        copy_bytes,
        spans.length(memcpy),
    )
