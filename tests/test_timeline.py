"""The one timeline (nvbridge.dataset.timeline): the capture window, each GPU's timeline, busy and idle
time and the start-up before it, read from raw SQL and compared with every place that shows
them: summary --json (``gpu[]``), advise --json (``span_ns``, ``timeline``, ``startup_ns``), MFU
(summary's ``flops.span_ns``) and plot's idle shading. On every real export and sample.
"""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.cli import cli
from nvbridge.plot import picture as plot
from nvbridge.plot.window import extent
from tests import raw_gpu
from tests.conftest import real_db
from tests.raw_gpu import EVERY, path_of

LM = "nvprof-2020-pytorch14-pyprof-lm.sqlite"
# Given peaks: the GPU table leaves some exports' peaks empty (the 2022.1 Turing export fails on
# them, issue 25 item 7, fixed elsewhere); nothing here depends on the roofline.
PEAKS = ("--peak-tflops", "100", "--peak-gbps", "1000")


def _json(*args: str) -> object:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _per_device(raw: raw_gpu.Raw) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    by_dev: dict[int, list[raw_gpu.GpuOp]] = defaultdict(list)
    for g in raw.gpu:
        by_dev[g.device].append(g)
    startup = raw_gpu.startup_before(raw)
    for d, ops in by_dev.items():
        first, last = min(g.start for g in ops), max(g.end for g in ops)
        out[d] = {
            "start_ns": first,
            "end_ns": last,
            "span_ns": last - first,
            "busy_ns": raw_gpu.length([(g.start, g.end) for g in ops]),
            "kernels": sum(g.kind == "kernel" for g in ops),
            "startup_ns": sum(startup.get(p, 0) for p in {g.pid for g in ops}),
        }
    return out


@pytest.mark.parametrize("name", EVERY)
def test_summary_header_is_the_raw_gpu_timeline(name: str) -> None:
    path = path_of(name)
    raw = raw_gpu.read(path)
    summary = _json("summary", str(path), "--json")
    assert isinstance(summary, dict)
    got = {
        g["device_id"]: {k: g[k] for k in ("start_ns", "end_ns", "span_ns", "busy_ns", "kernels", "startup_ns")}
        for g in summary["gpu"]
    }
    assert got == _per_device(raw)
    for g in summary["gpu"]:
        assert g["idle_share"] == pytest.approx(1 - g["busy_ns"] / g["span_ns"] if g["span_ns"] else 0.0)
    flops = summary["flops"]
    if flops and flops.get("span_ns") is not None:  # MFU over the GPU timeline divides by the same spans
        assert flops["span_ns"] == sum(d["span_ns"] for d in _per_device(raw).values())


@pytest.mark.parametrize("name", EVERY)
def test_advise_timeline_is_the_raw_gpu_timeline(name: str) -> None:
    path = path_of(name)
    raw = raw_gpu.read(path)
    advice = _json("advise", str(path), "--json", "--limit", "-1", *PEAKS)
    assert isinstance(advice, dict)
    lanes = raw_gpu.lanes(raw)
    startup = raw_gpu.startup_before(raw)
    want = {
        (p, d): (min(g.start for g in ops), max(g.end for g in ops), raw_gpu.length([(g.start, g.end) for g in ops]))
        for (p, d), ops in lanes.items()
    }
    got = {(t["process_id"], t["device_id"]): (t["start_ns"], t["end_ns"], t["busy_ns"]) for t in advice["timeline"]}
    assert got == want
    assert advice["span_ns"] == sum(e - s for s, e, _ in want.values())
    assert {t["process_id"]: t["startup_ns"] for t in advice["timeline"]} == {p: startup.get(p, 0) for p, _ in want}
    assert advice["startup_ns"] == sum(startup.get(p, 0) for p in {p for p, _ in want})
    # the capture window: first to last of the ranges, calls and GPU ops the report holds
    times = [(r.start, r.end) for r in raw.ranges] + [(c.start, c.end) for c in raw.calls]
    times += [(g.start, g.end) for g in raw.gpu]
    assert advice["capture_ns"] == (max(e for _, e in times) - min(s for s, _ in times) if times else 0)
    assert sum(f["time_ns"] for f in advice["findings"]) <= advice["span_ns"]


@pytest.mark.parametrize("name", EVERY)
def test_plot_shades_idle_time_only_inside_each_gpu_timeline(name: str) -> None:
    path = path_of(name)
    report = nvbridge.load(path)
    found = extent(report)
    if found.first_ns is None:
        return
    win = plot.window_of(found)
    g = report.gpu_ops
    dev = np.asarray(g.column("device_id").to_numpy(zero_copy_only=False))
    s, e = np.asarray(g.column("start_ns")), np.asarray(g.column("end_ns"))
    want = _per_device(raw_gpu.read(path))
    assert {d: b for d, b in found.gpus.items()} == {d: (v["start_ns"], v["end_ns"]) for d, v in want.items()}
    for d, v in want.items():
        gaps = plot.gpu_idle(s[dev == d], e[dev == d], win, found.gpus[d])
        assert sum(b - a for a, b in gaps) == v["span_ns"] - v["busy_ns"]


def test_nvprof_first_launch_start_up_stays_out_of_the_shares() -> None:
    """The PyTorch 1.4 nvprof report's first cudaLaunchKernel took 2.31 s (context creation and
    module loading): advise's timeline started there, and every share was 40x too small."""
    path = real_db(LM)
    raw = raw_gpu.read(path)
    launch = min((c for c in raw.calls if c.name == "cudaLaunchKernel"), key=lambda c: c.start)
    first = min(g.start for g in raw.gpu)
    assert launch.dur > 2_000_000_000 and launch.start < first <= launch.end
    advice = nvbridge.analysis.advise.advise_report(nvbridge.load(path))
    assert advice.span_ns == max(g.end for g in raw.gpu) - first  # 53.5 ms, not 2.37 s
    assert advice.startup_ns >= first - launch.start  # the launch until the GPU's first op
    summary = nvbridge.summarize(path)
    assert [g.span_ns for g in summary.gpus] == [advice.span_ns]
    assert summary.gpus[0].startup_ns == advice.startup_ns
    text = CliRunner().invoke(cli, ["advise", str(path)]).output
    assert "Start-up: 2.314s" in text and "GPU timeline 53.451ms" in text
