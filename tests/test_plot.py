"""``nvbridge plot``: the lanes a picture shows, and that the picture is a real, non-blank PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.cli import cli
from nvbridge.columns import np_col
from nvbridge.errors import ExportError
from tests.conftest import SAMPLE_DB, real_db

pytest.importorskip("matplotlib", reason="plots need matplotlib: pip install -e '.[plot]'")
from matplotlib import image as mpimg  # noqa: E402

from nvbridge.plot import picture as plot

LM = "nvprof-2020-pytorch14-pyprof-lm.sqlite"


def _check_png(path: Path, min_width: int = 1000) -> np.ndarray:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = mpimg.imread(path)
    height, width = pixels.shape[:2]
    assert width >= min_width and height >= 200
    assert float(pixels[..., :3].std()) > 0.05  # not blank
    return pixels


def test_lanes_of_a_cpu_step() -> None:
    report = nvbridge.load(SAMPLE_DB / "cnn_cpu.sqlite")
    win = plot.window(report, step=1)
    lanes = plot.lanes(report, win)
    ops = report.ops
    in_step = (np_col(ops, "end_ns") >= win.start_ns) & (np_col(ops, "start_ns") <= win.end_ns)
    threads = set(zip(np_col(ops, "process_id")[in_step].tolist(), np_col(ops, "thread_id")[in_step].tolist()))
    assert [(lane.pid, lane.tid) for lane in lanes] == sorted(threads)
    assert all(lane.kind == "host" and lane.depth >= 2 for lane in lanes)


def test_render_cpu_step(tmp_path: Path) -> None:
    report = nvbridge.load(SAMPLE_DB / "cnn_cpu.sqlite")
    out = plot.render(report, tmp_path / "step.png", step=1)
    _check_png(out)


def test_gpu_lanes_sit_below_host_lanes(tmp_path: Path) -> None:
    report = nvbridge.load(real_db(LM))
    gpu = report.gpu_ops
    first = int(np_col(gpu, "start_ns").min())
    win = plot.window(report, start_ns=first, end_ns=first + 20_000_000)
    lanes = plot.lanes(report, win)
    kinds = [lane.kind for lane in lanes]
    assert kinds == sorted(kinds, key=lambda k: k == "gpu")  # host first, then GPU
    sel = (np_col(gpu, "end_ns") >= win.start_ns) & (np_col(gpu, "start_ns") <= win.end_ns)
    streams = set(zip(np_col(gpu, "device_id")[sel].tolist(), np_col(gpu, "stream_id")[sel].tolist()))
    assert [(lane.pid, lane.tid) for lane in lanes if lane.kind == "gpu"] == sorted(streams)
    assert kinds.count("host") >= 1 and kinds.count("gpu") == len(streams) >= 1
    pixels = _check_png(plot.render(report, tmp_path / "gpu.png", start_ns=win.start_ns, end_ns=win.end_ns))
    # More lanes, taller picture: each lane gets its own band.
    assert pixels.shape[0] > 250


def test_idle_gaps_cover_what_the_gpu_does_not() -> None:
    win = plot.Window(0, 100, "w")
    gaps = plot.gpu_idle(np.array([10, 20, 60]), np.array([30, 25, 70]), win, (0, 100))
    assert gaps == [(0, 10), (30, 60), (70, 100)]
    assert plot.gpu_idle(np.array([], np.int64), np.array([], np.int64), win, (0, 100)) == [(0, 100)]
    # only inside the GPU's timeline (first to last op): before it the GPU had not started
    assert plot.gpu_idle(np.array([10, 60]), np.array([30, 70]), win, (10, 70)) == [(30, 60)]


def test_cli_plot(tmp_path: Path) -> None:
    out = tmp_path / "t.png"
    result = CliRunner().invoke(cli, ["plot", str(SAMPLE_DB / "cnn_cpu.sqlite"), "-o", str(out), "--step", "0"])
    assert result.exit_code == 0, result.output
    _check_png(out)
    bad = CliRunner().invoke(cli, ["plot", str(SAMPLE_DB / "cnn_cpu.sqlite"), "-o", str(out), "--step", "9", "--force"])
    assert bad.exit_code == 1 and "steps" in bad.output and "Traceback" not in bad.output
    both = CliRunner().invoke(
        cli, ["plot", str(SAMPLE_DB / "cnn_cpu.sqlite"), "-o", str(out), "--step", "0", "--start", "1ms"]
    )
    assert both.exit_code == 2


def test_empty_window_is_an_error() -> None:
    report = nvbridge.load(SAMPLE_DB / "cnn_cpu.sqlite")
    with pytest.raises(ExportError, match="--end"):
        plot.window(report, start_ns=10, end_ns=5)


def test_output_without_picture_suffix_is_refused(tmp_path: Path) -> None:  # issue 14, finding 3
    """`-o p5` once printed "Wrote p5" and wrote p5.png: now refused, and nothing is written."""
    result = CliRunner().invoke(
        cli, ["plot", str(SAMPLE_DB / "cnn_cpu.sqlite"), "-o", str(tmp_path / "p5"), "--step", "0"]
    )
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip().startswith("Error: ") and len(result.stderr.splitlines()) == 1
    assert "p5.png" in result.stderr
    assert list(tmp_path.iterdir()) == []
    for suffix in (".svg", ".pdf"):
        out = tmp_path / f"p5{suffix}"
        ok = CliRunner().invoke(cli, ["plot", str(SAMPLE_DB / "cnn_cpu.sqlite"), "-o", str(out), "--step", "0"])
        assert ok.exit_code == 0, ok.output
        assert ok.stdout.strip() == f"Wrote {out}." and out.stat().st_size > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p5.pdf", "p5.svg"]  # no temporary file left


def test_existing_picture_needs_force(tmp_path: Path) -> None:  # issue 14, finding 10
    out = tmp_path / "t.png"
    out.write_bytes(b"keep me")
    args = ["plot", str(SAMPLE_DB / "cnn_cpu.sqlite"), "-o", str(out), "--step", "0"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and "--force" in result.stderr and out.read_bytes() == b"keep me"
    result = CliRunner().invoke(cli, [*args, "--force"])
    assert result.exit_code == 1 and "was not written by nvbridge" in result.stderr and out.read_bytes() == b"keep me"
    out.unlink()
    for force in ([], ["--force"]):  # drawn, then replaced: --force replaces only a picture nvbridge drew
        result = CliRunner().invoke(cli, [*args, *force])
        assert result.exit_code == 0, result.output
        _check_png(out)


def test_picture_title_counts_read_naturally() -> None:  # issue 14, finding 16
    win = plot.Window(0, 2_000_000, "whole capture")
    assert plot.title("r.sqlite", win, 1, 1) == "r.sqlite: whole capture, 2.000 ms, 1 host thread, 1 GPU stream"
    assert plot.title("r.sqlite", win, 2, 0).endswith("2 host threads, 0 GPU streams")
