"""The timeline picture's drawing: where lanes sit, and every layer as a few matplotlib
collections built from NumPy arrays (``plot_pixels`` bars: at most one rectangle per pixel
column and row), the labels, title and legend. matplotlib is imported by the callers' functions
only when drawing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from nvbridge.output.names import plural
from nvbridge.plot.pixels import KINDS, Pixels

if TYPE_CHECKING:
    from matplotlib.axes import Axes

GPU_COLORS = {"kernel": "#2b8cbe", "memcpy": "#e6550d", "memset": "#fdae6b", "graph": "#756bb1"}
OTHER_GPU_COLOR = "#999999"
HOST_COLORS = ["#31a354", "#74c476", "#a1d99b", "#c7e9c0", "#d9f0d3", "#edf8e9"]
API_COLOR = "#636363"
IDLE_COLOR = "#de2d26"
IDLE_ALPHA = 0.18  # a pixel column where the GPU was idle all the time; less idle, fainter
IDLE_LEVELS = 8  # idle shares are drawn in this many steps, so equal runs of columns merge
STARTUP_COLOR = "#969696"  # hatched: a GPU's time before its first op (nvbridge.dataset.timeline)


@dataclass(frozen=True)
class Lane:
    """One horizontal lane: a host thread (pid, tid) or a GPU stream (device, stream)."""

    kind: str  # "host" or "gpu"
    pid: int  # process id, or device id for a GPU lane
    tid: int  # thread id, or stream id
    label: str
    depth: int = 0  # rows of nested ops drawn in a host lane
    api: bool = False  # a strip of CUDA API calls under the ops

    @property
    def height(self) -> float:
        return 0.9 if self.kind == "gpu" else 0.2 + 0.35 * self.depth + (0.4 if self.api else 0.0)


@dataclass(frozen=True)
class Window:
    """The time range drawn, in the report's time base, and how to name it in the title."""

    start_ns: int
    end_ns: int
    label: str


@dataclass(frozen=True)
class Drawn:
    """The window's bars, merged to the pixel, and where the lanes sit."""

    win: Window
    lanes: list[Lane]
    tops: np.ndarray  # lane i spans [tops[i], tops[i+1]) downwards
    pixels: Pixels
    gpu_bounds: Mapping[int, tuple[int, int]]  # device -> its GPU timeline (nvbridge.dataset.timeline)

    @property
    def span_ms(self) -> float:
        return (self.win.end_ns - self.win.start_ns) / 1e6

    def ms(self, ns: Any) -> Any:
        return (np.asarray(ns, np.float64) - self.win.start_ns) / 1e6

    def px_ms(self, px: Any) -> Any:
        """Pixel columns of ``pixels`` -> ms from the window start."""
        return np.asarray(px, np.float64) * (self.span_ms / self.pixels.width)

    def row(self, kind: str, pid: int, tid: int) -> int:
        """The index of the lane of a host thread or GPU stream."""
        return next(i for i, lane in enumerate(self.lanes) if (lane.kind, lane.pid, lane.tid) == (kind, pid, tid))


def rects(x0: np.ndarray, x1: np.ndarray, y: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Vertices of rectangles [x0, x1] x [y, y + h] for a PolyCollection: shape (n, 4, 2)."""
    v = np.empty((len(x0), 4, 2))
    v[:, 0, 0] = v[:, 1, 0] = x0
    v[:, 2, 0] = v[:, 3, 0] = x1
    v[:, 0, 1] = v[:, 3, 1] = y
    v[:, 1, 1] = v[:, 2, 1] = y + h
    return v


def bar_layers(d: Drawn) -> list[tuple[np.ndarray, np.ndarray]]:
    """(vertices, face colours) of each layer of bars: host ops, CUDA API calls, GPU ops."""
    from matplotlib.colors import to_rgba_array

    layers = []
    lane = {(ln.kind, ln.pid, ln.tid): i for i, ln in enumerate(d.lanes)}
    gpu_colors = [GPU_COLORS.get(k, OTHER_GPU_COLOR) for k in KINDS] + [OTHER_GPU_COLOR]
    for bars, place in (
        (d.pixels.ops, lambda k: (d.tops[lane["host", k[0], k[1]]] + 0.1 + 0.35 * k[2], 0.32, HOST_COLORS[k[2] % 6])),
        (d.pixels.api, lambda k: (d.tops[lane["host", k[0], k[1]] + 1] - 0.4, 0.28, API_COLOR)),
        (d.pixels.gpu, lambda k: (d.tops[lane["gpu", k[0], k[1]]] + 0.15, 0.6, gpu_colors[k[2]])),
    ):
        if not len(bars.key):
            continue
        y, h, color = zip(*(place(k) for k in bars.keys))  # per row: a few hundred at most
        order = np.argsort(np.asarray([k[-1] for k in bars.keys])[bars.key], kind="stable")  # kernels under copies
        key = bars.key[order]
        x0 = d.px_ms(bars.x0[order])
        x1 = d.px_ms(bars.x1[order])
        faces = to_rgba_array(list(color))[key]
        if bars.alpha is not None:  # a GPU column partly busy is drawn fainter (plot_pixels.by_kind)
            faces[:, 3] = bars.alpha[order]
        layers.append((rects(x0, x1, np.asarray(y)[key], np.asarray(h)[key]), faces))
    return layers


def idle_layers(d: Drawn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Idle shading (vertices, face colours: alpha by the idle share of each run of pixel
    columns) and the start-up hatching (vertices) of every GPU lane."""
    from matplotlib.colors import to_rgba

    shade, colors, hatch = [], [], []
    edges_ms = d.ms(d.pixels.edges)
    for i, lane in enumerate(d.lanes):
        if lane.kind != "gpu" or lane.pid not in d.pixels.busy_ns:
            continue
        y, h = d.tops[i] + 0.05, d.tops[i + 1] - d.tops[i] - 0.1
        level = np.round(d.pixels.idle_share(lane.pid) * IDLE_LEVELS).astype(np.int64)
        cut = np.flatnonzero(np.diff(level)) + 1
        first, last = np.concatenate([[0], cut]), np.concatenate([cut, [len(level)]])
        run = level[first] > 0
        first, last, lv = first[run], last[run], level[first[run]]
        shade.append(rects(edges_ms[first], edges_ms[last], np.full(len(lv), y), np.full(len(lv), h)))
        rgba = np.tile(np.asarray(to_rgba(IDLE_COLOR)), (len(lv), 1))
        rgba[:, 3] = IDLE_ALPHA * lv / IDLE_LEVELS
        colors.append(rgba)
        bounds = d.gpu_bounds.get(lane.pid, (d.win.start_ns, d.win.end_ns))
        if bounds[0] > d.win.start_ns:  # before the GPU's first op: start-up, not idle time
            x1 = float(d.ms(min(bounds[0], d.win.end_ns)))
            hatch.append(rects(np.zeros(1), np.full(1, x1), np.full(1, y), np.full(1, h)))
    empty = np.zeros((0, 4, 2))
    return (
        np.concatenate(shade) if shade else empty,
        np.concatenate(colors) if colors else np.zeros((0, 4)),
        np.concatenate(hatch) if hatch else empty,
    )


def draw_lanes(ax: Axes, d: Drawn) -> None:
    """Every lane's bars as a few collections: as many rectangles as the merged bars, at most
    one per pixel column and row, whatever the number of ops."""
    from matplotlib.collections import PolyCollection

    def polys(verts: np.ndarray, **style: Any) -> None:
        # an (n, 4, 2) array is PolyCollection's fast path (no Python object per rectangle)
        ax.add_collection(PolyCollection(cast("Sequence[Any]", verts), linewidths=0, **style))

    for i in range(len(d.lanes)):
        ax.axhline(d.tops[i + 1], color="#bbbbbb", lw=0.5)
    shade, colors, hatch = idle_layers(d)
    polys(shade, facecolors=colors, edgecolors="none")
    if len(hatch):
        polys(hatch, facecolors="none", edgecolors=STARTUP_COLOR, hatch="//")
    for verts, faces in bar_layers(d):
        polys(verts, facecolors=faces, edgecolors="none")


def label_longest(ax: Axes, d: Drawn, width_px: int) -> None:
    """Label the longest ops (host ranges and GPU ops alike), clipped to what fits in the bar."""
    win = d.win
    px_per_ms = width_px * 0.82 / d.span_ms
    for label in d.pixels.labels:
        chars = int(label.ns / 1e6 * px_per_ms / 6.5)
        if chars < 4:
            continue
        if label.host:
            p, t, k = label.row
            y = d.tops[d.row("host", p, t)] + 0.1 + 0.35 * k + 0.16
        else:
            y = d.tops[d.row("gpu", label.row[0], label.row[1])] + 0.45
        text = label.name if len(label.name) <= chars else label.name[: chars - 1] + "…"
        x = (max(label.start_ns, win.start_ns) + min(label.end_ns, win.end_ns)) / 2
        ax.text(float(d.ms(x)), y, text, ha="center", va="center", fontsize=7, clip_on=True)


def title(source: str, win: Window, host_threads: int, gpu_streams: int) -> str:
    span_ms = (win.end_ns - win.start_ns) / 1e6
    return (
        f"{source}: {win.label}, {span_ms:,.3f} ms, {plural(host_threads, 'host thread')}, "
        f"{plural(gpu_streams, 'GPU stream')}"
    )


def decorate(ax: Axes, d: Drawn, source: str) -> None:
    from matplotlib.patches import Patch

    ax.set_ylim(d.tops[-1], 0)
    ax.set_xlim(0, d.span_ms)
    ax.set_yticks((d.tops[:-1] + d.tops[1:]) / 2)
    ax.set_yticklabels([lane.label for lane in d.lanes], fontsize=8)
    ax.set_xlabel(f"ms from the window start ({d.win.label})")
    n_gpu = sum(lane.kind == "gpu" for lane in d.lanes)
    ax.set_title(title(source, d.win, len(d.lanes) - n_gpu, n_gpu), fontsize=10, loc="left")
    legend = [Patch(color=HOST_COLORS[0], label="NVTX range / op"), Patch(color=API_COLOR, label="CUDA API call")]
    if n_gpu:
        legend += [Patch(color=GPU_COLORS[k], label=k) for k in ("kernel", "memcpy", "memset")]
        legend.append(Patch(color=IDLE_COLOR, alpha=0.18, label="GPU idle"))
        if any(b[0] > d.win.start_ns for b in d.gpu_bounds.values()):
            legend.append(Patch(facecolor="none", hatch="//", edgecolor=STARTUP_COLOR, label="before the first GPU op"))
    ax.legend(
        handles=legend,
        loc="lower right",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=7,
        ncol=len(legend),
        frameon=False,
        borderaxespad=0.2,
    )
    ax.grid(axis="x", color="#eeeeee", lw=0.5)
