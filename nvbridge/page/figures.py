"""The figures a report page shows, as plain JSON values, from the functions the commands use.

Nothing here computes a figure of its own: the capture and the op tables come from
:func:`nvbridge.summarize` (one pass, grouped by name, input shapes and module at once, then
added up per grouping as ``summary --group-by`` would group), the roofline from
``nvbridge.plot.roofline.streamed_points`` (what ``plot --roofline`` draws), and the JSON
shapes are those of ``summary --json``, so the page's embedded data can be checked against
the commands' output (tests/test_page_figures.py).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa

from nvbridge.analysis import as_json, throughput
from nvbridge.analysis.op_table import KeyAverages, merge_averages
from nvbridge.analysis.summarize import Summary
from nvbridge.engine.costs.flops import precision
from nvbridge.gpu.peaks import Peaks

# summary --group-by NAME and the key columns each groups by
GROUPINGS = {"name": ("name",), "shape": ("name", "input_shapes"), "module": ("name", "module_path")}
MAX_ROWS = 1000  # op table rows per grouping, by self CUDA time: the page's size stays bounded
MAX_POINTS = 1000  # roofline points, by GPU time
ROOT = "(model)"  # the icicle's root: every op, in a module or not


def clean(value: Any) -> Any:
    """``value`` with NaN and infinities as None, so that ``JSON.parse`` in the page reads it."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def summary_json(summary: Summary, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``nvbridge summary --json`` prints, for ``rows``, as the page embeds it."""
    out: dict[str, Any] = clean(as_json.summary_json(summary, rows))
    return out


def grouped(summary: Summary, keys: tuple[str, ...]) -> KeyAverages:
    """The summary's finest rows (name, input shapes, module) added up by ``keys``: the rows
    ``summary --group-by`` gives (sums add up; the dtype is the least, as summary's)."""
    fine = summary.averages
    if fine.group_by == keys:
        return fine
    part = KeyAverages(fine.rows, fine.self_cpu_total_ns, fine.self_gpu_total_ns, keys)
    return merge_averages([part])


def table_rows(averages: KeyAverages, peaks: Peaks | None) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rows as ``summary --json`` lists them (sorted by self CUDA time, FLOPs rates added), at
    most MAX_ROWS, and what the cut left out."""
    rows = throughput.rates(averages.sorted("self_cuda_time_total", -1), peaks)
    shown = rows.slice(0, MAX_ROWS)
    rest = rows.slice(MAX_ROWS)
    left = {
        "rows": rest.num_rows,
        "self_cpu_ns": int(np.sum(rest.column("self_cpu_ns").to_numpy())) if rest.num_rows else 0,
        "self_gpu_ns": int(np.sum(rest.column("self_gpu_ns").to_numpy())) if rest.num_rows else 0,
    }
    return clean(shown.to_pylist()), left


def op_tables(summary: Summary) -> dict[str, Any]:
    """The op table of each grouping the summary can give (all three where it was grouped by name,
    input shapes and module), with the totals the percentages divide by."""
    out: dict[str, Any] = {}
    for name, keys in GROUPINGS.items():
        if not set(keys) <= set(summary.averages.group_by):
            continue  # a summary grouped by name alone cannot be split by shapes or modules
        averages = grouped(summary, keys)
        rows, left = table_rows(averages, summary.peaks)
        out[name] = {
            "keys": list(keys),
            "rows": rows,
            "left_out": left,
            "self_cpu_total_ns": averages.self_cpu_total_ns,
            "self_gpu_total_ns": averages.self_gpu_total_ns,
        }
    return out


def module_tree(summary: Summary) -> list[dict[str, Any]]:
    """GPU time by module as a tree for Vega's stratify: one node per module path prefix, each
    with the self CUDA time of the ops whose innermost module it is (``value``); a node's
    descendants add up under it in the icicle. The root holds the ops of the model itself and
    those outside every module (summary's module grouping keeps both as "")."""
    if "module_path" not in summary.averages.group_by:
        return []
    rows = grouped(summary, ("module_path",)).rows
    paths = rows.column("module_path").to_pylist()
    gpu = rows.column("self_gpu_ns").to_pylist()
    # the root's id is no module path ("" would be read as a second root by d3's stratify)
    nodes: dict[str, dict[str, Any]] = {ROOT: {"id": ROOT, "parent": None, "name": "all GPU time", "value": 0}}
    for path, ns in zip(paths, gpu):
        parts = path.split(".") if path else []
        for i in range(1, len(parts) + 1):
            node = ".".join(parts[:i])
            if node not in nodes:
                parent = ".".join(parts[: i - 1]) or ROOT
                nodes[node] = {"id": node, "parent": parent, "name": parts[i - 1], "value": 0}
        nodes[".".join(parts) or ROOT]["value"] += int(ns)
    return list(nodes.values()) if any(n["value"] for n in nodes.values()) else []


def roofline(points: pa.Table, peaks: Peaks | None) -> dict[str, Any]:
    """``plot --roofline``'s points (one per op name and input shapes) and roofs for the page."""
    if points.num_rows:
        order = np.argsort(-np.asarray(points.column("gpu_total_ns").to_numpy(), np.int64), kind="stable")
        points = points.take(pa.array(order[:MAX_POINTS]))
    rows = points.select(
        [
            c
            for c in (
                "name",
                "input_shapes",
                "compute_dtype",
                "calls",
                "flops",
                "bytes",
                "gpu_total_ns",
                "intensity",
                "achieved_tflops",
                "pct_of_peak",
                "bound",
            )
            if c in points.column_names
        ]
    ).to_pylist()
    for r in rows:
        r["precision"] = precision(str(r["name"]), r.get("compute_dtype"))
    roofs: list[dict[str, Any]] = []
    if peaks is not None and peaks.gbps and rows:
        xs = [r["intensity"] for r in rows]
        lo, hi = min(xs) / 4, max(xs) * 4
        for p in sorted({r["precision"] for r in rows}):
            _, peak = peaks.effective(p)
            if not peak:
                continue
            ridge = peak * 1e3 / peaks.gbps
            for x in sorted({lo, min(max(ridge, lo), hi), hi}):
                roofs.append({"precision": p, "intensity": x, "tflops": min(peak, x * peaks.gbps / 1e3)})
    out: dict[str, Any] = clean({"points": rows, "roofs": roofs, "peaks": peaks.text() if peaks else None})
    return out
