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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from nvbridge import output as outputs
from nvbridge.analysis import plural
from nvbridge.columns import merged_intervals, np_col
from nvbridge.dataset import Report
from nvbridge.errors import ExportError, MissingDependency
from nvbridge.output_names import write_error
from nvbridge.plot_window import Extent, extent, rows_in
from nvbridge.timeline import step_window_of

if TYPE_CHECKING:
    from matplotlib.axes import Axes

MAX_DEPTH = 6  # nesting levels drawn per host lane; deeper ops are folded into the last one
LABELS = 12  # longest ops labelled
GPU_COLORS = {"kernel": "#2b8cbe", "memcpy": "#e6550d", "memset": "#fdae6b", "graph": "#756bb1"}
HOST_COLORS = ["#31a354", "#74c476", "#a1d99b", "#c7e9c0", "#d9f0d3", "#edf8e9"]
IDLE_COLOR = "#de2d26"
STARTUP_COLOR = "#969696"  # hatched: a GPU's time before its first op (nvbridge.timeline)
SUFFIXES = (".png", ".svg", ".pdf")


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


def window(report: Report, step: int | None = None, start_ns: int | None = None, end_ns: int | None = None) -> Window:
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


def _overlaps(table: pa.Table, win: Window) -> np.ndarray:
    return (np_col(table, "end_ns") >= win.start_ns) & (np_col(table, "start_ns") <= win.end_ns)


def lanes(report: Report, win: Window) -> list[Lane]:
    """Lanes with something in the window: host threads (sorted by process, thread) above GPU
    streams (sorted by device, stream)."""
    ops, api, gpu = report.ops, report.api_calls, report.gpu_ops
    o, a, g = _overlaps(ops, win), _overlaps(api, win), _overlaps(gpu, win)
    depth = np.minimum(np_col(ops, "depth")[o], MAX_DEPTH - 1)
    threads: dict[tuple[int, int], int] = {}
    for p, t, d in zip(
        np_col(ops, "process_id")[o].tolist(), np_col(ops, "thread_id", fill=0)[o].tolist(), depth.tolist()
    ):
        threads[(p, t)] = max(threads.get((p, t), 0), d + 1)
    with_api = set(zip(np_col(api, "process_id")[a].tolist(), np_col(api, "thread_id")[a].tolist()))
    names = {(r["process_id"], r["thread_id"]): r.get("thread_name") for r in report.threads.to_pylist()}
    out = [
        Lane("host", p, t, f"{names.get((p, t)) or 'thread'} {t} (pid {p})", threads.get((p, t), 0), (p, t) in with_api)
        for p, t in sorted(set(threads) | with_api)
    ]
    streams = sorted(
        set(zip(np_col(gpu, "device_id", fill=0)[g].tolist(), np_col(gpu, "stream_id", fill=0)[g].tolist()))
    )
    out += [Lane("gpu", d, s, f"GPU {d} stream {s}") for d, s in streams]
    return out


def gpu_idle(starts: np.ndarray, ends: np.ndarray, win: Window, bounds: tuple[int, int]) -> list[tuple[int, int]]:
    """Gaps where none of a GPU's ops runs, inside the window and the GPU's timeline
    (``bounds``: its first GPU op start and last GPU op end, nvbridge.timeline): before the
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


@dataclass(frozen=True)
class _Drawn:
    """The window's rows of each table as columns, and where the lanes sit."""

    win: Window
    lanes: list[Lane]
    tops: np.ndarray  # lane i spans [tops[i], tops[i+1]) downwards
    ops: dict[str, np.ndarray]
    api: dict[str, np.ndarray]
    gpu: dict[str, np.ndarray]
    gpu_bounds: Mapping[int, tuple[int, int]]  # device -> its GPU timeline (nvbridge.timeline)

    @property
    def span_ms(self) -> float:
        return (self.win.end_ns - self.win.start_ns) / 1e6

    def ms(self, ns: Any) -> Any:
        return (np.asarray(ns, np.float64) - self.win.start_ns) / 1e6


def _select(report: Report, win: Window, lane_list: list[Lane], bounds: Mapping[int, tuple[int, int]]) -> _Drawn:
    ops, api, gpu = report.ops, report.api_calls, report.gpu_ops
    o, a, g = _overlaps(ops, win), _overlaps(api, win), _overlaps(gpu, win)
    return _Drawn(
        win,
        lane_list,
        np.cumsum([0.0, *(lane.height for lane in lane_list)]),
        ops={
            "pid": np_col(ops, "process_id")[o],
            "tid": np_col(ops, "thread_id", fill=0)[o],
            "start": np_col(ops, "start_ns")[o],
            "end": np_col(ops, "end_ns")[o],
            "depth": np.minimum(np_col(ops, "depth")[o], MAX_DEPTH - 1),
            "name": np.asarray(ops.column("op_name").cast(pa.string()).filter(pa.array(o)).to_pylist(), object),
        },
        api={
            "pid": np_col(api, "process_id")[a],
            "tid": np_col(api, "thread_id")[a],
            "start": np_col(api, "start_ns")[a],
            "end": np_col(api, "end_ns")[a],
        },
        gpu={
            "dev": np_col(gpu, "device_id", fill=0)[g],
            "stream": np_col(gpu, "stream_id", fill=0)[g],
            "start": np_col(gpu, "start_ns")[g],
            "end": np_col(gpu, "end_ns")[g],
            "kind": np.asarray(gpu.column("kind").cast(pa.string()).filter(pa.array(g)).to_numpy(zero_copy_only=False)),
            "name": np.asarray(gpu.column("name").cast(pa.string()).filter(pa.array(g)).to_pylist(), object),
        },
        gpu_bounds=bounds,
    )


def _draw_lanes(ax: Axes, d: _Drawn) -> None:
    from matplotlib.patches import Rectangle

    def bars(y: float, h: float, s: np.ndarray, e: np.ndarray, color: str | list[str]) -> None:
        if len(s):
            x0, x1 = np.maximum(d.ms(s), 0), np.minimum(d.ms(e), d.span_ms)
            ax.broken_barh(
                list(zip(x0, np.maximum(x1 - x0, d.span_ms * 2e-4))), (y, h), facecolors=color, edgecolor="none"
            )

    o, a, g = d.ops, d.api, d.gpu
    for i, lane in enumerate(d.lanes):
        y0, y1 = d.tops[i], d.tops[i + 1]
        ax.axhline(y1, color="#bbbbbb", lw=0.5)
        if lane.kind == "host":
            mine = (o["pid"] == lane.pid) & (o["tid"] == lane.tid)
            for depth in range(lane.depth):
                sel = mine & (o["depth"] == depth)
                bars(
                    y0 + 0.1 + 0.35 * depth, 0.32, o["start"][sel], o["end"][sel], HOST_COLORS[depth % len(HOST_COLORS)]
                )
            sel = (a["pid"] == lane.pid) & (a["tid"] == lane.tid)
            bars(y1 - 0.4, 0.28, a["start"][sel], a["end"][sel], "#636363")
        else:
            busy = g["dev"] == lane.pid
            bounds = d.gpu_bounds.get(lane.pid, (d.win.start_ns, d.win.end_ns))
            for lo, hi in gpu_idle(g["start"][busy], g["end"][busy], d.win, bounds):
                x0, x1 = float(d.ms(lo)), float(d.ms(hi))
                ax.add_patch(
                    Rectangle(
                        (x0, y0 + 0.05), x1 - x0, y1 - y0 - 0.1, facecolor=IDLE_COLOR, alpha=0.18, edgecolor="none"
                    )
                )
            if bounds[0] > d.win.start_ns:  # before the GPU's first op: start-up, not idle time
                x1 = float(d.ms(min(bounds[0], d.win.end_ns)))
                ax.add_patch(
                    Rectangle((0, y0 + 0.05), x1, y1 - y0 - 0.1, facecolor="none", hatch="//", ec=STARTUP_COLOR, lw=0)
                )
            sel = busy & (g["stream"] == lane.tid)
            bars(
                y0 + 0.15,
                y1 - y0 - 0.3,
                g["start"][sel],
                g["end"][sel],
                [GPU_COLORS.get(k, "#999999") for k in g["kind"][sel]],
            )


def _label_longest(ax: Axes, d: _Drawn, width_px: int) -> None:
    """Label the longest ops (host ranges and GPU ops alike), clipped to what fits in the bar."""
    win, o, g = d.win, d.ops, d.gpu
    row = {(lane.kind, lane.pid, lane.tid): d.tops[i] for i, lane in enumerate(d.lanes)}
    cands = [
        (min(e, win.end_ns) - max(s, win.start_ns), s, e, n, row[("host", p, t)] + 0.1 + 0.35 * k + 0.16)
        for s, e, n, p, t, k in zip(
            o["start"].tolist(), o["end"].tolist(), o["name"], o["pid"].tolist(), o["tid"].tolist(), o["depth"].tolist()
        )
    ]
    cands += [
        (min(e, win.end_ns) - max(s, win.start_ns), s, e, n, row[("gpu", dev, st)] + 0.45)
        for s, e, n, dev, st in zip(
            g["start"].tolist(), g["end"].tolist(), g["name"], g["dev"].tolist(), g["stream"].tolist()
        )
    ]
    px_per_ms = width_px * 0.82 / d.span_ms
    for dur, s, e, name, y in sorted(cands, key=lambda c: -c[0])[:LABELS]:
        chars = int(dur / 1e6 * px_per_ms / 6.5)
        if chars < 4:
            continue
        text = name if len(name) <= chars else name[: chars - 1] + "…"
        x = (max(s, win.start_ns) + min(e, win.end_ns)) / 2
        ax.text(float(d.ms(x)), y, text, ha="center", va="center", fontsize=7, clip_on=True)


def title(source: str, win: Window, host_threads: int, gpu_streams: int) -> str:
    span_ms = (win.end_ns - win.start_ns) / 1e6
    return (
        f"{source}: {win.label}, {span_ms:,.3f} ms, {plural(host_threads, 'host thread')}, "
        f"{plural(gpu_streams, 'GPU stream')}"
    )


def _decorate(ax: Axes, d: _Drawn, source: str) -> None:
    from matplotlib.patches import Patch

    ax.set_ylim(d.tops[-1], 0)
    ax.set_xlim(0, d.span_ms)
    ax.set_yticks((d.tops[:-1] + d.tops[1:]) / 2)
    ax.set_yticklabels([lane.label for lane in d.lanes], fontsize=8)
    ax.set_xlabel(f"ms from the window start ({d.win.label})")
    n_gpu = sum(lane.kind == "gpu" for lane in d.lanes)
    ax.set_title(title(source, d.win, len(d.lanes) - n_gpu, n_gpu), fontsize=10, loc="left")
    legend = [Patch(color=HOST_COLORS[0], label="NVTX range / op"), Patch(color="#636363", label="CUDA API call")]
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


def render(
    report: Report,
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
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingDependency("plotting needs matplotlib; pip install 'nvbridge[plot]'.") from exc
    if found is None:
        found = extent(report)
    win = window_of(found, step, start_ns, end_ns)
    report = rows_in(report, win.start_ns, win.end_ns)  # a streamed report: only the rows drawn
    lane_list = lanes(report, win)
    if not lane_list:
        raise ExportError(f"nothing was recorded in {win.label}; pick another --step or window.")
    drawn = _select(report, win, lane_list, found.gpus)
    dpi = 100
    fig, ax = plt.subplots(figsize=(width_px / dpi, max(3.0, 1.2 + 0.42 * drawn.tops[-1])), dpi=dpi)
    try:
        _draw_lanes(ax, drawn)
        _label_longest(ax, drawn, width_px)
        _decorate(ax, drawn, Path(str(report.meta.get("source") or "report")).name)
        fig.tight_layout()
        _save(fig, path, dpi)
    finally:
        plt.close(fig)
    return path


def _save(fig: Any, path: Path, dpi: int) -> None:
    """Write beside ``path`` under a staging name and rename: a failed or interrupted save leaves
    no half picture, and one a killed run left is removed by the next run into the folder
    (:func:`nvbridge.output.staging_file`). The file is created with mode 0666 less the umask,
    as a plain open() would."""
    tmp = outputs.staging_file(path, suffix=path.suffix)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as out:
            fig.savefig(out, dpi=dpi, format=path.suffix[1:].lower())
        os.replace(tmp, path)
    except OSError as exc:
        raise write_error(path, "the picture", exc) from exc
    finally:
        tmp.unlink(missing_ok=True)
        outputs.release(tmp)
