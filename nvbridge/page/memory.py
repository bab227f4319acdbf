"""The report page's memory section: per device, the peak allocated and the live bytes over the
capture stacked by category (what ``plot --memory`` draws: nvbridge.analysis.memory_timeline),
as a Vega-Lite chart.

:func:`memory_timeline` returns None where the report recorded no allocator events (the page
then says how to record them); else ``{"devices": [...], "points": [...]}``: each device's peak
(``summary --json``'s memory object, with ``peak_ms`` from the capture start) and, per device,
category and drawn point, the live MiB (reduced to the chart's width, the peak kept).
"""

from __future__ import annotations

from typing import Any

from nvbridge.analysis.memory import memory_peaks, memory_rows
from nvbridge.analysis.memory_categories import CATEGORIES
from nvbridge.analysis.memory_timeline import categorized, curves
from nvbridge.analysis.report import Report
from nvbridge.page import charts
from nvbridge.plot.memory import COLORS
from nvbridge.plot.window import extent

MIB = 2**20


def memory_timeline(report: Report) -> dict[str, Any] | None:
    """The memory the report recorded over time, or None where it recorded none."""
    if not memory_rows(report):
        return None
    peaks = memory_peaks(report)
    c = categorized(report)
    first = c.memory.column("ts_ns")[0].as_py()
    origin = min(extent(report).first_ns or first, first)
    last = c.memory.column("ts_ns")[-1].as_py()
    devices, points = [], []
    for peak in peaks:
        top = peak.as_json()
        top.pop("steps")
        devices.append({"device": peak.device, **top, "peak_ms": (peak.peak.peak_ns - origin) / 1e6})
        drawn = curves(c, peak.device, first, last, charts.WIDTH)
        t_ms = ((drawn.ts - origin) / 1e6).tolist()
        for name in CATEGORIES:
            mib = (drawn.live[name] / MIB).tolist()
            points += [{"device": peak.device, "t_ms": t, "category": name, "mib": m} for t, m in zip(t_ms, mib)]
    return {"devices": devices, "points": points}


def memory_chart(data: dict[str, Any]) -> dict[str, Any]:
    """Live MiB over time stacked by category, one panel per device, the peak marked."""
    panels = []
    for d in data["devices"]:
        mine = [p for p in data["points"] if p["device"] == d["device"]]
        peak = {"t_ms": d["peak_ms"], "mib": d["peak_allocated_bytes"] / MIB, "label": f"peak {d['op'] or ''}"}
        x = {"field": "t_ms", "type": "quantitative", "title": "ms from the capture start"}
        panels.append(
            {
                "title": f"{d['device']}: live memory by category (MiB)",
                "width": charts.WIDTH,
                "height": 200,
                "layer": [
                    {
                        "data": {"values": mine},
                        "mark": {"type": "area", "interpolate": "step-after", "tooltip": True},
                        "encoding": {
                            "x": x,
                            "y": {"field": "mib", "type": "quantitative", "stack": "zero", "title": "MiB"},
                            "color": {
                                "field": "category",
                                "type": "nominal",
                                "scale": {"domain": list(COLORS), "range": list(COLORS.values())},
                                "title": None,
                            },
                            "order": {"field": "category"},
                        },
                    },
                    {
                        "data": {"values": [peak]},
                        "mark": {"type": "point", "shape": "triangle-down", "filled": True, "color": "black"},
                        "encoding": {
                            "x": x,
                            "y": {"field": "mib", "type": "quantitative"},
                            "tooltip": [
                                {"field": "label"},
                                {"field": "mib", "format": ",.3f"},
                                {"field": "t_ms", "format": ",.3f"},
                            ],
                        },
                    },
                ],
            }
        )
    return {
        "$schema": charts.SCHEMA,
        "vconcat": panels,
        "config": {"axis": charts.FONT, "legend": {**charts.FONT, "orient": "bottom"}},
    }


def peak_lines(data: dict[str, Any]) -> list[str]:
    """One sentence per device: its peak allocated, when, step, op and module."""
    out = []
    for d in data["devices"]:
        step = f" in step {d['step']}" if d["step"] is not None else ""
        op = f", during {d['op']}" if d["op"] else ""
        module = f" in {d['module_path']}" if d["module_path"] else ""
        nbytes = d["peak_allocated_bytes"]
        out.append(f"{d['device']}: peak {nbytes / MIB:,.2f} MiB at {d['peak_ms']:,.3f} ms{step}{op}{module}.")
    return out
