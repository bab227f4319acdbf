"""``nvbridge plot``: one static timeline picture of a step or window, to look at or paste in an issue.

Host threads (one lane each, ops stacked by nesting depth, CUDA API calls as a thin strip) sit
above GPU streams (one lane each, kernels / copies / sets). GPU idle time is shaded on every
GPU lane so gaps stand out without zooming, and the longest ops are labelled. Lanes come from a
pure function (``lanes``) so tests and callers can count them without drawing. matplotlib is
imported lazily with the Agg backend: converting never needs it, and no display is required.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col
from nvbridge.errors import ExportError
from nvbridge.export.chrome import step_window

MAX_DEPTH = 6  # nesting levels drawn per host lane; deeper ops are folded into the last one
LABELS = 12  # longest ops labelled
GPU_COLORS = {"kernel": "#2b8cbe", "memcpy": "#e6550d", "memset": "#fdae6b", "graph": "#756bb1"}
HOST_COLORS = ["#31a354", "#74c476", "#a1d99b", "#c7e9c0", "#d9f0d3", "#edf8e9"]
IDLE_COLOR = "#de2d26"


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


def window(report: Any, step: int | None = None, start_ns: int | None = None,
           end_ns: int | None = None) -> Window:
    """The window of ``ProfilerStep#step``, of [start_ns, end_ns], or of the whole capture.

    Raises:
        ExportError: no such step, or nothing recorded in the window.
    """
    tables = (report.ops, report.api_calls, report.gpu_ops)
    first = min((int(pc.min(t.column("start_ns")).as_py()) for t in tables if t.num_rows), default=None)
    last = max((int(pc.max(t.column("end_ns")).as_py()) for t in tables if t.num_rows), default=None)
    if first is None or last is None:
        raise ExportError("the report has no ranges, API calls or GPU ops to plot; profile with NVTX or CUDA tracing.")
    if step is not None:
        try:
            lo, hi = step_window(report.ops, step, step)
        except ValueError as exc:
            raise ExportError(str(exc)) from exc
        return Window(lo, hi, f"ProfilerStep#{step}")
    lo = first if start_ns is None else start_ns
    hi = last if end_ns is None else end_ns
    if hi <= lo:
        raise ExportError("the window is empty; pass an --end later than --start.")
    label = "whole capture" if start_ns is None and end_ns is None else \
        f"{(lo - first) / 1e6:,.3f} ms to {(hi - first) / 1e6:,.3f} ms"
    return Window(lo, hi, label)


def _overlaps(table: pa.Table, win: Window) -> np.ndarray:
    return (np_col(table, "end_ns") >= win.start_ns) & (np_col(table, "start_ns") <= win.end_ns)


def lanes(report: Any, win: Window) -> list[Lane]:
    """Lanes with something in the window: host threads (sorted by process, thread) above GPU
    streams (sorted by device, stream)."""
    ops, api, gpu = report.ops, report.api_calls, report.gpu_ops
    o, a, g = _overlaps(ops, win), _overlaps(api, win), _overlaps(gpu, win)
    depth = np.minimum(np_col(ops, "depth")[o], MAX_DEPTH - 1)
    threads: dict[tuple[int, int], int] = {}
    for p, t, d in zip(np_col(ops, "process_id")[o].tolist(), np_col(ops, "thread_id", fill=0)[o].tolist(),
                       depth.tolist()):
        threads[(p, t)] = max(threads.get((p, t), 0), d + 1)
    with_api = set(zip(np_col(api, "process_id")[a].tolist(), np_col(api, "thread_id")[a].tolist()))
    names = {(r["process_id"], r["thread_id"]): r.get("thread_name") for r in report.threads.to_pylist()}
    out = [Lane("host", p, t, f"{names.get((p, t)) or 'thread'} {t} (pid {p})", threads.get((p, t), 0),
                (p, t) in with_api) for p, t in sorted(set(threads) | with_api)]
    streams = sorted(set(zip(np_col(gpu, "device_id", fill=0)[g].tolist(),
                             np_col(gpu, "stream_id", fill=0)[g].tolist())))
    out += [Lane("gpu", d, s, f"GPU {d} stream {s}") for d, s in streams]
    return out


def _idle(starts: np.ndarray, ends: np.ndarray, win: Window) -> list[tuple[int, int]]:
    """Gaps in the window where none of the given GPU ops runs."""
    if len(starts) == 0:
        return [(win.start_ns, win.end_ns)]
    order = np.argsort(starts)
    s, e = np.maximum(starts[order], win.start_ns), np.minimum(ends[order], win.end_ns)
    reach = np.maximum.accumulate(e)
    gaps = [(win.start_ns, int(s[0]))] if s[0] > win.start_ns else []
    hole = s[1:] > reach[:-1]
    gaps += list(zip(reach[:-1][hole].tolist(), s[1:][hole].tolist()))
    if reach[-1] < win.end_ns:
        gaps.append((int(reach[-1]), win.end_ns))
    return gaps


def render(report: Any, dest: str | os.PathLike[str], *, step: int | None = None, start_ns: int | None = None,
           end_ns: int | None = None, width_px: int = 1800) -> Path:
    """Draw the timeline of a step or window into a PNG (or any format matplotlib knows by suffix).

    Raises:
        ExportError: matplotlib missing, no such step, or an empty window.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch, Rectangle
    except ImportError as exc:
        raise ExportError("plotting needs matplotlib; pip install 'nvbridge[plot]'.") from exc
    win = window(report, step, start_ns, end_ns)
    lane_list = lanes(report, win)
    if not lane_list:
        raise ExportError(f"nothing was recorded in {win.label}; pick another --step or window.")
    span_ms = (win.end_ns - win.start_ns) / 1e6

    tops = np.cumsum([0.0, *(lane.height for lane in lane_list)])  # lane i spans [tops[i], tops[i+1]) downwards
    dpi = 100
    fig, ax = plt.subplots(figsize=(width_px / dpi, max(3.0, 1.2 + 0.42 * tops[-1])), dpi=dpi)

    def ms(ns: Any) -> Any:
        return (np.asarray(ns, np.float64) - win.start_ns) / 1e6

    ops, api, gpu = report.ops, report.api_calls, report.gpu_ops
    o, a, g = _overlaps(ops, win), _overlaps(api, win), _overlaps(gpu, win)
    o_pid, o_tid = np_col(ops, "process_id")[o], np_col(ops, "thread_id", fill=0)[o]
    o_s, o_e = np_col(ops, "start_ns")[o], np_col(ops, "end_ns")[o]
    o_depth = np.minimum(np_col(ops, "depth")[o], MAX_DEPTH - 1)
    a_pid, a_tid = np_col(api, "process_id")[a], np_col(api, "thread_id")[a]
    a_s, a_e = np_col(api, "start_ns")[a], np_col(api, "end_ns")[a]
    g_dev, g_stream = np_col(gpu, "device_id", fill=0)[g], np_col(gpu, "stream_id", fill=0)[g]
    g_s, g_e = np_col(gpu, "start_ns")[g], np_col(gpu, "end_ns")[g]
    g_kind = np.asarray(gpu.column("kind").cast(pa.string()).filter(pa.array(g)).to_numpy(zero_copy_only=False))

    def bars(y: float, h: float, s: np.ndarray, e: np.ndarray, color: str | list[str], **kw: Any) -> None:
        if len(s):
            x0, x1 = np.maximum(ms(s), 0), np.minimum(ms(e), span_ms)
            ax.broken_barh(list(zip(x0, np.maximum(x1 - x0, span_ms * 2e-4))), (y, h), facecolors=color,
                           edgecolor="none", **kw)

    for i, lane in enumerate(lane_list):
        y0, y1 = tops[i], tops[i + 1]
        ax.axhline(y1, color="#bbbbbb", lw=0.5)
        if lane.kind == "host":
            mine = (o_pid == lane.pid) & (o_tid == lane.tid)
            for d in range(lane.depth):
                sel = mine & (o_depth == d)
                bars(y0 + 0.1 + 0.35 * d, 0.32, o_s[sel], o_e[sel], HOST_COLORS[d % len(HOST_COLORS)])
            sel = (a_pid == lane.pid) & (a_tid == lane.tid)
            bars(y1 - 0.4, 0.28, a_s[sel], a_e[sel], "#636363")
        else:
            busy = g_dev == lane.pid
            for lo, hi in _idle(g_s[busy], g_e[busy], win):
                x0, x1 = float(ms(lo)), float(ms(hi))
                ax.add_patch(Rectangle((x0, y0 + 0.05), x1 - x0, y1 - y0 - 0.1, facecolor=IDLE_COLOR, alpha=0.18,
                                       edgecolor="none"))
            sel = busy & (g_stream == lane.tid)
            bars(y0 + 0.15, y1 - y0 - 0.3, g_s[sel], g_e[sel], [GPU_COLORS.get(k, "#999999") for k in g_kind[sel]])

    # Label the longest ops (host ranges and GPU ops alike), clipped to what fits in the bar.
    names = ops.column("op_name").cast(pa.string()).filter(pa.array(o)).to_pylist()
    g_names = gpu.column("name").cast(pa.string()).filter(pa.array(g)).to_pylist()
    lane_index = {(lane.kind, lane.pid, lane.tid): i for i, lane in enumerate(lane_list)}
    cands = [(min(e, win.end_ns) - max(s, win.start_ns), s, e, n,
              tops[lane_index[("host", p, t)]] + 0.1 + 0.35 * d + 0.16)
             for s, e, n, p, t, d in zip(o_s.tolist(), o_e.tolist(), names, o_pid.tolist(), o_tid.tolist(),
                                         o_depth.tolist())]
    cands += [(min(e, win.end_ns) - max(s, win.start_ns), s, e, n, tops[lane_index[("gpu", d, st)]] + 0.45)
              for s, e, n, d, st in zip(g_s.tolist(), g_e.tolist(), g_names, g_dev.tolist(), g_stream.tolist())]
    px_per_ms = width_px * 0.82 / span_ms
    for dur, s, e, name, y in sorted(cands, key=lambda c: -c[0])[:LABELS]:
        chars = int(dur / 1e6 * px_per_ms / 6.5)
        if chars < 4:
            continue
        text = name if len(name) <= chars else name[: chars - 1] + "…"
        x = (max(s, win.start_ns) + min(e, win.end_ns)) / 2
        ax.text(float(ms(x)), y, text, ha="center", va="center", fontsize=7, clip_on=True)

    ax.set_ylim(tops[-1], 0)
    ax.set_xlim(0, span_ms)
    ax.set_yticks((tops[:-1] + tops[1:]) / 2)
    ax.set_yticklabels([lane.label for lane in lane_list], fontsize=8)
    ax.set_xlabel(f"ms from the window start ({win.label})")
    n_gpu = sum(lane.kind == "gpu" for lane in lane_list)
    source = Path(str(report.meta.get("source") or "report")).name
    ax.set_title(f"{source}: {win.label}, {span_ms:,.3f} ms, {len(lane_list) - n_gpu} host threads, "
                 f"{n_gpu} GPU streams", fontsize=10, loc="left")
    legend = [Patch(color=HOST_COLORS[0], label="NVTX range / op"), Patch(color="#636363", label="CUDA API call")]
    if n_gpu:
        legend += [Patch(color=GPU_COLORS[k], label=k) for k in ("kernel", "memcpy", "memset")]
        legend.append(Patch(color=IDLE_COLOR, alpha=0.18, label="GPU idle"))
    ax.legend(handles=legend, loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=7, ncol=len(legend),
              frameon=False, borderaxespad=0.2)
    ax.grid(axis="x", color="#eeeeee", lw=0.5)
    fig.tight_layout()
    path = Path(dest)
    try:
        fig.savefig(path, dpi=dpi)
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {exc.strerror}; choose a writable output path.") from exc
    finally:
        plt.close(fig)
    return path
