"""The dominant cost is named first: the GPU timeline cut into compute, communication, copies,
start-up, syncs and idle by interval arithmetic on raw SQL (tests/raw_gpu.py), on every real
export and sample; advise's categories equal it, and its first finding is of the dominant
category (or it says compute dominates).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nvbridge.cli import cli
from tests import raw_gpu, raw_waits
from tests.conftest import SAMPLE_DB, raw, real_db
from tests.raw_gpu import EVERY, path_of
from tests.test_timeline import PEAKS

# Which finding kinds name each category (written again here, not imported).
KINDS = {
    "communication": {"nccl_exposed"},
    "copies": {"blocking_copy_sync", "pageable_copy", "exposed_copies", "small_copies"},
    "startup": {"startup"},
    "syncs": {"blocking_copy_sync", "host_sync"},
    "idle": {"gpu_idle", "launch_bound", "rank_skew"},
}
PINNED = SAMPLE_DB / "diff_base_cpu+pinned_copies_gpu.sqlite"
PYPROF = "nsys-2024.2-pyprof-markers.sqlite"


def _advice(path: Path) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["advise", str(path), "--json", "--limit", "-1", *PEAKS])
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.stdout)
    return out


@pytest.mark.parametrize("name", EVERY)
def test_dominant_category_matches_raw_interval_arithmetic(name: str) -> None:
    path = path_of(name)
    r = raw_gpu.read(path)
    advice = _advice(path)
    if not r.gpu:
        # no GPU, no time findings (a memory finding, about bytes, may stand: docs/memory.md)
        assert advice["span_ns"] == 0 and not [f for f in advice["findings"] if f["kind"] != "memory_peak"]
        return
    want = raw_waits.categories(r)
    top = advice["dominant"]
    assert top["by_category"] == want
    assert sum(want.values()) == advice["span_ns"] == top["of_ns"]
    category = max(raw_waits.CATEGORIES, key=lambda c: want[c])
    assert top["category"] == category
    if category != "compute":
        assert advice["findings"][0]["kind"] in KINDS[category], advice["findings"][0]
    # findings still add up honestly: never more than the timeline
    assert sum(f["time_ns"] for f in advice["findings"]) == advice["at_stake_ns"] <= advice["span_ns"]


def test_pinned_copies_that_dominate_come_first_with_bytes_and_bandwidth() -> None:
    """Our recording (scripts/record/copies_gpu.py, SYNTHETIC GPU rows): 32 MiB pinned HtoD input copies
    hold most of the GPU timeline; before, no finding covered pinned copies at all."""
    rows = raw(PINNED, "SELECT start, end, bytes, srcKind FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1")
    assert rows and {src for *_, src in rows} == {1}  # pinned
    copy_ns = raw_gpu.length([(s, e) for s, e, _, _ in rows])
    nbytes = sum(b for _, _, b, _ in rows)
    advice = _advice(PINNED)
    top = advice["dominant"]
    assert top["category"] == "copies" and top["by_category"]["copies"] > advice["span_ns"] / 2
    assert top["copy_bytes"]["HtoD"] == nbytes and top["copy_ns"] == copy_ns
    assert top["copy_gbps"] == pytest.approx(nbytes / copy_ns)
    assert top["link_peak_gbps"] is None  # the export records no PCIe/NVLink peak: said, not guessed
    first = advice["findings"][0]
    assert first["kind"] == "exposed_copies" and first["figures"]["htod_bytes"] == nbytes
    text = CliRunner().invoke(cli, ["advise", str(PINNED), *PEAKS]).output
    assert "Dominant cost: copies" in text and "link peak unknown" in text


def test_lazy_loading_inside_the_timeline_is_start_up_first() -> None:
    """The 2024.2 PyProf export: a conv2d's first cudaLaunchKernel took 900 ms (cuDNN's code
    loaded on first use) while the GPU waited; it was 'CPU-bound dispatch' idle time before."""
    path = real_db(PYPROF)
    ((longest,),) = raw(
        path,
        """SELECT max(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r JOIN StringIds AS s ON s.id = r.nameId
        WHERE s.value LIKE 'cudaLaunchKernel%'""",
    )
    assert longest > 800_000_000
    advice = _advice(path)
    assert advice["dominant"]["category"] == "startup"
    first = advice["findings"][0]
    assert first["kind"] == "startup" and first["time_ns"] > 800_000_000
    assert "warm up" in first["fix"]
