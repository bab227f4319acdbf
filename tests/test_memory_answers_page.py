"""The report page's memory section: each device's peak (the rows' maximum), the stacked
chart's points at the peak adding up to it, and the note on a report without memory."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from nvbridge.analysis.report import Report
from nvbridge.page.build import collect
from nvbridge.page.html import document
from tests.memory_tables import with_memory

SAMPLE = Path(__file__).resolve().parent.parent / "sample_db" / "cnn_cpu.sqlite"


def test_page_memory_peak_and_chart() -> None:
    report = Report.view(with_memory(SAMPLE))
    rows = report.table("memory").to_pylist()
    page = collect(report)
    memory = page.data["memory"]
    (device,) = memory["devices"]
    top = max(r["total_allocated"] for r in rows)
    assert device["device"] == "cpu" and device["peak_allocated_bytes"] == top
    stacked: dict[float, float] = defaultdict(float)
    for p in memory["points"]:
        stacked[p["t_ms"]] += p["mib"]
    assert abs(stacked[device["peak_ms"]] - top / 2**20) < 1e-9  # the reduction kept the peak
    assert "chart-memory" in page.charts
    html = document(page)
    assert "cpu: peak " in html and 'id="chart-memory"' in html


def test_page_without_memory_says_how_to_record() -> None:
    page = collect(SAMPLE)
    assert page.data["memory"] is None and "chart-memory" not in page.charts
    assert "emit_nvtx(profile_memory=True)" in document(page)
