"""plot --memory and --memory-blocks: the drawn curves keep the peak and add up to the rows'
live bytes per category; pictures are written whole; a report without memory is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from nvbridge.analysis.memory_categories import CATEGORIES
from nvbridge.analysis.memory_timeline import categorized, columns_kept, curves
from nvbridge.cli import cli
from nvbridge.columns import np_col
from tests.memory_tables import with_memory

pytest.importorskip("matplotlib", reason="plots need matplotlib: pip install -e '.[plot]'")
from nvbridge.plot import memory as memory_plot  # noqa: E402

SAMPLE = Path(__file__).resolve().parent.parent / "sample_db" / "cnn_cpu.sqlite"


def test_columns_kept_hold_the_peak() -> None:
    rng = np.random.default_rng(3)
    ts = np.sort(rng.integers(0, 10**9, 50_000))
    total = rng.integers(0, 10**6, 50_000)
    keep = columns_kept(ts, total, 0, 10**9, 300)
    assert len(keep) <= 300 and int(np.argmax(total)) in keep.tolist()
    assert (np.diff(ts[keep]) >= 0).all()


def test_curves_are_the_live_bytes_by_category_at_every_drawn_point() -> None:
    c = categorized(with_memory(SAMPLE))
    ts = np_col(c.memory, "ts_ns")
    drawn = curves(c, "cpu", int(ts.min()), int(ts.max()), 64)
    assert max(drawn.total) == max(c.memory.column("total_allocated").to_pylist())
    for i in range(0, len(drawn.ts), 7):
        at = int(drawn.ts[i])
        # live after every event up to and including this one: the next event's time is the bound
        later = ts[ts > at]
        expected = c.blocks.bytes_by_category(int(later.min()) - 1 if len(later) else at, "cpu")
        assert {k: int(drawn.live[k][i]) for k in CATEGORIES} == expected
        assert sum(expected.values()) == int(drawn.total[i])


@pytest.mark.parametrize("blocks", [False, True])
def test_render_writes_a_picture(tmp_path: Path, blocks: bool) -> None:
    out = memory_plot.render(with_memory(SAMPLE), tmp_path / "m.png", blocks=blocks, step=1)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["m.png"]


def test_no_memory_is_refused_in_one_line(tmp_path: Path) -> None:
    for flag in ("--memory", "--memory-blocks"):
        result = CliRunner().invoke(cli, ["plot", str(SAMPLE), "-o", str(tmp_path / "m.png"), flag])
        assert result.exit_code == 1 and "no memory events" in result.output
        assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "m.png").exists()
    both = CliRunner().invoke(cli, ["plot", str(SAMPLE), "-o", str(tmp_path / "m.png"), "--memory", "--roofline"])
    assert both.exit_code == 2
