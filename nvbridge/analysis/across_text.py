"""The cross-rank answer (nvbridge.analysis.rank_comm) as summary's text lines and JSON object."""

from __future__ import annotations

import dataclasses
from typing import Any

from nvbridge.analysis.op_table import format_time
from nvbridge.analysis.rank_comm import AcrossRanks
from nvbridge.analysis.ranks import StepSpread
from nvbridge.analysis.stragglers import StepStraggler


def _t(ns: int) -> str:
    return format_time(ns / 1e3)


def straggler_line(s: StepStraggler) -> str:
    """One step: who held the others back, their waits, and the cause."""
    waits = ", ".join(f"rank {r} {_t(ns)}" for r, ns in sorted(s.waits.items()) if r != s.slowest_rank)
    line = f"  step {s.step}: rank {s.slowest_rank} held the others back {_t(s.late_ns)} (waits: {waits})"
    if s.cause is not None:
        where = f" in {s.cause.module_path}" if s.cause.module_path else ""
        line += (
            f"; cause: {s.cause.op}{where}, {_t(s.cause.excess_ns)} more {s.cause.time.upper()} time on rank "
            f"{s.slowest_rank} than the others' median"
        )
    return line


def lines(across: AcrossRanks) -> list[str]:
    """Per step the straggler, per rank the exposed communication, then the notes."""
    out = [straggler_line(s) for s in across.steps]
    comm = [
        f"rank {r} {_t(ns)}, exposed {_t(across.exposed_comm_ns.get(r, 0))} ({across.overlap_pct.get(r, 0.0):.0f}% "
        "overlapped)"
        for r, ns in sorted(across.comm_ns.items())
        if ns
    ]
    if comm:
        out.append(
            f"  communication ({across.matched} of {across.collectives} collective rows matched): " + "; ".join(comm)
        )
    out += [f"  {note}" for note in across.notes()]
    return out


def steps_json(spreads: tuple[StepSpread, ...], across: AcrossRanks | None) -> list[dict[str, Any]]:
    """``ranks.steps``: per step the spread of step times and, where collectives ran in it, the
    straggler (``slowest_rank``, ``late_ns``, ``waits``, ``cause``)."""
    by_step: dict[int, dict[str, Any]] = {s.step: dataclasses.asdict(s) for s in spreads}
    for s in across.steps if across is not None else ():
        row = by_step.setdefault(s.step, {"step": s.step})
        row["slowest_rank"] = s.slowest_rank
        row["late_ns"] = s.late_ns
        row["waits"] = {str(r): ns for r, ns in sorted(s.waits.items())}
        row["collectives"] = s.collectives
        row["cause"] = None if s.cause is None else dataclasses.asdict(s.cause)
    return [by_step[k] for k in sorted(by_step)]


def across_json(across: AcrossRanks | None) -> dict[str, Any]:
    """``ranks.exposed_comm_ns``, ``ranks.overlap_pct``, the clocks and the matching counts."""
    if across is None:
        return {}
    clocks = {k: v for k, v in across.meta.items() if k.startswith("clock.")}
    return {
        "comm_ns": {str(r): ns for r, ns in sorted(across.comm_ns.items())},
        "exposed_comm_ns": {str(r): ns for r, ns in sorted(across.exposed_comm_ns.items())},
        "overlap_pct": {str(r): pct for r, pct in sorted(across.overlap_pct.items())},
        "clock": {"reliable": across.clock_reliable, **clocks},
        "collectives": {"rows": across.collectives, "matched": across.matched},
        "notes": across.notes(),
    }
