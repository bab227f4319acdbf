"""The JSON forms of summary, advise and diff: one definition for what ``nvbridge summary|advise|diff
--json`` print and what the report page embeds (nvbridge/page), so the two cannot drift apart."""

from __future__ import annotations

import dataclasses
from typing import Any

from nvbridge.analysis.across_text import across_json, steps_json
from nvbridge.analysis.advise import Advice
from nvbridge.analysis.diff import OP_SUMS, Diff
from nvbridge.analysis.summarize import Summary


def summary_json(summary: Summary, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``summary --json`` for ``rows``: the GPU header, the ranks when there are several, model
    FLOPs, launches and the rows."""
    ranks = None
    if summary.several:
        ranks = {
            "ranks": [
                {
                    "rank": r.label,
                    "source": r.source,
                    "ops": r.ops,
                    "kernels": r.kernels,
                    "gpu_busy_ns": dict(r.gpu_busy_ns),
                    "process_id": r.process_id,
                    "self_cpu_ns": r.self_cpu_ns,
                    "self_gpu_ns": r.self_gpu_ns,
                    "lanes": [dataclasses.asdict(lane) for lane in r.lanes],
                }
                for r in summary.ranks
            ],
            "steps": steps_json(summary.steps, summary.across),
            "summed": True,  # the rows add the ranks up
            **across_json(summary.across),
        }
    gpu = [dict(dataclasses.asdict(d), several=summary.several) for d in summary.gpus]
    flops = dict(summary.flops) if summary.several else summary.flops[0][1] if summary.flops else None
    launches = dataclasses.asdict(summary.launches)
    return {"gpu": gpu, "ranks": ranks, "flops": flops, "launches": launches, "rows": rows}


def advice_json(advice: Advice) -> dict[str, Any]:
    """``advise --json`` of one report: figures and per-step times as objects."""
    out = dataclasses.asdict(advice)
    for f in out["findings"]:
        f["figures"] = dict(f["figures"])
        f["by_step"] = {str(k): v for k, v in f["by_step"]}
    for s, step in zip(out["steps"], advice.steps):
        s["idle_share"] = step.idle_share
        s["by_category"] = dict(step.by_category)
    if advice.dominant is not None:
        top = out["dominant"]
        top["by_category"] = dict(top["by_category"])
        top["copy_bytes"] = dict(top["copy_bytes"])
        top["share"] = advice.dominant.share
        top["copy_gbps"] = advice.dominant.copy_gbps
    return out


def diff_json(d: Diff, bound: float | None = None) -> dict[str, Any]:
    """``diff --json``: op figures by name with deltas; the regressions past ``bound`` (its
    ``--fail-above``; None: none listed)."""
    out = dataclasses.asdict(d)
    for row, o in zip(out["ops"], d.ops):
        row["a"], row["b"] = dict(zip(OP_SUMS, o.a)), dict(zip(OP_SUMS, o.b))
        row["delta"] = {f: o.delta(f) for f in OP_SUMS}
    out["regressions"] = d.regressions(bound) if bound is not None else []
    return out
