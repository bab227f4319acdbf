"""The table scripts/bench_convert.py prints for each size, its ratios, and the scaling lines
between the first and last size."""

from __future__ import annotations

import subprocess

from .convert_run import BASELINE, DISORDERED, FLOOR, RAW, Run


def version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
        return out.splitlines()[-1] if out else "?"
    except (OSError, subprocess.SubprocessError):
        return "absent"


def row(r: Run, width: int = 24) -> str:
    if r.timed_out:
        return f"{r.tool:<{width}}{'timeout':>9}{'-':>9}{'-':>13}  {r.note}"
    return f"{r.tool:<{width}}{r.wall:>9.2f}{r.cpu:>9.2f}{r.rss_mb:>13.0f}  {r.note}"


def table(runs: list[Run]) -> str:
    by = {r.tool: r for r in runs}
    lines = [f"{'tool':<24}{'wall s':>9}{'cpu s':>9}{'peak RSS MB':>13}  notes"]
    for r in runs:
        lines.append(row(r))
    nvb, flo, nsy = by.get("nvbridge convert"), by.get(FLOOR), by.get("nsys stats nvtxkernsum")
    raw, base = by.get(RAW), by.get(BASELINE)
    if nvb and raw:
        lines.append(
            f"ratio nvbridge/raw read: {nvb.wall / raw.wall:.2f}x wall, {nvb.cpu / raw.cpu:.2f}x CPU, "
            f"{nvb.rss_mb / raw.rss_mb:.2f}x peak RSS"
        )
    if nvb and base:
        lines.append(
            f"ratio nvbridge/baseline: {nvb.wall / base.wall:.2f}x wall, {nvb.cpu / base.cpu:.2f}x CPU, "
            f"{nvb.rss_mb / base.rss_mb:.2f}x peak RSS"
        )
    two = by.get(DISORDERED)
    if two and raw:
        lines.append(
            f"ratio out-of-order convert/raw read: {two.wall / raw.wall:.2f}x wall; "
            f"peak RSS {two.rss_mb:.0f} MB (issue 19: < 600 MB)"
        )
    if nvb:
        lines.append(f"issue 19 memory: convert peak RSS {nvb.rss_mb:.0f} MB (< 600 MB: {nvb.rss_mb < 600})")
    if nvb and flo:
        lines.append(f"ratio nvbridge/floor: {nvb.wall / flo.wall:.2f}x wall, {nvb.rss_mb / flo.rss_mb:.2f}x peak RSS")
    if nvb and nsy:
        lines.append(f"ratio nsys/nvbridge:  {nsy.wall / nvb.wall:.2f}x wall, {nsy.rss_mb / nvb.rss_mb:.2f}x peak RSS")
    return "\n".join(lines)


def scaling(results: list[tuple[int, list[Run]]]) -> list[str]:
    """Each tool's growth in time and peak RSS from the first size to the last, and its time growth
    divided by the floor's and by the raw read's (nothing with fewer than two sizes)."""
    if len(results) < 2:
        return []
    (n0, r0), (n1, r1) = results[0], results[-1]
    a, b = {r.tool: r for r in r0}, {r.tool: r for r in r1}
    parts = [f"{t} {r.wall / a[t].wall:.2f}x time, {r.rss_mb / a[t].rss_mb:.2f}x RSS" for t, r in b.items() if t in a]
    lines = [f"\nscaling {n0:,} -> {n1:,} NVTX rows ({n1 / n0:.1f}x rows): " + "; ".join(parts)]
    # The same plain loop also grows faster or slower than the rows from run to run
    # (4.9x-5.4x for 5x rows on the 2-vCPU VM); divided by its growth, that drift cancels.
    for ref in (FLOOR, RAW):  # issue 19: convert's growth over the raw read's <= 1.05
        if ref in a and ref in b:
            drift = b[ref].wall / a[ref].wall
            rel = [f"{t} {b[t].wall / a[t].wall / drift:.2f}x" for t in b if t in a and t != ref]
            lines.append(f"time growth over the {ref}'s ({drift:.2f}x): " + "; ".join(rel))
    return lines
