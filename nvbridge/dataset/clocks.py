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
TIGHT_NS = 20_000  # ends this close (median absolute deviation) are a sync point on their own


@dataclass(frozen=True, slots=True)
class ReportClock:
    """Where one report's times sit on the common clock."""

    report: str
    offset_ns: int
    residual_ns: int | None  # None: nothing measured it
    source: str  # reference, collectives, session, epoch, none
    collectives: int  # matched collectives that measured it
    end_spread_ns: int | None = None  # median absolute deviation of end differences after alignment


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
            out[f"clock.{r.report}.end_spread_ns"] = "" if r.end_spread_ns is None else str(r.end_spread_ns)
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
    events: Sequence[Mapping[int, tuple[int, int]]],
    ref_residual: int | None = 0,
) -> Clocks:
    """Each report's offset to the first report's clock.

    Args:
        names: the reports, the reference first.
        bases: each report's :func:`wall_base`.
        events: per report, (arrival, end) on its own clock of each collective matched across
            ranks, by match key; a report of several ranks gives its first rank's.
        ref_residual: the reference's own residual (:func:`spread_within`, for a report of
            several ranks).
    """
    if not names:
        return Clocks((), False)
    out = [ReportClock(names[0], 0, ref_residual, "reference", 0)]
    for name, base, mine in zip(names[1:], bases[1:], events[1:]):
        session = base - bases[0] if base is not None and bases[0] is not None else None
        out.append(_one(name, session, events[0], mine, "epoch" if base == 0 == bases[0] else "session"))
    reliable = all(_trusted(r) for r in out)
    return Clocks(tuple(out), reliable)


def _one(
    name: str, session: int | None, ref: Mapping[int, tuple[int, int]], mine: Mapping[int, tuple[int, int]], kind: str
) -> ReportClock:
    """One report's offset: the session starts' where every collective agrees with them (no rank
    ends a collective before another arrived at it) and, where the ends are tight, the ends'
    median is within TIGHT_NS of it; else the ends' median where they are tight; else the ends'
    median kept within what causality allows."""
    keys = sorted(set(ref) & set(mine))
    if not keys:
        return ReportClock(name, session or 0, None, kind if session is not None else "none", 0)
    r_arr, r_end = np.array([ref[k] for k in keys], np.int64).T
    m_arr, m_end = np.array([mine[k] for k in keys], np.int64).T
    d = r_end - m_end
    median = int(np.median(d))
    lo, hi = int((r_arr - m_end).max()), int((r_end - m_arr).min())  # own + x ends after every arrival
    tight = _mad(d, median) <= TIGHT_NS
    agrees = session is not None and lo <= session <= hi
    if session is not None and agrees and (not tight or abs(session - median) <= TIGHT_NS):
        x, source = session, kind  # one host, or hosts whose clocks agree this well
    elif tight or session is None:
        x, source = median, "collectives"
    else:
        x, source = (min(max(median, lo), hi) if lo <= hi else median), "collectives"
    # how far the offset breaks causality (0: no collective contradicts it), and where the
    # collectives chose the offset, also the ends' spread around it: that offset is only as good
    # as the ends agree (gloo2 moved 3 s came back 31.5 us off with ends 45 us apart, residual 0)
    broken = max(0, lo - x, x - hi)
    residual = _mad(d, x) if tight else max(broken, _mad(d, x)) if source == "collectives" else broken
    return ReportClock(name, x, residual, source, len(keys), _mad(d, x))


def _mad(d: np.ndarray, center: int) -> int:
    return int(np.median(np.abs(d - center)))


def _trusted(r: ReportClock) -> bool:
    if r.source == "reference":
        return True
    enough = r.collectives >= MIN_COLLECTIVES and r.residual_ns is not None and r.residual_ns <= MAX_RESIDUAL_NS
    # ends spread wide and the session starts contradicted: the median is a guess
    guessed = r.source == "collectives" and (r.end_spread_ns or 0) > MAX_RESIDUAL_NS
    return enough and not guessed


def spread_within(ends_by_process: Sequence[Mapping[int, int]]) -> int | None:
    """The residual of one report holding several ranks (one clock): the median absolute
    difference between its first rank's ends and every other rank's."""
    if len(ends_by_process) < 2:
        return None
    first = ends_by_process[0]
    d = [first[k] - e[k] for e in ends_by_process[1:] for k in sorted(set(first) & set(e))]
    return int(np.median(np.abs(np.array(d, np.int64)))) if d else None
