"""``nvbridge plot``: one static timeline picture of a step or window, to look at or paste in an issue.

Host threads (one lane each, ops stacked by nesting depth, CUDA API calls as a thin strip) sit
above GPU streams (one lane each, kernels / copies / sets). GPU idle time is shaded on every
GPU lane so gaps stand out without zooming, and the longest ops are labelled. Lanes come from a
pure function (``lanes``) so tests and callers can count them without drawing. matplotlib is
imported lazily with the Agg backend: converting never needs it, and no display is required.
The picture's format comes from its suffix (.png, .svg or .pdf, nothing else), and it is
written whole or not at all (a temporary file beside it, renamed).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from nvbridge.columns import merged_intervals
from nvbridge.dataset.report import DatasetTables
from nvbridge.dataset.timeline import step_window_of
from nvbridge.errors import ExportError, MissingDependency
from nvbridge.output import publish as outputs
from nvbridge.output.names import write_error
from nvbridge.output.owned import picture_metadata
from nvbridge.plot.draw import Drawn, Lane, Window, decorate, draw_lanes, label_longest, title
from nvbridge.plot.pixels import Pixels, decimate
from nvbridge.plot.window import Extent, extent

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SUFFIXES = (".png", ".svg", ".pdf")
DPI = 100
__all__ = ["SUFFIXES", "Lane", "Window", "figure", "gpu_idle", "lanes", "lanes_of", "output_path", "render", "title"]


def window(
    report: DatasetTables, step: int | None = None, start_ns: int | None = None, end_ns: int | None = None
) -> Window:
    """The window of ``ProfilerStep#step``, of [start_ns, end_ns], or of the whole capture.

    Raises:
        ExportError: no such step, or nothing recorded in the window.
    """
    return window_of(extent(report), step, start_ns, end_ns)


def window_of(found: Extent, step: int | None = None, start_ns: int | None = None, end_ns: int | None = None) -> Window:
    """:func:`window`, from the report's extent (``plot_window.extent``)."""
    first, last = found.first_ns, found.last_ns
    if first is None or last is None:
        raise ExportError("the report has no ranges, API calls or GPU ops to plot; profile with NVTX or CUDA tracing.")
    if step is not None:
        try:
            lo, hi = step_window_of(found.steps, step, step)
        except ValueError as exc:
            raise ExportError(str(exc)) from exc
        return Window(lo, hi, f"ProfilerStep#{step}")
    lo = first if start_ns is None else start_ns
    hi = last if end_ns is None else end_ns
    if hi <= lo:
        raise ExportError("the window is empty; pass an --end later than --start.")
    label = (
        "whole capture"
        if start_ns is None and end_ns is None
        else f"{(lo - first) / 1e6:,.3f} ms to {(hi - first) / 1e6:,.3f} ms"
    )
    return Window(lo, hi, label)


def lanes(report: DatasetTables, win: Window) -> list[Lane]:
    """Lanes with something in the window: host threads (sorted by process, thread) above GPU
    streams (sorted by device, stream)."""
    return lanes_of(decimate(report, win.start_ns, win.end_ns, 1, {}), report.threads)


def lanes_of(pixels: Pixels, threads: pa.Table) -> list[Lane]:
    """:func:`lanes`, from the window's bars (``plot_pixels.decimate``)."""
    depth: dict[tuple[int, int], int] = {}
    for p, t, d in pixels.ops.keys:
        depth[(p, t)] = max(depth.get((p, t), 0), d + 1)
    with_api = {(p, t) for p, t in pixels.api.keys}
    names = {(r["process_id"], r["thread_id"]): r.get("thread_name") for r in threads.to_pylist()}
    out = [
        Lane("host", p, t, f"{names.get((p, t)) or 'thread'} {t} (pid {p})", depth.get((p, t), 0), (p, t) in with_api)
        for p, t in sorted(set(depth) | with_api)
    ]
    out += [Lane("gpu", d, s, f"GPU {d} stream {s}") for d, s in sorted({(d, s) for d, s, _ in pixels.gpu.keys})]
    return out


def gpu_idle(starts: np.ndarray, ends: np.ndarray, win: Window, bounds: tuple[int, int]) -> list[tuple[int, int]]:
    """Gaps where none of a GPU's ops runs, inside the window and the GPU's timeline
    (``bounds``: its first GPU op start and last GPU op end, nvbridge.dataset.timeline): before the
    first GPU op the GPU is not idle, it has not started (start-up, shown apart)."""
    lo, hi = max(win.start_ns, bounds[0]), min(win.end_ns, bounds[1])
    s, e = merged_intervals(np.maximum(starts, lo), np.minimum(ends, hi))
    edges = [lo, *np.column_stack([s, e]).ravel().tolist(), hi]
    return [(a, b) for a, b in zip(edges[::2], edges[1::2]) if b > a]


def output_path(dest: str | os.PathLike[str]) -> Path:
    """``dest`` if its suffix names a picture format.

    Raises:
        ExportError: another suffix or none (matplotlib would add .png and write another file).
    """
    path = Path(dest)
    if path.suffix.lower() not in SUFFIXES:
        raise ExportError(f"{path} does not end in {', '.join(SUFFIXES)}; name the picture like {path.stem}.png.")
    return path


def render(
    report: DatasetTables,
    dest: str | os.PathLike[str],
    *,
    step: int | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
    width_px: int = 1800,
    found: Extent | None = None,
) -> Path:
    """Draw the timeline of a step or window into ``dest`` (.png, .svg or .pdf), replacing it.
    ``found``: the report's extent, if the caller has read it already.

    Raises:
        MissingDependency: matplotlib is not installed.
        ExportError: another suffix, no such step, an empty window, or an unwritable path.
    """
    path = output_path(dest)
    fig = figure(report, step=step, start_ns=start_ns, end_ns=end_ns, width_px=width_px, found=found)
    try:
        _save(fig, path, DPI)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    return path


def figure(
    report: DatasetTables,
    *,
    step: int | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
    width_px: int = 1800,
    found: Extent | None = None,
) -> Figure:
    """The timeline picture of :func:`render`, as a matplotlib Figure (close it when done).

    Raises:
        MissingDependency: matplotlib is not installed.
        ExportError: no such step, or an empty window.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingDependency("plotting needs matplotlib; pip install 'nvbridge[plot]'.") from exc
    if found is None:
        found = extent(report)
    win = window_of(found, step, start_ns, end_ns)
    # one bar per pixel column at most: a 1,800-pixel picture, however many ops (plot_pixels)
    pixels = decimate(report, win.start_ns, win.end_ns, width_px, found.gpus)
    lane_list = lanes_of(pixels, report.threads)
    if not lane_list:
        raise ExportError(f"nothing was recorded in {win.label}; pick another --step or window.")
    drawn = Drawn(win, lane_list, np.cumsum([0.0, *(lane.height for lane in lane_list)]), pixels, found.gpus)
    fig, ax = plt.subplots(figsize=(width_px / DPI, max(3.0, 1.2 + 0.42 * drawn.tops[-1])), dpi=DPI)
    try:
        draw_lanes(ax, drawn)
        label_longest(ax, drawn, width_px)
        decorate(ax, drawn, Path(str(report.meta.get("source") or "report")).name)
        fig.tight_layout()
    except BaseException:
        plt.close(fig)
        raise
    return fig


def _save(fig: Any, path: Path, dpi: int) -> None:
    """Write beside ``path`` under a staging name and rename: a failed or interrupted save leaves
    no half picture, and one a killed run left is removed by the next run into the folder
    (:func:`nvbridge.output.publish.staging_file`). The file is created with mode 0666 less the umask,
    as a plain open() would."""
    tmp = outputs.staging_file(path, suffix=path.suffix)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as out:
            fmt = path.suffix[1:].lower()
            fig.savefig(out, dpi=dpi, format=fmt, metadata=picture_metadata(fmt))
        os.replace(tmp, path)
    except OSError as exc:
        raise write_error(path, "the picture", exc) from exc
    finally:
        tmp.unlink(missing_ok=True)
        outputs.release(tmp)
