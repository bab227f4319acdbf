"""One clock for the reports of a multi-rank run: per report, the offset that puts its times on
the first report's clock (``aligned_ns = report_ns + offset_ns``).

Two sources, the second refining the first:

1. **Session start.** Nsight Systems counts from its session's start and records that start as
   wall clock (``meta.session_start_utc_ns``); nvprof counts in epoch nanoseconds
   (``time_base = epoch``). So each report's times have a wall-clock base, and the difference of
   bases is an offset. It is only as good as the hosts' wall clocks agree (NTP: often within a
   millisecond, sometimes far worse), which is why it is refined.
2. **Collectives.** One collective's kernels (or a CPU backend's ranges) end together on every
   rank: the last rank to arrive starts the transfer and all finish it within a few
   microseconds. For each collective matched between a report and the reference, the
   difference of ends is a measurement of the offset; their median is the refined offset, and
   the median absolute deviation around it the *residual* (the spread left after alignment).

The alignment is *reliable* when every report was refined by at least ``MIN_COLLECTIVES``
collectives and its residual is at most ``MAX_RESIDUAL_NS``; otherwise summary says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

MIN_COLLECTIVES = 5
MAX_RESIDUAL_NS = 100_000  # 100 us: ends of one collective across hosts, network jitter included


@dataclass(frozen=True, slots=True)
class ReportClock:
    """Where one report's times sit on the common clock."""

    report: str
    offset_ns: int
    residual_ns: int | None  # None: nothing measured it
    source: str  # reference, collectives, session, epoch, none
    collectives: int  # collectives the refinement used


@dataclass(frozen=True, slots=True)
class Clocks:
    """Every report's clock, and whether the alignment can be trusted."""

    reports: tuple[ReportClock, ...]
    reliable: bool

    def offsets(self) -> dict[str, int]:
        return {r.report: r.offset_ns for r in self.reports}

    def meta(self) -> dict[str, str]:
        """The root meta keys (docs/dataset.md)."""
        out: dict[str, str] = {"clock.reliable": "true" if self.reliable else "false"}
        for r in self.reports:
            out[f"clock.{r.report}.offset_ns"] = str(r.offset_ns)
            out[f"clock.{r.report}.residual_ns"] = "" if r.residual_ns is None else str(r.residual_ns)
            out[f"clock.{r.report}.source"] = r.source
            out[f"clock.{r.report}.collectives"] = str(r.collectives)
        return out


def wall_base(meta: Mapping[str, str | None]) -> int | None:
    """The wall-clock time of a report's zero: its session start, 0 for epoch times, None: unknown."""
    if meta.get("time_base") == "epoch":
        return 0
    value = meta.get("session_start_utc_ns")
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def align(
    names: Sequence[str],
    bases: Sequence[int | None],
    ends: Sequence[Mapping[int, int]],
    ref_residual: int | None = 0,
) -> Clocks:
    """Each report's offset to the first report's clock.

    Args:
        names: the reports, the reference first.
        bases: each report's :func:`wall_base`.
        ends: per report, the end (its own clock) of each collective matched across ranks, by
            match key; a report of several ranks gives its first rank's.
        ref_residual: the reference's own residual (:func:`spread_within`, for a report of
            several ranks).
    """
    ref_base = bases[0] if bases else None
    out = [ReportClock(names[0], 0, ref_residual, "reference", 0)] if names else []
    for name, base, mine in zip(names[1:], bases[1:], ends[1:]):
        start = base - ref_base if base is not None and ref_base is not None else 0
        first = "epoch" if base == 0 and ref_base == 0 else "session" if base is not None and ref_base else "none"
        d = _deltas(ends[0], mine, start)
        if len(d) >= 1:
            shift = int(np.median(d))
            out.append(ReportClock(name, start + shift, _spread(d - shift), "collectives", len(d)))
        else:
            out.append(ReportClock(name, start, None, first, 0))
    reliable = all(
        r.source == "reference" or (r.collectives >= MIN_COLLECTIVES and (r.residual_ns or 0) <= MAX_RESIDUAL_NS)
        for r in out
    )
    return Clocks(tuple(out), reliable and bool(out))


def _deltas(ref: Mapping[int, int], mine: Mapping[int, int], offset: int) -> np.ndarray:
    """ref end - (own end + offset) over the collectives both have."""
    keys = sorted(set(ref) & set(mine))
    return np.array([ref[k] - mine[k] - offset for k in keys], np.int64)


def _spread(d: np.ndarray) -> int | None:
    """Median absolute deviation of the end differences left after alignment."""
    return int(np.median(np.abs(d - np.median(d)))) if len(d) else None


def spread_within(ends_by_process: Sequence[Mapping[int, int]]) -> int | None:
    """The residual of one report holding several ranks (one clock): the median absolute
    difference between its first rank's ends and every other rank's."""
    if len(ends_by_process) < 2:
        return None
    d = np.concatenate([_deltas(ends_by_process[0], e, 0) for e in ends_by_process[1:]])
    return int(np.median(np.abs(d))) if len(d) else None
