"""The focus step's timeline for the page, decimated to the page's width.

``nvbridge.plot.pixels.decimate`` (what ``nvbridge plot`` draws from) reduces the rows of the
window to pixel columns a row group at a time: each row (a host thread's ops at one depth, its
CUDA API calls, a GPU stream's ops of one kind) becomes runs of covered columns, at most one per
two columns, so the page holds the same number of bars for ten ops as for ten million. GPU idle
time is the exact idle share of each column, in quarters, on one row per GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nvbridge.analysis.report import Report
from nvbridge.plot.picture import lanes_of
from nvbridge.plot.pixels import KINDS, Pixels, decimate, runs
from nvbridge.plot.window import Extent

WIDTH = 1200  # pixel columns: the chart's width on a 1366-px screen
IDLE_STEPS = 4
LABEL_SHARE = 0.08  # ops labelled: at least this share of the window


def _ms(pixels: Pixels, x: np.ndarray) -> list[float]:
    """Pixel column edges as ms from the window's start."""
    edges = pixels.edges
    at = np.clip(np.asarray(x, np.int64), 0, pixels.width)
    return [round(v, 6) for v in ((edges[at] - edges[0]) / 1e6).tolist()]


def step_timeline(report: Report, found: Extent, start_ns: int, end_ns: int, width: int = WIDTH) -> dict[str, Any]:
    """Bars of [start_ns, end_ns] as records for Vega-Lite: ``lane`` (the row), ``x0``/``x1``
    (ms from the window's start), ``kind`` and ``alpha``; the rows in drawing order; labels of
    the longest ops."""
    pixels = decimate(report, start_ns, end_ns, width, found.gpus)
    lanes = lanes_of(pixels, report.threads)
    names = {(lane.pid, lane.tid): lane.label for lane in lanes if lane.kind == "host"}
    order: list[str] = []
    for lane in lanes:
        if lane.kind == "host":
            order += [f"{lane.label} · depth {d}" for d in range(lane.depth)]
            order += [f"{lane.label} · CUDA API"] if lane.api else []
        else:
            order.append(lane.label)
    bars: list[dict[str, Any]] = []

    def add(labels: list[str], layer: Any, kinds: list[str], alpha: np.ndarray | None) -> None:
        x0, x1 = _ms(pixels, layer.x0), _ms(pixels, layer.x1)
        for i, k in enumerate(layer.key.tolist()):
            a = 1.0 if alpha is None else float(alpha[i])
            bars.append({"lane": labels[k], "x0": x0[i], "x1": x1[i], "kind": kinds[k], "alpha": a})

    ops = pixels.ops
    add([f"{names[(p, t)]} · depth {d}" for p, t, d in ops.keys], ops, ["op"] * len(ops.keys), None)
    api = pixels.api
    add([f"{names[(p, t)]} · CUDA API" for p, t in api.keys], api, ["CUDA API"] * len(api.keys), None)
    gpu = pixels.gpu
    kinds = [KINDS[c] if c < len(KINDS) else "other" for _, _, c in gpu.keys]
    add([f"GPU {d} stream {s}" for d, s, _ in gpu.keys], gpu, kinds, gpu.alpha)
    for device in sorted(pixels.busy_ns):
        share = pixels.idle_share(device)
        code = np.ceil(share * IDLE_STEPS).astype(np.int64)[None, :]
        _, x0, x1, level = runs(code)
        label = f"GPU {device} idle"
        order.append(label)
        for a, b, lv in zip(_ms(pixels, x0), _ms(pixels, x1), level.tolist()):
            bars.append({"lane": label, "x0": a, "x1": b, "kind": "GPU idle", "alpha": lv / IDLE_STEPS})
    labels = [
        {
            "lane": f"{names[(lab.row[0], lab.row[1])]} · depth {lab.row[2]}"
            if lab.host
            else f"GPU {lab.row[0]} stream {lab.row[1]}",
            "x": round((max(lab.start_ns, start_ns) - start_ns) / 1e6, 6),
            "name": lab.name,
            "ms": round(lab.ns / 1e6, 6),
        }
        for lab in pixels.labels
        # only ops wide enough to hold a name: narrower ones would write over each other
        if lab.ns >= LABEL_SHARE * (end_ns - start_ns) and (not lab.host or (lab.row[0], lab.row[1]) in names)
    ]
    return {"lanes": order, "bars": bars, "labels": labels, "span_ms": (end_ns - start_ns) / 1e6, "width": width}
