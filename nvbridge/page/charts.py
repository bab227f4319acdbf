"""The page's charts as Vega-Lite (and, for the icicle, Vega) specifications: JSON, drawn in
the browser by the Vega libraries embedded in the page (nvbridge/page/bundle.py).

Colours are Okabe and Ito's palette (Wong, Nature Methods 8:441, 2011), which readers with
any of the common colour-vision deficiencies tell apart; every chart also has tooltips and the
numbers behind it in a table nearby, so no figure depends on colour alone.
"""

from __future__ import annotations

from typing import Any

# Okabe-Ito: blue, bluish green, orange, vermillion, reddish purple, sky blue, yellow, grey
OKABE_ITO = ("#0072B2", "#009E73", "#E69F00", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#999999")
# the GPU timeline's categories (nvbridge.analysis.dominant), then the step's time outside it
CATEGORY_COLOURS = {
    "compute": "#0072B2",
    "communication": "#009E73",
    "copies": "#E69F00",
    "syncs": "#D55E00",
    "startup": "#CC79A7",
    "idle": "#999999",
    "outside the GPU timeline": "#DDDDDD",
}
KIND_COLOURS = {
    "op": "#56B4E9",
    "CUDA API": "#CC79A7",
    "kernel": "#0072B2",
    "memcpy": "#E69F00",
    "memset": "#009E73",
    "graph": "#F0E442",
    "other": "#000000",
    "GPU idle": "#999999",
}
WIDTH = 900  # chart width in CSS pixels: with its axis labels, fits the page's 1180 px on a 1366-px screen
TIMELINE_WIDTH = 760  # the timeline's lane labels take up to 320 px
SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"  # an identifier: never fetched
FONT = {"font": "system-ui, sans-serif", "labelFontSize": 12, "titleFontSize": 13}


def _base(title: str, height: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "$schema": SCHEMA,
        "title": title,
        "width": WIDTH,
        "config": {"axis": FONT, "legend": {**FONT, "orient": "bottom"}, "title": {"fontSize": 14}},
    }
    if height is not None:
        spec["height"] = height
    return spec


def _scale(colours: dict[str, str]) -> dict[str, Any]:
    return {"domain": list(colours), "range": list(colours.values())}


def step_bars(records: list[dict[str, Any]], title: str, width: int = WIDTH) -> dict[str, Any]:
    """Stacked bars: per lane (a rank's GPU) and step, the step's time by category (ms)."""
    spec = _base(title)
    lanes = sorted({r["lane"] for r in records})
    spec.update(
        width=width,
        data={"values": records},
        mark={"type": "bar", "tooltip": True},
        encoding={
            "x": {
                "field": "step",
                "type": "ordinal",
                "sort": {"field": "order"},
                "title": "step",
                "axis": {"labelAngle": 0},
            },
            "y": {"field": "ms", "type": "quantitative", "stack": "zero", "title": "ms"},
            "color": {"field": "category", "type": "nominal", "scale": _scale(CATEGORY_COLOURS), "title": None},
            "order": {"field": "rank", "type": "quantitative"},
            "tooltip": [
                {"field": "lane"},
                {"field": "step"},
                {"field": "category"},
                {"field": "ms", "format": ",.3f"},
            ],
        },
    )
    if len(lanes) > 1:  # one chart per lane, one above the other
        inner = {k: spec.pop(k) for k in ("width", "mark", "encoding")}
        inner["height"] = 160
        spec.update(facet={"row": {"field": "lane", "title": None}}, spec=inner)
    else:
        spec["height"] = 220
    return spec


def timeline(data: dict[str, Any], title: str) -> dict[str, Any]:
    """The focus window's bars: host threads (one row per depth, a row of CUDA API calls) above
    GPU streams and each GPU's idle share."""
    spec = _base(title, height=max(18 * len(data["lanes"]), 60))
    spec["width"] = TIMELINE_WIDTH
    y = {"field": "lane", "type": "ordinal", "sort": data["lanes"], "title": None, "axis": {"labelLimit": 320}}
    x = {"field": "x0", "type": "quantitative", "title": "ms", "scale": {"domain": [0, data["span_ms"]]}}
    spec["layer"] = [
        {
            "data": {"values": data["bars"]},
            "mark": {"type": "rect", "tooltip": True},
            "encoding": {
                "x": x,
                "x2": {"field": "x1"},
                "y": y,
                "color": {"field": "kind", "type": "nominal", "scale": _scale(KIND_COLOURS), "title": None},
                "opacity": {"field": "alpha", "type": "quantitative", "legend": None, "scale": {"domain": [0, 1]}},
                "tooltip": [{"field": "lane"}, {"field": "kind"}, {"field": "x0", "title": "from ms"}, {"field": "x1"}],
            },
        },
        {
            "data": {"values": data["labels"]},
            "mark": {"type": "text", "align": "left", "dx": 2, "fontSize": 10, "limit": 220},
            "encoding": {"x": {"field": "x", "type": "quantitative"}, "y": y, "text": {"field": "name"}},
        },
    ]
    return spec


def roofline(data: dict[str, Any], title: str) -> dict[str, Any]:
    """Ops at their arithmetic intensity and achieved TFLOP/s, sized by GPU time, under the roofs."""
    spec = _base(title, height=380)
    x = {"field": "intensity", "type": "quantitative", "scale": {"type": "log"}, "title": "FLOP per byte"}
    y = {"field": "achieved_tflops", "type": "quantitative", "scale": {"type": "log"}, "title": "TFLOP/s"}
    roofs = [
        {
            "data": {"values": data["roofs"]},
            "mark": {"type": "line", "strokeWidth": 2},
            "encoding": {
                "x": x,
                "y": {**y, "field": "tflops"},
                "strokeDash": {"field": "precision", "type": "nominal", "title": "roof"},
                "color": {"value": "#000000"},
            },
        }
    ]
    spec["layer"] = roofs[: 1 if data["roofs"] else 0] + [
        {
            "data": {"values": data["points"]},
            "mark": {"type": "point", "filled": True, "opacity": 0.8, "tooltip": True},
            "encoding": {
                "x": x,
                "y": y,
                "size": {"field": "gpu_total_ns", "type": "quantitative", "title": "GPU ns"},
                "color": {
                    "field": "bound",
                    "type": "nominal",
                    "scale": {"domain": ["compute", "memory"], "range": ["#0072B2", "#E69F00"]},
                },
                "shape": {"field": "precision", "type": "nominal"},
                "tooltip": [
                    {"field": "name"},
                    {"field": "input_shapes"},
                    {"field": "calls"},
                    {"field": "achieved_tflops", "format": ".3g"},
                    {"field": "intensity", "format": ".3g"},
                    {"field": "pct_of_peak", "format": ".1f", "title": "% of peak"},
                ],
            },
        },
    ]
    return spec


def icicle(nodes: list[dict[str, Any]], title: str) -> dict[str, Any]:
    """GPU time by module as an icicle (Vega: stratify and partition lay it out): the model on
    top, each module under its parent, as wide as the GPU time of its ops and its children's."""
    colours = {"type": "ordinal", "domain": {"data": "tree", "field": "depth"}, "range": list(OKABE_ITO[:7])}
    return {
        "$schema": "https://vega.github.io/schema/vega/v6.json",
        "title": title,
        "width": WIDTH,
        "height": 280,
        "padding": 5,
        "data": [
            {
                "name": "tree",
                "values": nodes,
                "transform": [
                    {"type": "stratify", "key": "id", "parentKey": "parent"},
                    {
                        "type": "partition",
                        "field": "value",
                        "sort": {"field": "value", "order": "descending"},
                        "size": [{"signal": "width"}, {"signal": "height"}],
                        "as": ["x0", "y0", "x1", "y1", "depth", "children"],
                    },
                    {"type": "formula", "as": "ms", "expr": "datum.value / 1e6"},
                ],
            }
        ],
        "scales": [{"name": "colour", **colours}],
        "marks": [
            {
                "type": "rect",
                "from": {"data": "tree"},
                "encode": {
                    "enter": {
                        "x": {"field": "x0"},
                        "x2": {"field": "x1"},
                        "y": {"field": "y0"},
                        "y2": {"field": "y1"},
                        "fill": {"scale": "colour", "field": "depth"},
                        "stroke": {"value": "white"},
                        "tooltip": {
                            "signal": "{'module': datum.id, 'GPU ms (with children)': format(datum.ms, ',.3f')}"
                        },
                    }
                },
            },
            {
                "type": "text",
                "from": {"data": "tree"},
                "encode": {
                    "enter": {
                        "x": {"signal": "datum.x0 + 4"},
                        "y": {"signal": "(datum.y0 + datum.y1) / 2"},
                        "baseline": {"value": "middle"},
                        "fontSize": {"value": 11},
                        "fill": {"value": "white"},
                        "text": {"signal": "datum.x1 - datum.x0 > 40 ? datum.name : ''"},
                        "limit": {"signal": "datum.x1 - datum.x0 - 6"},
                    }
                },
            },
        ],
    }


def rank_steps(records: list[dict[str, Any]], title: str, legend: str = "rank") -> dict[str, Any]:
    """The cross-rank view: each step's time on each rank, side by side (the slowest stands out)."""
    spec = _base(title, height=240)
    spec.update(
        data={"values": records},
        mark={"type": "bar", "tooltip": True},
        encoding={
            "x": {"field": "step", "type": "ordinal", "title": "step", "axis": {"labelAngle": 0}},
            "xOffset": {"field": "rank", "type": "nominal"},
            "y": {"field": "ms", "type": "quantitative", "title": "step time (ms)"},
            "color": {"field": "rank", "type": "nominal", "scale": {"range": list(OKABE_ITO)}, "title": legend},
            "tooltip": [{"field": "rank"}, {"field": "step"}, {"field": "ms", "format": ",.3f"}],
        },
    )
    return spec
