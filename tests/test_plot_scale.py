"""``nvbridge plot`` at scale (issue 25, item 11): bars decimated to the pixel, idle time exact
per pixel column, the number of rectangles drawn bounded by the picture's width.

The independent side: GPU ops read with Python's sqlite3 (tests/raw_gpu.py), the columns each
op touches and the idle time of each column recomputed with plain loops.
"""

from __future__ import annotations

import math
import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import nvbridge
from nvbridge.analysis.advise import advise_report
from nvbridge.dataset.report import DatasetTables
from nvbridge.export import parquet
from tests import raw_gpu
from tests.conftest import ALL_FILES, real_db
from tests.raw_gpu import EVERY, path_of

pytest.importorskip("matplotlib", reason="plots need matplotlib: pip install -e '.[plot]'")

from nvbridge.plot import picture as plot
from nvbridge.plot.pixels import KINDS, LABELS, decimate  # noqa: E402
from nvbridge.plot.window import extent  # noqa: E402

WIDTH = 1800
LM = "nvprof-2020-pytorch14-pyprof-lm.sqlite"


def _touched(s: int, e: int, lo: int, hi: int, width: int) -> range:
    """The pixel columns an op [s, e] touches in the window [lo, hi] (docs/cli.md: a bar
    covers every column it touches)."""
    scale = width / (hi - lo)
    x0 = min(max((s - lo) * scale, 0.0), width)
    x1 = min(max((e - lo) * scale, 0.0), width)
    first = min(int(math.floor(x0)), width - 1)
    last = max(min(int(math.ceil(x1)) - 1, width - 1), first)
    return range(first, last + 1)


def _raw_idle(ops: list[raw_gpu.GpuOp], edges: list[int], bounds: tuple[int, int]) -> list[int]:
    """Idle ns of each column [edges[i], edges[i+1]) inside the GPU timeline ``bounds``: plain loops."""
    lo, hi = max(bounds[0], edges[0]), min(bounds[1], edges[-1])
    busy = raw_gpu.union([(max(g.start, lo), min(g.end, hi)) for g in ops if g.end > lo and g.start < hi])
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        inside = max(min(b, hi) - max(a, lo), 0)
        covered = sum(max(min(b, e) - max(a, s), 0) for s, e in busy if s < b and e > a)
        out.append(inside - covered)
    return out


def _windows(report: DatasetTables) -> list[plot.Window]:
    """The whole capture, and its middle third (bars cut at both ends)."""
    whole = plot.window_of(extent(report))
    third = (whole.end_ns - whole.start_ns) // 3
    return [whole, plot.Window(whole.start_ns + third, whole.end_ns - third, "middle")]


@pytest.mark.parametrize("name", EVERY)
def test_gpu_bars_cover_the_columns_the_raw_ops_touch(name: str) -> None:
    path = path_of(name)
    raw = raw_gpu.read(path)
    report = nvbridge.load(path)
    if extent(report).first_ns is None:
        return  # an empty capture: nothing to draw (test_plot's error case)
    for win in _windows(report):
        px = decimate(report, win.start_ns, win.end_ns, WIDTH, {})
        got: dict[tuple[int, int], set[int]] = defaultdict(set)
        for k, a, b in zip(px.gpu.key.tolist(), px.gpu.x0.tolist(), px.gpu.x1.tolist()):
            dev, stream, _ = px.gpu.keys[k]
            assert a < b and not got[dev, stream] & set(range(int(a), int(b)))  # one bar per column
            got[dev, stream].update(range(int(a), int(b)))
        want: dict[tuple[int, int], set[int]] = defaultdict(set)
        for g in raw.gpu:
            if g.end >= win.start_ns and g.start <= win.end_ns:
                want[g.device, g.stream].update(_touched(g.start, g.end, win.start_ns, win.end_ns, WIDTH))
        assert got == want
        # what colours a column: the kind of op that filled most of it on that stream
        kinds = {(dev, stream, int(a)): KINDS[kind] if kind < len(KINDS) else "other"
                 for k, a in zip(px.gpu.key.tolist(), px.gpu.x0.tolist())
                 for dev, stream, kind in [px.gpu.keys[k]]}  # fmt: skip
        assert set(kinds.values()) <= {g.kind for g in raw.gpu}


@pytest.mark.parametrize("name", EVERY)
def test_idle_share_of_each_pixel_column_equals_raw_sql(name: str) -> None:
    path = path_of(name)
    raw = raw_gpu.read(path)
    report = nvbridge.load(path)
    found = extent(report)
    if found.first_ns is None:
        return
    by_dev: dict[int, list[raw_gpu.GpuOp]] = defaultdict(list)
    for g in raw.gpu:
        by_dev[g.device].append(g)
    for win in _windows(report):
        px = decimate(report, win.start_ns, win.end_ns, WIDTH, found.gpus)
        assert set(px.busy_ns) == set(by_dev)
        for d, ops in by_dev.items():
            bounds = (min(g.start for g in ops), max(g.end for g in ops))
            idle = _raw_idle(ops, px.edges.tolist(), bounds)
            assert (px.timeline_ns[d] - px.busy_ns[d]).tolist() == idle
            if win.label != "middle":  # the whole capture: summary's idle time, to the ns
                assert sum(idle) == (bounds[1] - bounds[0]) - raw_gpu.length([(g.start, g.end) for g in ops])


@pytest.mark.parametrize("name", [n for n in ALL_FILES if n != "nvprof-2020-empty-capture.sqlite"])
def test_a_dataset_read_a_row_group_at_a_time_draws_the_same(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many small row groups: bars and idle columns carried across them (GPU ops a later row
    group may still overlap are held, the rest counted) equal the whole table's."""
    path = real_db(name)
    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 97)
    nvbridge.convert(path, tmp_path / "ds")
    whole, streamed = nvbridge.load(path), nvbridge.load(tmp_path / "ds", streamed=True)
    found = extent(streamed)
    assert found.gpus == extent(whole).gpus
    for win in _windows(whole):
        a = decimate(whole, win.start_ns, win.end_ns, WIDTH, found.gpus)
        b = decimate(streamed, win.start_ns, win.end_ns, WIDTH, found.gpus)
        for layer in ("ops", "api", "gpu"):
            x, y = getattr(a, layer), getattr(b, layer)
            assert sorted(zip([x.keys[k] for k in x.key], x.x0, x.x1)) == sorted(
                zip([y.keys[k] for k in y.key], y.x0, y.x1)
            )
        assert {d: v.tolist() for d, v in a.busy_ns.items()} == {d: v.tolist() for d, v in b.busy_ns.items()}
        assert [(lab.ns, lab.name) for lab in a.labels] == [(lab.ns, lab.name) for lab in b.labels]


def _many_gpu_ops(n: int, streams: int = 3) -> DatasetTables:
    """A report of ``n`` short GPU ops with gaps between them on a few streams, one host thread
    launching them: the shape of a 25k-kernel export without NVTX, larger."""
    rng = np.random.default_rng(7)
    start = np.cumsum(rng.integers(500, 5_000, n)).astype(np.int64)
    end = start + rng.integers(100, 3_000, n)
    kind = np.where(rng.random(n) < 0.05, "memcpy", "kernel")
    gpu = pa.table(
        {
            "device_id": np.zeros(n, np.int64),
            "stream_id": rng.integers(0, streams, n),
            "kind": kind,
            "name": pa.array(["k"] * n),
            "start_ns": start,
            "end_ns": end,
        }
    )
    api = pa.table(
        {
            "process_id": np.ones(n, np.int64),
            "thread_id": np.ones(n, np.int64),
            "start_ns": start - 400,
            "end_ns": start - 100,
        }
    )
    ops = pa.table(
        {
            name: pa.array([], t)
            for name, t in (("op_id", pa.int64()), ("process_id", pa.int64()), ("thread_id", pa.int64()),
                            ("depth", pa.int64()), ("op_name", pa.string()), ("start_ns", pa.int64()),
                            ("end_ns", pa.int64()))
        }
    )  # fmt: skip
    threads = pa.table({"process_id": [1], "thread_id": [1], "thread_name": ["main"]})
    return DatasetTables({"source": "many.sqlite"}, {"ops": ops, "gpu_ops": gpu, "api_calls": api, "threads": threads})


def test_rectangles_drawn_are_bounded_by_the_pixel_width() -> None:
    """One patch per op and per idle gap made a 25k-op export take 134-173 s and 2.4 GB; now the
    rectangles drawn are at most one per pixel column for each bar row and GPU lane, whatever
    the number of ops."""
    n = 200_000
    report = _many_gpu_ops(n)
    fig = plot.figure(report, width_px=WIDTH)
    try:
        [ax] = fig.axes
        rects = sum(len(c.get_paths()) for c in ax.collections) + len(ax.patches)
        gpu_lanes, host_rows = 3, 1  # 3 streams; the host thread's API calls
        # per pixel column at most: a GPU lane's bar and its idle shade, a host row's bar; a hatch per GPU lane
        assert rects <= (2 * gpu_lanes + host_rows) * WIDTH + gpu_lanes
        assert rects < n / 10
        assert len(ax.collections) <= 5 and not ax.patches and len(ax.texts) <= LABELS
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_an_nvprof_gpu_op_without_its_call_is_drawn_on_its_own_stream(tmp_path: Path) -> None:
    """issue 25, item 15: GPU ops whose launching call is outside the capture (no process id in
    nvprof's activity rows) take their device's process: one process and one GPU give one lane
    per stream in plot and one lane in advise, not an extra one for the orphans."""
    db = tmp_path / "orphans.sqlite"
    shutil.copyfile(real_db(LM), db)
    con = sqlite3.connect(db)
    con.execute(
        "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IN (SELECT correlationId FROM "
        "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ORDER BY start LIMIT 3)"
    )
    con.commit()
    con.close()
    raw = raw_gpu.read(db)
    assert sum(not g.known_pid for g in raw.gpu) == 3  # raw_gpu gives them the device's only process
    processes = {(g.pid, g.device) for g in raw.gpu}
    assert len(processes) == 1
    report = nvbridge.load(db)
    assert report.gpu_ops.column("api_call_id").null_count == 3
    win = plot.window_of(extent(report))
    gpu_lanes = [(lane.pid, lane.tid) for lane in plot.lanes(report, win) if lane.kind == "gpu"]
    assert gpu_lanes == sorted({(g.device, g.stream) for g in raw.gpu})
    advice = advise_report(report)
    assert len(advice.lanes) == len(processes)
