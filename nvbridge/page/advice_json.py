"""advise's and diff's results as the JSON their commands print, and the per-step bars.

The shapes are those of ``nvbridge advise --json`` and ``nvbridge diff --json``, built by the
same functions (nvbridge/analysis/as_json.py); tests/test_page_figures.py holds the page's data
equal to the commands' output.
"""

from __future__ import annotations

from typing import Any

from nvbridge.analysis import as_json
from nvbridge.analysis.advise import Advice
from nvbridge.analysis.diff import Diff
from nvbridge.page.figures import clean

OUTSIDE = "outside the GPU timeline"
MAX_STEPS = 300  # bars per lane; more steps are shown in bins of consecutive steps (mean per step)
# advise's JSON grows with the steps (a row per step and lane, each finding's time per step): the
# page keeps at most these, so its size stays bounded (the bars are drawn from all steps first)
MAX_STEP_ROWS = 1200
MAX_FINDING_STEPS = 20


def advice_json(advice: Advice) -> dict[str, Any]:
    """What ``nvbridge advise --json`` prints for one report, as the page embeds it (see :func:`bounded`)."""
    out: dict[str, Any] = clean(as_json.advice_json(advice))
    return out


def diff_json(d: Diff) -> dict[str, Any]:
    """What ``nvbridge diff --json`` prints (without ``--fail-above``: no regressions listed)."""
    out: dict[str, Any] = clean(as_json.diff_json(d))
    return out


def step_records(results: list[dict[str, Any]], run: str = "") -> list[dict[str, Any]]:
    """Per lane and step, the step's time by category (ms) from advise's JSON ``steps``, and the
    rest of the step (outside the lane's GPU timeline). Past MAX_STEPS steps on a lane,
    consecutive steps are binned (each bar the mean step of its bin, labelled ``A-B``)."""
    out: list[dict[str, Any]] = []
    several = len(results) > 1
    for advice in results:
        by_lane: dict[str, list[dict[str, Any]]] = {}
        for s in advice["steps"]:
            by_lane.setdefault(s["lane"], []).append(s)
        for lane, steps in by_lane.items():
            name = f"{advice['source']} {lane}" if several else lane
            steps.sort(key=lambda s: s["step"])
            size = -(-len(steps) // MAX_STEPS)  # steps per bar
            for i in range(0, len(steps), size):
                part = steps[i : i + size]
                label = str(part[0]["step"]) if size == 1 else f"{part[0]['step']}-{part[-1]['step']}"
                cats: dict[str, float] = {}
                for s in part:
                    for c, ns in s["by_category"].items():
                        cats[c] = cats.get(c, 0) + ns
                    cats[OUTSIDE] = cats.get(OUTSIDE, 0) + s["step_ns"] - sum(s["by_category"].values())
                for rank, (c, ns) in enumerate(cats.items()):
                    out.append(
                        {
                            "lane": f"{run}{name}",
                            "step": label,
                            "order": i,
                            "category": c,
                            "rank": rank,
                            "ms": ns / len(part) / 1e6,
                        }
                    )
    return out


def bounded(advice: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """advise's JSON with at most MAX_STEP_ROWS steps (the idlest) and each finding's
    MAX_FINDING_STEPS steps with the most time at stake, and what was left out (0 and 0: the
    page holds advise --json's figures whole)."""
    steps = advice["steps"]
    kept = sorted(steps, key=lambda s: -s["idle_share"])[:MAX_STEP_ROWS] if len(steps) > MAX_STEP_ROWS else steps
    cut_findings = 0
    findings = []
    for f in advice["findings"]:
        by_step = f["by_step"]
        if len(by_step) > MAX_FINDING_STEPS:
            cut_findings += 1
            top = sorted(by_step.items(), key=lambda kv: -kv[1])[:MAX_FINDING_STEPS]
            f = {**f, "by_step": dict(sorted(top, key=lambda kv: int(kv[0])))}
        findings.append(f)
    kept = sorted(kept, key=lambda s: (s["lane"], s["step"])) if kept is not steps else steps
    cut = {"steps": len(steps) - len(kept), "findings_by_step": cut_findings}
    return {**advice, "steps": kept, "findings": findings}, cut
