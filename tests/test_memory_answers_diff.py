"""diff's memory answers: each device's peak in A and B, per-op self memory deltas, and the
--fail-above peak_memory gate, against arithmetic on the memory rows."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from click.testing import CliRunner

import nvbridge
from nvbridge.analysis.diff import diff_reports
from nvbridge.cli import cli
from nvbridge.dataset.report import DatasetTables
from tests.memory_tables import made_up_events, with_memory

SAMPLE = Path(__file__).resolve().parent.parent / "sample_db" / "cnn_cpu.sqlite"


def _sides() -> tuple[DatasetTables, DatasetTables]:
    events = made_up_events(nvbridge.load(SAMPLE).ops)
    grown = [dict(e, bytes=e["bytes"] * (3 if e["op_id"] % 5 == 0 else 1)) for e in events]
    return with_memory(SAMPLE, events), with_memory(SAMPLE, grown)


def _self_by_name(report: DatasetTables) -> dict[str, int]:
    names = dict(zip(report.ops.column("op_id").to_pylist(), report.ops.column("op_name").to_pylist()))
    out: dict[str, int] = defaultdict(int)
    for e in report.table("memory").to_pylist():
        out[names[e["op_id"]]] += e["bytes"]
    return out


def test_peak_and_op_memory_deltas_are_the_rows() -> None:
    a, b = _sides()
    d = diff_reports(a, b)
    (peak,) = d.peaks
    assert peak.device == "cpu"
    assert peak.a_bytes == max(a.table("memory").column("total_allocated").to_pylist())
    assert peak.b_bytes == max(b.table("memory").column("total_allocated").to_pylist())
    assert peak.a_bytes is not None and peak.b_bytes is not None and peak.b_bytes > peak.a_bytes
    got: dict[str, int] = defaultdict(int)
    for o in d.ops:
        got[o.op] += o.delta("self_cpu_memory_usage")
    sa, sb = _self_by_name(a), _self_by_name(b)
    names = {n for n in set(sa) | set(sb) if not n.startswith("ProfilerStep#")}  # diff leaves the steps out
    expected = {n: sb.get(n, 0) - sa.get(n, 0) for n in names if sb.get(n, 0) != sa.get(n, 0)}
    assert {n: v for n, v in got.items() if v} == expected and expected
    share = peak.b_bytes / peak.a_bytes - 1
    assert d.regressions(None, share - 0.01) and not d.regressions(None, share + 0.01)
    assert d.regressions(1.0, share + 0.01) == []


def test_fail_above_peak_memory_is_read_and_checked() -> None:
    runner = CliRunner()
    same = runner.invoke(
        cli, ["diff", str(SAMPLE), str(SAMPLE), "--fail-above", "peak_memory=10%", "--fail-above", "5%"]
    )
    assert same.exit_code == 0, same.output
    bad = runner.invoke(cli, ["diff", str(SAMPLE), str(SAMPLE), "--fail-above", "memory=10%"])
    assert bad.exit_code == 2 and "peak_memory=10%" in bad.output
