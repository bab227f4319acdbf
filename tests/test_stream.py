"""Streamed conversion: window by window, the dataset equals the one-window conversion."""

from __future__ import annotations

import importlib
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import nvbridge
from nvbridge.dataset.report import ReportTables as Report
from nvbridge.errors import LateLink
from tests.conftest import NSYS_FILES, SAMPLE_DB, raw, real_db

convert_mod = importlib.import_module("nvbridge.conversion.report")
convert_mod_nsys = importlib.import_module("nvbridge.readers.nsys")
SAMPLES = sorted(p.name for p in SAMPLE_DB.glob("*.sqlite"))


def _source(name: str) -> Path:
    return SAMPLE_DB / name if name in SAMPLES else real_db(name)


def _no_whole_path(*_args: Any, **_kwargs: Any) -> None:
    raise AssertionError("the report fell back to the one-window conversion")


def _assert_same(streamed: Report, whole: Report) -> None:
    for name in ("ops", "gpu_ops", "api_calls", "marks", "syncs", "threads", "devices"):
        got, want = getattr(streamed, name), getattr(whole, name)
        assert got.column_names == want.column_names, name
        for col in want.column_names:
            a, b = got.column(col), want.column(col)
            assert a.cast(b.type).to_pylist() == b.to_pylist(), f"{name}.{col}"


@pytest.mark.parametrize("name", NSYS_FILES + SAMPLES)
def test_windows_give_the_one_window_dataset(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _source(name)
    whole = nvbridge.load(path)  # one window, in memory
    monkeypatch.setattr(convert_mod, "WINDOW_ROWS", 97)
    monkeypatch.setattr(convert_mod, "_whole", _no_whole_path)
    # Row groups of 61 rows: API calls and GPU ops go out while windows are still coming.
    monkeypatch.setattr(convert_mod.parquet, "ROW_GROUP_ROWS", 61)
    early: list[int] = []
    write = convert_mod._Grouped.write

    def spy(self: Any, tables: Any, last: bool = False) -> Any:
        groups = write(self, tables, last)
        if not last and groups:
            early.append(len(groups))
        return groups

    monkeypatch.setattr(convert_mod._Grouped, "write", spy)
    out = tmp_path / "out"
    nvbridge.convert(path, out)
    streamed = nvbridge.load(out)
    _assert_same(streamed, whole)
    if streamed.api_calls.num_rows > 3 * 61:
        assert early, "no API call or GPU op was written before the last window"
    for table in ("api_calls", "gpu_ops"):
        if getattr(streamed, table).num_rows > 61:
            assert pq.ParquetFile(out / f"{table}.parquet").num_row_groups > 1, table
    ranges = (
        raw(path, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71)")[0][0]
        if raw(path, "SELECT 1 FROM sqlite_master WHERE name = 'NVTX_EVENTS'")
        else 0
    )
    assert streamed.ops.num_rows == ranges
    if ranges > 97:
        # More than one row group: the ops really went out window by window.
        assert pq.ParquetFile(out / "ops.parquet").num_row_groups > 1


def test_ranges_still_open_at_a_cut_keep_their_subtree_sums(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The FSDP capture's longest range spans many windows of 97 rows; its inclusive GPU
    time must still be every GPU op launched inside it on its thread, summed here in SQL."""
    path = real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite")
    monkeypatch.setattr(convert_mod, "WINDOW_ROWS", 97)
    nvbridge.convert(path, tmp_path / "out")
    ops = nvbridge.load(tmp_path / "out").df("ops")
    longest = ops.sort_values("total_cpu_ns").iloc[-1]
    ((rows_during,),) = raw(
        path,
        f"""SELECT count(*) FROM NVTX_EVENTS
        WHERE start > {int(longest.start_ns)} AND start < {int(longest.end_ns)}""",
    )
    assert rows_during > 97 * 3  # it really stayed open across windows
    gpu = " UNION ALL ".join(
        f"SELECT start, end, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_{t}"
        for t in ("KERNEL", "MEMCPY", "MEMSET")
    )
    ((expected,),) = raw(
        path,
        f"""
        SELECT sum(g.end - g.start) FROM ({gpu}) g JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
          ON r.correlationId = g.correlationId AND (r.globalTid >> 24) = (g.globalPid >> 24)
        WHERE r.start >= {int(longest.start_ns)} AND r.end <= {int(longest.end_ns)}
          AND (r.globalTid >> 24) % 16777216 = {int(longest.process_id)}
          AND r.globalTid % 16777216 = {int(longest.thread_id)}""",
    )
    assert expected > 0
    assert int(longest.total_gpu_ns) == expected


# Row orders the rowid windows cannot stream: latest first, shuffled, and two start-ordered runs
# one after the other (as the FSDP export stores its API calls, a process at a time).
DISORDERS = {
    "latest first": "ORDER BY start DESC",
    "shuffled": "ORDER BY (rowid * 7919) % 1009",
    "two runs": "ORDER BY rowid % 2, start",
}


@pytest.mark.parametrize("disorder", DISORDERS)
def test_ranges_out_of_start_order_stream_by_start(
    disorder: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out-of-order NVTX rows are read in slabs of starts (never the whole report): the dataset
    equals the one-window conversion of the ordered file, and no slab holds far more rows than
    a window."""
    src = SAMPLE_DB / "transformer_shapes_cpu.sqlite"
    shuffled = tmp_path / "shuffled.sqlite"
    shutil.copy(src, shuffled)
    con = sqlite3.connect(shuffled)
    con.executescript(f"""
        CREATE TABLE n2 AS SELECT * FROM NVTX_EVENTS {DISORDERS[disorder]};
        DELETE FROM NVTX_EVENTS; INSERT INTO NVTX_EVENTS SELECT * FROM n2; DROP TABLE n2;""")
    con.commit()
    con.close()
    ((rows,),) = raw(shuffled, "SELECT count(*) FROM NVTX_EVENTS")
    assert rows > 8 * 97
    monkeypatch.setattr(convert_mod, "WINDOW_ROWS", 97)
    monkeypatch.setattr(convert_mod, "_whole", _no_whole_path)
    slabs: list[int] = []  # rows of each slab read by start
    split = convert_mod_nsys.Stream._split

    def spy(self: Any, ev: Any) -> Any:
        if self._slabs is not None:
            slabs.append(ev.num_rows)
        return split(self, ev)

    monkeypatch.setattr(convert_mod_nsys.Stream, "_split", spy)
    nvbridge.convert(shuffled, tmp_path / "out")
    _assert_same(nvbridge.load(tmp_path / "out"), nvbridge.load(src))
    assert sum(slabs) == rows  # the rowid windows gave up; the slabs read every row once
    assert len(slabs) > 5 and max(slabs) < 4 * 97, slabs


def test_gpu_ops_later_than_the_horizon_fall_back_to_one_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU op starting after its API call's window was correlated (the horizon shrunk to 0 ns
    here; the FSDP export's kernels start up to 16 ms after their launch) is never counted
    wrong: the stream notices, and the report is converted in one window."""
    path = real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite")
    monkeypatch.setattr(convert_mod, "WINDOW_ROWS", 97)
    monkeypatch.setattr(convert_mod_nsys, "LATE_NS", 0)
    whole_calls: list[int] = []
    whole = convert_mod._whole

    def spy(*args: Any, **kwargs: Any) -> Any:
        whole_calls.append(1)
        return whole(*args, **kwargs)

    monkeypatch.setattr(convert_mod, "_whole", spy)
    nvbridge.convert(path, tmp_path / "out")
    assert whole_calls == [1]
    _assert_same(nvbridge.load(tmp_path / "out"), nvbridge.load(path))


def test_a_horizon_past_every_lag_streams_on_the_first_or_second_try(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The longest lag from a launch's end to its GPU op in the FSDP export, from raw SQL, as
    the horizon: the report streams (no fallback) and gives the one-window dataset."""
    path = real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite")
    gpu = " UNION ALL ".join(
        f"SELECT start, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_{t}" for t in ("KERNEL", "MEMCPY", "MEMSET")
    )
    ((lag,),) = raw(
        path,
        f"""SELECT max(g.start - r.end) FROM ({gpu}) g JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
        ON r.correlationId = g.correlationId AND (r.globalTid >> 24) = (g.globalPid >> 24)""",
    )
    assert lag > 10_000_000  # over 10 ms: a horizon below it would not do
    monkeypatch.setattr(convert_mod, "WINDOW_ROWS", 97)
    monkeypatch.setattr(convert_mod, "_whole", _no_whole_path)
    tries: list[int] = []
    init = convert_mod_nsys.Stream.__init__

    def spy(self: Any, *args: Any, **kwargs: Any) -> None:
        tries.append(kwargs.get("horizons", 1))
        init(self, *args, **kwargs)

    monkeypatch.setattr(convert_mod_nsys.Stream, "__init__", spy)
    monkeypatch.setattr(convert_mod_nsys, "LATE_NS", lag + 1)
    nvbridge.convert(path, tmp_path / "out")
    assert tries == [1]
    _assert_same(nvbridge.load(tmp_path / "out"), nvbridge.load(path))
    # A horizon 30 times too short: the second try's is LATE_RETRY (60) times longer, and streams.
    tries.clear()
    monkeypatch.setattr(convert_mod_nsys, "LATE_NS", lag // 30)
    nvbridge.convert(path, tmp_path / "out2")
    assert tries == [1, convert_mod.LATE_RETRY]
    _assert_same(nvbridge.load(tmp_path / "out2"), nvbridge.load(path))


@pytest.mark.parametrize(
    "name", ["transformer_shapes_cpu.sqlite", "observer_two_threads_cpu.sqlite", "observer_dp_threads_cpu.sqlite"]
)
@pytest.mark.parametrize("horizon", [1, 400])
def test_forward_ops_past_the_horizon_never_lose_a_link(
    name: str, horizon: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forward index drops ops older than its horizon; a backward node that might have linked
    to one is noticed and the report converted again with a longer horizon (then whole), so the
    dataset is the one-window dataset whatever the horizon (1 row: every link across windows is
    noticed; 400 rows: ops are evicted and the samples' links still stream)."""
    import nvbridge.conversion.report as report
    import nvbridge.engine.forward_links as forward_links
    import nvbridge.engine.semantics as semantics

    source = SAMPLE_DB / name
    nvbridge.convert(source, tmp_path / "whole")  # the default horizon: nothing evicted in a sample
    noticed: list[int] = []
    link = forward_links.ForwardIndex.link

    def counting(self: forward_links.ForwardIndex, *args: object) -> object:
        try:
            return link(self, *args)  # type: ignore[arg-type]
        except LateLink:
            noticed.append(horizon)
            raise

    monkeypatch.setattr(forward_links.ForwardIndex, "link", counting)
    monkeypatch.setattr(report, "WINDOW_ROWS", 97)
    monkeypatch.setattr(semantics, "FORWARD_HORIZON_ROWS", horizon)
    nvbridge.convert(source, tmp_path / "small")
    for table in ("ops", "api_calls", "gpu_ops"):
        got = pq.read_table(tmp_path / "small" / f"{table}.parquet")
        want = pq.read_table(tmp_path / "whole" / f"{table}.parquet")
        if table == "ops":
            got, want = got.sort_by("op_id"), want.sort_by("op_id")
        assert got.equals(want), table
    if horizon == 1:
        assert noticed, "a horizon of one row must notice the links across windows"
