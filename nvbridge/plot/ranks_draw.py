"""``nvbridge plot`` of a dataset of many reports: one panel per ProfilerStep, one bar per rank
split into compute, communication, copies and idle (:mod:`nvbridge.plot.ranks`), the straggler's
bar outlined and named. At most :data:`MAX_PANELS` steps are drawn (the first ones; ``--step N``
draws one), so a long run still gives a picture one can read.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from nvbridge.errors import ExportError, MissingDependency
from nvbridge.plot.picture import DPI, _save, output_path
from nvbridge.plot.ranks import CATEGORIES, RankSteps, stragglers

if TYPE_CHECKING:
    from matplotlib.axes import Axes

MAX_PANELS = 12
COLORS = {"compute": "#4c9a2a", "communication": "#e08214", "copies": "#3b6fb6", "idle": "#d9d9d9"}
STRAGGLER = "#c00000"


def render_ranks(
    figures: list[RankSteps],
    dest: str | os.PathLike[str],
    *,
    step: int | None = None,
    title: str = "",
    named: Mapping[int, int] | None = None,
) -> tuple[Path, list[int], dict[int, int]]:
    """Draw the steps' bars into ``dest``; returns the path, the steps drawn and their stragglers
    (``named``: step -> rank the summary names, else the longest step: nvbridge.plot.ranks).

    Raises:
        MissingDependency: matplotlib is not installed.
        ExportError: another suffix, no steps (or not ``step``), an unwritable path.
    """
    path = output_path(dest)
    marked = stragglers(figures, named)
    steps = sorted(marked) if step is None else [step]
    if not steps or (step is not None and step not in marked):
        have = ", ".join(str(s) for s in sorted(marked)) or "none"
        raise ExportError(
            f"no ProfilerStep#{step} on any rank (the ranks have steps {have}); pass one of those to --step."
            if step is not None
            else "the ranks have no ProfilerStep#N ranges; record with nvbridge.emit_nvtx(...).step()."
        )
    steps = steps[:MAX_PANELS]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError as exc:
        raise MissingDependency("plotting needs matplotlib; pip install 'nvbridge[plot]'.") from exc
    cols = min(len(steps), 3)
    rows = math.ceil(len(steps) / cols)
    height = max(2.5, 0.6 + 0.16 * len(figures))
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, height * rows + 0.6), dpi=DPI, squeeze=False)
    try:
        for ax, n in zip(axes.flat, steps):
            _panel(ax, figures, n, marked.get(n))
        for ax in list(axes.flat)[len(steps) :]:
            ax.set_visible(False)
        handles = [Patch(color=COLORS[c]) for c in CATEGORIES]
        fig.legend(handles, CATEGORIES, loc="upper right", ncol=len(CATEGORIES), fontsize=8, frameon=False)
        fig.suptitle(title, x=0.01, ha="left", fontsize=10)
        fig.tight_layout(rect=(0, 0, 1, 0.96))
        _save(fig, path, DPI)
    finally:
        plt.close(fig)
    return path, steps, {n: marked[n] for n in steps}


def _panel(ax: Axes, figures: list[RankSteps], step: int, straggler: int | None) -> None:
    """One step: a bar per rank that ran it (rank 0 on top), its categories stacked, in ms."""
    ran = [(f, v) for f in figures if (v := f.of(step)) is not None]
    y = list(range(len(ran)))
    left = [0.0] * len(ran)
    for c in CATEGORIES:
        widths = [v[c] / 1e6 for _, v in ran]
        ax.barh(y, widths, left=left, color=COLORS[c], height=0.8)
        left = [a + b for a, b in zip(left, widths)]
    for i, (f, _) in enumerate(ran):
        if f.rank == straggler:
            ax.barh([i], [left[i]], height=0.8, fill=False, edgecolor=STRAGGLER, linewidth=1.6)
            ax.text(left[i], i, " straggler", va="center", fontsize=7, color=STRAGGLER)
    ax.set_yticks(y, [f"rank {f.rank}" for f, _ in ran], fontsize=7 if len(ran) <= 16 else 5)
    ax.invert_yaxis()
    ax.set_xlabel("ms", fontsize=8)
    ax.set_title(f"ProfilerStep#{step}", fontsize=9)
    ax.margins(x=0.12)
