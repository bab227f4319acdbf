"""nvbridge report: the figures in the page equal the commands' (summary, advise, diff --json),
read back from the page's embedded data; what the page adds is checked against raw SQL."""

from __future__ import annotations

import json
import math
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.analysis.advise import advise_report
from nvbridge.cli import cli
from nvbridge.page.focus import median_step, windowed
from tests import raw_gpu
from tests.conftest import ALL_FILES, SAMPLE_DB, raw, real_db

ADVISE = SAMPLE_DB / "advise_cpu+synthetic_gpu.sqlite"
RANKS = SAMPLE_DB / "ranks_cpu+synthetic_gpu.sqlite"
BASE = SAMPLE_DB / "diff_base_cpu+synthetic_gpu.sqlite"
EXTRA = SAMPLE_DB / "diff_extra_cpu+synthetic_gpu.sqlite"
FLOPS = SAMPLE_DB / "flops_cpu.sqlite"
PYPROF = "nvprof-2020-pytorch14-pyprof-lm.sqlite"  # ops with shapes and GPU time: a roofline


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def cli_json(*args: str) -> Any:
    """A command's --json output, NaN read as None (as the page writes it: JSON.parse has no NaN)."""
    return _nan_none(json.loads(run(*args, "--json")))


def _nan_none(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_none(v) for v in value]
    return value


def page_data(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The embedded data and chart specs of a written page, as a browser's JSON.parse reads them."""
    text = path.read_text("utf-8")
    found = {}
    for name in ("nvbridge-data", "nvbridge-charts"):
        m = re.search(rf'<script type="application/json" id="{name}">(.*?)</script>', text, re.S)
        assert m, name
        found[name] = json.loads(m.group(1).replace("<\\/", "</"))
    return found["nvbridge-data"], found["nvbridge-charts"]


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("pages")
    written = {}
    for name, src in (("advise", ADVISE), ("ranks", RANKS), ("flops", FLOPS)):
        run("report", str(src), "-o", str(out / f"{name}.html"))
        written[name] = out / f"{name}.html"
    run("report", str(BASE), "--compare", str(EXTRA), "-o", str(out / "diff.html"))
    written["diff"] = out / "diff.html"
    return written


@pytest.mark.parametrize("name, src", [("advise", ADVISE), ("ranks", RANKS), ("flops", FLOPS)])
def test_summary_figures_equal_summary_json(pages: dict[str, Path], name: str, src: Path) -> None:
    data, _ = page_data(pages[name])
    expected = cli_json("summary", str(src), "--limit", "-1")
    assert data["summary"] == expected
    for group, flag in (("shape", "shape"), ("module", "module")):
        rows = cli_json("summary", str(src), "--limit", "-1", "--group-by", flag)["rows"]
        assert data["tables"][group]["rows"] == rows, group
    assert data["tables"]["name"]["rows"] is None  # read from summary's rows by the page


@pytest.mark.parametrize("name, src", [("advise", ADVISE), ("ranks", RANKS)])
def test_findings_equal_advise_json(pages: dict[str, Path], name: str, src: Path) -> None:
    data, charts = page_data(pages[name])
    assert data["advise_window"] is None  # small: advised whole
    assert data["advise_cut"] == [{"steps": 0, "findings_by_step": 0}]
    assert data["advise"] == [cli_json("advise", str(src))]
    # each finding's figures cell names its largest steps' time at stake, as advise --json has them
    from nvbridge.page.tables import t

    text = pages[name].read_text("utf-8")
    many = [f for f in data["advise"][0]["findings"] if len(f["by_step"]) > 1]
    assert many
    for f in many[:3]:
        step, ns = max(f["by_step"].items(), key=lambda kv: kv[1])
        assert f"by step {step}: {t(ns)}" in text
    # the step bars add up, per lane and step, to advise's step: its categories and the rest
    steps = {(s["lane"], str(s["step"])): s for s in data["advise"][0]["steps"]}
    bars: dict[tuple[str, str], float] = {}
    spec = charts["chart-steps"]
    for r in spec["data"]["values"]:
        bars[(r["lane"], r["step"])] = bars.get((r["lane"], r["step"]), 0.0) + r["ms"]
        if r["category"] != "outside the GPU timeline":
            lane_step = steps[(r["lane"], r["step"])]
            assert r["ms"] == pytest.approx(lane_step["by_category"][r["category"]] / 1e6, rel=1e-12)
    assert steps and set(bars) == set(steps)
    for key, ms in bars.items():
        assert ms == pytest.approx(steps[key]["step_ns"] / 1e6, rel=1e-12)


def test_advise_steps_by_category_add_up_to_the_timeline() -> None:
    """advise --json's new per-step categories: each within its step, and over the steps of one
    lane never more than the dominant categories of the whole timeline."""
    out = cli_json("advise", str(ADVISE))
    dominant = out["dominant"]["by_category"]
    for s in out["steps"]:
        assert set(s["by_category"]) == set(dominant)
        assert 0 <= sum(s["by_category"].values()) <= s["step_ns"]
        assert (
            s["by_category"]["compute"] + s["by_category"]["communication"] + s["by_category"]["copies"] <= s["busy_ns"]
        )
    for c, ns in dominant.items():
        assert sum(s["by_category"][c] for s in out["steps"]) <= ns


def test_compare_equals_diff_json(pages: dict[str, Path]) -> None:
    data, charts = page_data(pages["diff"])
    assert data["diff"] == cli_json("diff", str(BASE), str(EXTRA))
    left, right = charts["chart-compare"]["hconcat"]
    for side, src in ((left, BASE), (right, EXTRA)):
        steps = cli_json("advise", str(src))["steps"]
        assert steps and sum(r["ms"] for r in side["data"]["values"]) == pytest.approx(
            sum(s["step_ns"] for s in steps) / 1e6
        )


def test_cross_rank_view_equals_summary_spread(pages: dict[str, Path]) -> None:
    data, charts = page_data(pages["ranks"])
    spread = {s["step"]: s for s in data["summary"]["ranks"]["steps"]}
    by_step: dict[int, list[float]] = {}
    for r in data["rank_steps"]:
        by_step.setdefault(r["step"], []).append(r["ms"])
    assert set(by_step) == set(spread)
    for n, times in by_step.items():
        assert max(times) == pytest.approx(spread[n]["max_ns"] / 1e6) and min(times) == pytest.approx(
            spread[n]["min_ns"] / 1e6
        )
    assert charts["chart-ranks"]["data"]["values"] == data["rank_steps"]


def test_module_icicle_adds_up_to_all_gpu_time_in_raw_sql(pages: dict[str, Path]) -> None:
    """The icicle's values sum to every GPU op's time (summary's Self CUDA total, [no op] in),
    which SQLite's own sum over the export's kernel, memcpy and memset rows gives."""
    data, charts = page_data(pages["advise"])
    total = sum(n["value"] for n in data["modules"])
    assert total == data["tables"]["module"]["self_gpu_total_ns"]
    tables = [t for (t,) in raw(ADVISE, "SELECT name FROM sqlite_master WHERE type='table'")]
    gpu = sum(
        raw(ADVISE, f"SELECT COALESCE(SUM(end - start), 0) FROM {t}")[0][0]
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
        if t in tables
    )
    assert total == gpu
    ids = {n["id"] for n in data["modules"]}
    assert all(n["parent"] in ids for n in data["modules"] if n["parent"] is not None)
    assert charts["chart-modules"]["data"][0]["values"] == data["modules"]


def _steps_in_sql(path: Path) -> dict[int, int]:
    """ProfilerStep#N windows (first start to last end) read with sqlite3 from the export."""
    rows = raw(
        path,
        "SELECT s.value, n.start, n.end FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
        "WHERE s.value LIKE 'ProfilerStep#%' UNION ALL "
        "SELECT n.text, n.start, n.end FROM NVTX_EVENTS n WHERE n.text LIKE 'ProfilerStep#%'",
    )
    spans: dict[int, tuple[int, int]] = {}
    for text, start, end in rows:
        n = int(text.split("#")[1])
        lo, hi = spans.get(n, (start, end))
        spans[n] = (min(lo, start), max(hi, end))
    return {n: hi - lo for n, (lo, hi) in spans.items()}


@pytest.mark.parametrize("name, src", [("advise", ADVISE), ("ranks", RANKS)])
def test_timeline_shows_the_median_step(pages: dict[str, Path], name: str, src: Path) -> None:
    data, charts = page_data(pages[name])
    steps = _steps_in_sql(src)
    ranked = sorted(steps, key=lambda n: (steps[n], n))
    focus = data["capture"]["focus"]
    assert focus["step"] == ranked[(len(ranked) - 1) // 2]
    assert focus["end_ns"] - focus["start_ns"] == steps[focus["step"]]
    spec = charts["chart-timeline"]
    bars = spec["layer"][0]["data"]["values"]
    span_ms = (focus["end_ns"] - focus["start_ns"]) / 1e6
    assert bars and all(0 <= b["x0"] < b["x1"] <= span_ms + 1e-6 for b in bars)
    assert {b["lane"] for b in bars} <= set(spec["layer"][0]["encoding"]["y"]["sort"])
    assert len(bars) <= len(spec["layer"][0]["encoding"]["y"]["sort"]) * 1200 // 2 + 1


def test_median_step_of_ties_and_none() -> None:
    import numpy as np

    none = (np.zeros(0, np.int64),) * 3
    assert median_step(none) is None
    n = np.array([0, 1, 2, 3])
    start = np.array([0, 100, 200, 300])
    end = start + np.array([50, 10, 10, 30])
    assert median_step((n, start, end)) == 2  # spans 10, 10, 30, 50: the lower median, lower number on ties


def test_windowed_report_over_everything_advises_as_the_whole() -> None:
    """The cut and renumbered report (what a large report is advised on) gives the same advice
    as the report itself when the window holds everything, and a window keeps only its rows."""
    report = nvbridge.load(ADVISE)
    whole = windowed(report, -1, 1 << 62)
    assert advise_report(whole) == advise_report(report)
    data = raw(ADVISE, "SELECT MIN(start), MAX(end) FROM NVTX_EVENTS")[0]
    mid = (data[0] + data[1]) // 2
    half = windowed(report, mid, data[1])
    kept = raw(ADVISE, f"SELECT COUNT(*) FROM NVTX_EVENTS WHERE end >= {mid} AND end IS NOT NULL")[0][0]
    assert 0 < half.ops.num_rows <= kept
    ids = half.ops.column("op_id").to_pylist()
    assert ids == list(range(len(ids)))
    parents = [p for p in half.ops.column("parent_id").to_pylist() if p is not None]
    assert all(0 <= p < len(ids) for p in parents)


def test_large_report_is_advised_over_its_focus_step(tmp_path: Path) -> None:
    """Past --advise-ops the findings cover the focus step only, and the page says so."""
    out = tmp_path / "p.html"
    run("report", str(ADVISE), "-o", str(out), "--advise-ops", "150", "--step", "1")
    data, _ = page_data(out)
    assert "more than the 150 the page reads whole" in data["advise_window"]
    assert "cover ProfilerStep#1 (asked for) only" in data["advise_window"]
    lanes_steps = {s["step"] for a in data["advise"] for s in a["steps"]}
    assert 1 in lanes_steps
    report = nvbridge.load(ADVISE)
    f = data["capture"]["focus"]
    assert f["end_ns"] - f["start_ns"] == _steps_in_sql(ADVISE)[1]
    expected = advise_report(windowed(report, f["start_ns"], f["end_ns"]))
    from nvbridge.page.advice_json import advice_json

    assert data["advise"] == [advice_json(expected)]


def test_a_step_longer_than_the_bound_is_advised_in_its_middle(tmp_path: Path) -> None:
    """A focus step spanning more of the capture than --advise-ops ops fill (a step number that
    repeats, or one step that is most of the capture) is advised over its middle only: the
    capture's span times ops allowed / ops, so advise's read stays bounded."""
    out = tmp_path / "p.html"
    run("report", str(ADVISE), "-o", str(out), "--advise-ops", "10", "--step", "1")
    data, _ = page_data(out)
    assert "cover the middle of ProfilerStep#1 (asked for) only" in data["advise_window"]
    (lo, hi), n = (
        raw(ADVISE, "SELECT MIN(start), MAX(end) FROM NVTX_EVENTS")[0],
        raw(ADVISE, "SELECT COUNT(*) FROM NVTX_EVENTS")[0][0],
    )
    f = data["capture"]["focus"]
    width = int((hi - lo) * 10 / n)
    assert 0 < width < f["end_ns"] - f["start_ns"]
    middle = f["start_ns"] + (f["end_ns"] - f["start_ns"] - width) // 2
    from nvbridge.page.advice_json import advice_json

    expected = advise_report(windowed(nvbridge.load(ADVISE), middle, middle + width))
    assert data["advise"] == [advice_json(expected)]
    first = data["capture"]["first_ns"]
    assert f"{(middle - first) / 1e6:,.3f} ms to {(middle + width - first) / 1e6:,.3f} ms" in data["advise_window"]


def test_roofline_points_equal_plot_roofline(tmp_path: Path) -> None:
    from nvbridge.plot.roofline import streamed_points

    src = real_db(PYPROF)
    out = tmp_path / "p.html"
    run("report", str(src), "-o", str(out))
    data, charts = page_data(out)
    rows, peaks = streamed_points(nvbridge.load(src))
    points = data["roofline"]["points"]
    assert len(points) == rows.num_rows > 0
    got = {(p["name"], p["input_shapes"]): (p["flops"], p["gpu_total_ns"]) for p in points}
    assert got == {(r["name"], r["input_shapes"]): (r["flops"], r["gpu_total_ns"]) for r in rows.to_pylist()}
    # the roofs: flat at the GPU's peak past the ridge, peak bandwidth x intensity before it
    assert peaks is not None and peaks.gbps and data["roofline"]["roofs"]
    for roof in data["roofline"]["roofs"]:
        peak = peaks.effective(roof["precision"])[1]
        assert roof["tflops"] == pytest.approx(min(peak, roof["intensity"] * peaks.gbps / 1e3))
    assert charts["chart-roofline"]["layer"][1]["data"]["values"] == points


def test_page_size_does_not_grow_with_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiled 16x and 64x in time (each tile repeats the sample's steps), the page holds the same
    number of bars, table rows and steps once each is past its bound (the bounds made small here
    so a small sample reaches them): its size differs by the digits of the numbers."""
    from nvbridge.page import advice_json
    from scripts.bench import large_db

    monkeypatch.setattr(advice_json, "MAX_STEPS", 8)
    monkeypatch.setattr(advice_json, "MAX_STEP_ROWS", 16)
    monkeypatch.setattr(advice_json, "MAX_FINDING_STEPS", 4)
    sizes, rows = {}, {}
    for tiles in (16, 64):
        db = tmp_path / f"x{tiles}.sqlite"
        large_db.build(ADVISE, db, tiles=tiles, quiet=True)
        dataset = tmp_path / f"x{tiles}"
        nvbridge.convert(db, dataset)
        out = tmp_path / f"x{tiles}.html"
        run("report", str(dataset), "-o", str(out))
        sizes[tiles] = out.stat().st_size
        rows[tiles] = sqlite3.connect(db).execute("SELECT COUNT(*) FROM NVTX_EVENTS").fetchone()[0]
        data, charts = page_data(out)
        assert len(data["advise"][0]["steps"]) == 16 and data["advise_cut"][0]["steps"] == 4 * tiles - 16
        assert len({r["step"] for r in charts["chart-steps"]["data"]["values"]}) <= 8
        lanes = charts["chart-timeline"]["layer"][0]["encoding"]["y"]["sort"]
        assert len(charts["chart-timeline"]["layer"][0]["data"]["values"]) <= len(lanes) * (1200 // 2 + 1)
    assert rows[64] == 4 * rows[16]
    assert abs(sizes[64] - sizes[16]) < 0.03 * sizes[16], sizes


# Okabe and Ito's colour-universal palette (Wong, Nature Methods 8:441, 2011), written out here
# from the paper, not from nvbridge: black, orange, sky blue, bluish green, yellow, blue,
# vermillion, reddish purple; with neutral greys for idle time and what lies outside the GPU timeline
COLOUR_SAFE = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"}
GREYS = {"#999999", "#DDDDDD"}


def _colours(value: Any) -> set[str]:
    if isinstance(value, str):
        return set(re.findall(r"#[0-9A-Fa-f]{6}\b", value))
    if isinstance(value, dict):
        return set().union(*(_colours(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_colours(v) for v in value)) if value else set()
    return set()


def test_every_chart_colour_is_colour_blind_safe(pages: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "pyprof.html"
    run("report", str(real_db(PYPROF)), "-o", str(out))
    seen: set[str] = set()
    for page in [*pages.values(), out]:
        _, charts = page_data(page)
        seen |= {c.upper() for c in _colours(charts)}
    assert len(seen & COLOUR_SAFE) >= 6
    assert seen <= COLOUR_SAFE | GREYS, seen - COLOUR_SAFE - GREYS


def test_partitioned_dataset_page_equals_its_commands(tmp_path: Path) -> None:
    """A partitioned dataset (two reports): summary's figures add up across them, advise's list
    has one entry per report, as the commands print them."""
    dataset = tmp_path / "both"
    run("convert", str(ADVISE), str(RANKS), "-o", str(dataset))
    out = tmp_path / "p.html"
    run("report", str(dataset), "-o", str(out))
    data, _ = page_data(out)
    assert data["summary"] == cli_json("summary", str(dataset), "--limit", "-1")
    expected = cli_json("advise", str(dataset))["reports"]  # advise --json: one object, the reports in it
    assert isinstance(expected, list) and len(expected) == 2
    assert data["advise"] == expected


@pytest.mark.parametrize("name", [n for n in ALL_FILES if n != "nvprof-2020-empty-capture.sqlite"])  # refused: no rows
def test_module_icicle_adds_up_to_raw_gpu_time_on_every_real_export(name: str, tmp_path: Path) -> None:
    """The page's GPU time by module holds every GPU op's time once, on every real export: the
    kernels, copies, memsets and graph launches tests/raw_gpu.py reads with sqlite3."""
    src = real_db(name)
    out = tmp_path / "p.html"
    run("report", str(src), "-o", str(out))
    data, _ = page_data(out)
    want = sum(g.end - g.start for g in raw_gpu.read(src).gpu)
    assert sum(n["value"] for n in data["modules"]) == want > 0
