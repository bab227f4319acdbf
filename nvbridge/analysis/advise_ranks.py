"""``advise`` across the ranks of a dataset of many reports: one answer (each report's findings,
and the straggler findings no single report can make), as one JSON object and as text.

A ``straggler`` finding names the rank the others waited for, the steps, the range that made it
late (op and module: nvbridge.analysis.stragglers' cause) and every other rank's wait in those
steps. Steps with the same late rank and cause are one finding; findings whose waits are below a
tenth of the largest one's are left out (lockstep jitter names a rank every step).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from nvbridge.analysis.across_text import across_json
from nvbridge.analysis.op_table import format_time
from nvbridge.analysis.rank_comm import AcrossRanks, across_ranks
from nvbridge.analysis.stragglers import StepStraggler

KEEP_SHARE = 0.1  # of the largest straggler finding's late time


@dataclass(frozen=True, slots=True)
class Straggler:
    """One rank late, for one cause, over one or more steps."""

    rank: int
    steps: tuple[int, ...]
    op: str | None
    module_path: str | None
    late_ns: int  # summed over its steps: what each other rank waited for it, on average
    excess_ns: int  # the cause's extra time on the rank, summed over its steps
    waits: dict[int, int]  # every rank's wait in those steps

    def json(self) -> dict[str, Any]:
        return {
            "kind": "straggler",
            "rank": self.rank,
            "step": self.steps[0],
            "steps": list(self.steps),
            "op": self.op,
            "module_path": self.module_path,
            "late_ns": self.late_ns,
            "excess_ns": self.excess_ns,
            "waits": {str(r): ns for r, ns in sorted(self.waits.items())},
            "fix": self.fix(),
        }

    def fix(self) -> str:
        what = f"{self.op}{' in ' + self.module_path if self.module_path else ''}" if self.op else "its work"
        return (
            f"rank {self.rank} reached the collectives last: make {what} as fast there as on the other ranks "
            "(uneven data or work per rank, a slower device, a host interruption), or overlap it with communication"
        )


def stragglers_of(steps: tuple[StepStraggler, ...]) -> list[Straggler]:
    """Per (late rank, cause), the steps, summed; the small ones left out; largest first."""
    groups: dict[tuple[int, str | None, str | None], list[StepStraggler]] = {}
    for s in steps:
        if s.late_ns <= 0:
            continue
        key = (s.slowest_rank, s.cause.op if s.cause else None, s.cause.module_path if s.cause else None)
        groups.setdefault(key, []).append(s)
    out = []
    for (rank, op, module), found in groups.items():
        waits: dict[int, int] = {}
        for s in found:
            for r, ns in s.waits.items():
                if r != rank:
                    waits[r] = waits.get(r, 0) + ns
        excess = sum(s.cause.excess_ns for s in found if s.cause is not None)
        late = sum(s.late_ns for s in found)
        out.append(Straggler(rank, tuple(s.step for s in found), op, module, late, excess, waits))
    out.sort(key=lambda f: -f.late_ns)
    return [f for f in out if out and f.late_ns >= KEEP_SHARE * out[0].late_ns]


def ranks_advice(path: str | os.PathLike[str]) -> tuple[AcrossRanks | None, list[Straggler]]:
    across = across_ranks(path)
    return across, stragglers_of(across.steps) if across is not None else []


def report_skews(across: AcrossRanks | None, names: list[str]) -> list[dict[int, int]] | None:
    """Per report (partition names, in order), the steps its rank held the others back and by how
    much (advise's per-report ``rank_skew`` finding); None without collectives across ranks."""
    if across is None or not across.steps:
        return None
    out: list[dict[int, int]] = [{} for _ in names]
    for s in across.steps:
        report = across.rank_reports.get(s.slowest_rank)
        if report in names and s.late_ns > 0:
            out[names.index(report)][s.step] = s.late_ns
    return out


def ranks_json(reports: list[dict[str, Any]], across: AcrossRanks | None, found: list[Straggler]) -> dict[str, Any]:
    """``advise --json`` of a many-report dataset: one object."""
    return {
        "reports": reports,
        "findings": [f.json() for f in found],
        "ranks": across_json(across),
    }


def ranks_text(across: AcrossRanks | None, found: list[Straggler]) -> str:
    """The straggler findings as text, after the reports'."""
    if across is None:
        return ""
    lines = ["Across ranks:"]
    for f in found:
        steps = ", ".join(map(str, f.steps))
        waits = ", ".join(f"rank {r} {format_time(ns / 1e3)}" for r, ns in sorted(f.waits.items()))
        where = f" ({f.module_path})" if f.module_path else ""
        lines.append(
            f"  straggler: rank {f.rank} in step{'s' if len(f.steps) > 1 else ''} {steps}: {f.op or 'no range'}{where} "
            f"took {format_time(f.excess_ns / 1e3)} more than on the other ranks; they waited {waits}"
        )
        lines.append(f"    fix: {f.fix()}")
    if not found:
        lines.append("  no rank held the others back")
    lines += [f"  {note}" for note in across.notes()]
    return "\n".join(lines)
