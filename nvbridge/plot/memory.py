"""``nvbridge plot --memory`` and ``--memory-blocks``: where a report's memory went.

``--memory`` draws, per device, the live bytes over time stacked by category (parameters,
gradients, optimizer state, activations saved for backward, temporaries, other:
nvbridge.analysis.memory_categories) under the allocator's own ``total_allocated`` line, the
peak marked and labelled with its size, time, step, op and module. ``--memory-blocks`` draws
each block of a window as a bar from its allocation to its free (MegEngine's memory_flow),
one row per address, coloured by category, the largest blocks first where there are many.

The curves are reduced to the picture's width before drawing: in each pixel column the event
with the highest total is kept (so the peak is always drawn), the categories at that event
beside it. The memory table is read whole (the categories need each block's allocation and
free together); the picture holds a few thousand points however many events there were.
matplotlib is imported lazily, and the picture is written whole or not at all
(nvbridge.plot.picture).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from nvbridge.analysis.memory import memory_peaks
from nvbridge.analysis.memory_categories import CATEGORIES
from nvbridge.analysis.memory_timeline import categorized, curves
from nvbridge.columns import np_col
from nvbridge.dataset.report import DatasetTables
from nvbridge.errors import ExportError, MissingDependency
from nvbridge.plot.picture import DPI, output_path, window_of
from nvbridge.plot.picture import _save as save  # the staging write every picture uses
from nvbridge.plot.window import extent

COLORS = {  # torch's memory timeline colours (torch/profiler/_memory_profiler.py)
    "parameter": "darkgreen",
    "gradient": "mediumblue",
    "optimizer_state": "goldenrod",
    "activation": "red",
    "temporary": "mediumpurple",
    "other": "grey",
}
MAX_BARS = 2000  # blocks drawn by --memory-blocks: the largest in the window


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingDependency("plotting needs matplotlib; pip install 'nvbridge[plot]'.") from exc
    return plt


def memory_figure(report: DatasetTables, win_args: dict[str, int | None], width_px: int = 1800) -> Any:
    """The stacked memory timeline, one panel per device (the caller closes the figure)."""
    c = categorized(report)
    found = extent(report)
    win = window_of(found, **win_args)
    peaks = memory_peaks(report)
    plt = _pyplot()
    origin = found.first_ns or 0
    fig, axes = plt.subplots(len(peaks), 1, figsize=(width_px / DPI, 3.2 * len(peaks)), dpi=DPI, squeeze=False)
    for ax, peak in zip(axes[:, 0], peaks):
        drawn = curves(c, peak.device, win.start_ns, win.end_ns, width_px)
        x = (drawn.ts - origin) / 1e6
        ax.stackplot(
            x,
            *(drawn.live[k] / 2**20 for k in CATEGORIES),
            step="post",
            labels=CATEGORIES,
            colors=list(COLORS.values()),
        )
        ax.step(x, drawn.total / 2**20, where="post", color="black", linewidth=0.8, label="total allocated")
        at = peak.peak
        if win.start_ns <= at.peak_ns <= win.end_ns:
            px, py = (at.peak_ns - origin) / 1e6, at.peak_allocated_bytes / 2**20
            where = f", step {at.step}" if at.step is not None else ""
            what = f"\n{at.op}" + (f" ({at.module_path})" if at.module_path else "") if at.op else ""
            ax.plot([px], [py], "v", color="black")
            ax.annotate(
                f"peak {py:,.2f} MiB at {px:,.3f} ms{where}{what}",
                (px, py),
                fontsize=8,
                xytext=(6, -4),
                textcoords="offset points",
                va="top",
            )
        ax.set_ylabel(f"{peak.device} MiB")
        ax.legend(loc="upper left", fontsize=7, ncol=4)
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel(f"ms from the first event ({win.label})")
    axes[0, 0].set_title(f"Memory by category: {Path(str(report.meta.get('source') or 'report')).name}", fontsize=10)
    fig.tight_layout()
    return fig


def blocks_figure(report: DatasetTables, win_args: dict[str, int | None], width_px: int = 1800) -> Any:
    """Each block of the window as a bar from allocation to free, a row per address (the caller
    closes the figure)."""
    found = extent(report)
    win = window_of(found, **win_args)
    t = categorized(report).blocks.table
    alloc, free = np_col(t, "alloc_ns"), np_col(t, "free_ns", fill=win.end_ns)
    inside = np.flatnonzero((alloc <= win.end_ns) & (free >= win.start_ns))
    if not len(inside):
        raise ExportError(f"no memory block was live in {win.label}; pick another --step or window.")
    count = len(inside)
    inside = inside[np.argsort(-np_col(t, "bytes")[inside], kind="stable")[:MAX_BARS]]
    addresses = np_col(t, "address")[inside]
    row = np.unique(addresses, return_inverse=True)[1]
    origin = found.first_ns or 0
    left = (np.maximum(alloc[inside], win.start_ns) - origin) / 1e6
    right = (np.minimum(free[inside], win.end_ns) - origin) / 1e6
    colors = [COLORS[CATEGORIES[int(k)]] for k in np_col(t, "category")[inside]]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(width_px / DPI, max(3.0, min(12.0, 1.5 + 0.02 * row.max()))), dpi=DPI)
    ax.barh(row, right - left, left=left, height=0.8, color=colors, linewidth=0)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=n) for n, c in COLORS.items()], loc="upper right", fontsize=7, ncol=3)
    ax.set_xlabel(f"ms from the first event ({win.label})")
    ax.set_ylabel("block address (rank)")
    shown = f"the {MAX_BARS:,} largest of {count:,}" if count > MAX_BARS else f"{count:,}"
    ax.set_title(f"Memory blocks ({shown}), allocation to free, by category", fontsize=10)
    fig.tight_layout()
    return fig


def render(
    report: DatasetTables,
    dest: str | os.PathLike[str],
    *,
    blocks: bool = False,
    width_px: int = 1800,
    **win: int | None,
) -> Path:
    """Draw ``--memory`` (or with ``blocks``, ``--memory-blocks``) into ``dest`` (.png, .svg or
    .pdf), replacing it; ``win``: step, start_ns, end_ns as for the timeline.

    Raises:
        MissingDependency: matplotlib is not installed.
        ExportError: no memory events, no such step, an empty window, or an unwritable path.
    """
    path = output_path(dest)
    fig = (blocks_figure if blocks else memory_figure)(report, win, width_px)
    try:
        save(fig, path, DPI)
    finally:
        _pyplot().close(fig)
    return path
