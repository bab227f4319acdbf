"""Streamed conversion: window by window, the dataset equals the one-window conversion (the
engine run on the report read whole, nvbridge.engine.correlate)."""

from __future__ import annotations

import importlib
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import nvbridge
from nvbridge.dataset.report import DatasetTables as Report
from nvbridge.dataset.schema import TABLES
from nvbridge.engine import Model, correlate
from nvbridge.readers import read_profile
from tests.conftest import NSYS_FILES, SAMPLE_DB, raw, real_db

pipeline = importlib.import_module("nvbridge.conversion.pipeline")
sinks_mod = importlib.import_module("nvbridge.conversion.sinks")
source_mod = importlib.import_module("nvbridge.readers.nsys_source")
nvtx_mod = importlib.import_module("nvbridge.readers.nsys_nvtx")
whole_mod = importlib.import_module("nvbridge.readers.whole")
windows_mod = importlib.import_module("nvbridge.readers.windows")
SAMPLES = sorted(p.name for p in SAMPLE_DB.glob("*.sqlite"))


def _source(name: str) -> Path:
    return SAMPLE_DB / name if name in SAMPLES else real_db(name)


def _one_window(path: Path) -> Model:
    """The reference: the report read whole and correlated as one window."""
    return correlate(read_profile(path))


def _no_whole_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("the report fell back to the one-window conversion")

    monkeypatch.setattr(whole_mod, "OneWindow", refuse)


def _assert_same(streamed: Report, whole: Report | Model) -> None:
    for name in ("ops", "gpu_ops", "api_calls", "marks", "syncs", "threads", "devices"):
        got, want = getattr(streamed, name), getattr(whole, name)
        assert got.column_names == want.column_names, name
        for col in want.column_names:
            a, b = got.column(col), want.column(col)
            assert a.cast(b.type).to_pylist() == b.to_pylist(), f"{name}.{col}"


@pytest.mark.parametrize("name", NSYS_FILES + SAMPLES)
def test_windows_give_the_one_window_dataset(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _source(name)
    whole = _one_window(path)
    monkeypatch.setattr(pipeline, "WINDOW_ROWS", 97)
    _no_whole_path(monkeypatch)
    # Row groups of 61 rows: API calls and GPU ops go out while windows are still coming.
    monkeypatch.setattr(sinks_mod.parquet, "ROW_GROUP_ROWS", 61)
    early: list[int] = []
    write = sinks_mod._Grouped.write

    def spy(self: Any, tables: Any, last: bool = False) -> Any:
        groups = write(self, tables, last)
        if not last and groups:
            early.append(len(groups))
        return groups

    monkeypatch.setattr(sinks_mod._Grouped, "write", spy)
    out = tmp_path / "out"
    nvbridge.convert(path, out)
    streamed = nvbridge.load(out)
    _assert_same(streamed, whole)
    _assert_same(nvbridge.load(path), whole)  # the same windows into memory
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
    monkeypatch.setattr(pipeline, "WINDOW_ROWS", 97)
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
    monkeypatch.setattr(pipeline, "WINDOW_ROWS", 97)
    _no_whole_path(monkeypatch)
    slabs: list[int] = []  # rows of each slab read by start
    split = nvtx_mod.NvtxParts._split

    def spy(self: Any, ev: Any) -> Any:
        if self._slabs is not None:
            slabs.append(ev.num_rows)
        return split(self, ev)

    monkeypatch.setattr(nvtx_mod.NvtxParts, "_split", spy)
    nvbridge.convert(shuffled, tmp_path / "out")
    _assert_same(nvbridge.load(tmp_path / "out"), _one_window(src))
    assert sum(slabs) == rows  # the rowid windows gave up; the slabs read every row once
    assert len(slabs) > 5 and max(slabs) < 4 * 97, slabs


def test_gpu_ops_later_than_the_horizon_fall_back_to_one_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU op starting after its API call's window was correlated (the horizon shrunk to 0 ns
    here; the FSDP export's kernels start up to 16 ms after their launch) is never counted
    wrong: the stream notices, and the report is converted in one window."""
    path = real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite")
    monkeypatch.setattr(pipeline, "WINDOW_ROWS", 97)
    monkeypatch.setattr(source_mod, "LATE_NS", 0)
    whole_calls: list[int] = []
    whole = whole_mod.OneWindow

    def spy(*args: Any, **kwargs: Any) -> Any:
        whole_calls.append(1)
        return whole(*args, **kwargs)

    monkeypatch.setattr(whole_mod, "OneWindow", spy)
    nvbridge.convert(path, tmp_path / "out")
    assert whole_calls == [1]
    _assert_same(nvbridge.load(tmp_path / "out"), _one_window(path))


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
    monkeypatch.setattr(pipeline, "WINDOW_ROWS", 97)
    _no_whole_path(monkeypatch)
    tries: list[int] = []
    init = source_mod.NsysWindows.__init__

    def spy(self: Any, *args: Any, **kwargs: Any) -> None:
        tries.append(kwargs.get("horizons", 1))
        init(self, *args, **kwargs)

    monkeypatch.setattr(source_mod.NsysWindows, "__init__", spy)
    monkeypatch.setattr(source_mod, "LATE_NS", lag + 1)
    nvbridge.convert(path, tmp_path / "out")
    assert tries == [1]
    whole = _one_window(path)
    _assert_same(nvbridge.load(tmp_path / "out"), whole)
    # A horizon 30 times too short: the second try's is LATE_RETRY (60) times longer, and streams.
    tries.clear()
    monkeypatch.setattr(source_mod, "LATE_NS", lag // 30)
    nvbridge.convert(path, tmp_path / "out2")
    assert tries == [1, pipeline.LATE_RETRY]
    _assert_same(nvbridge.load(tmp_path / "out2"), whole)


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
    import nvbridge.engine.forward_links as forward_links
    import nvbridge.engine.semantics as semantics

    source = SAMPLE_DB / name
    nvbridge.convert(source, tmp_path / "whole")  # the default horizon: nothing evicted in a sample
    noticed: list[int] = []
    link = forward_links.ForwardIndex.link

    def counting(self: forward_links.ForwardIndex, *args: object) -> object:
        links = link(self, *args)  # type: ignore[arg-type]
        if self.late:
            noticed.append(horizon)
        return links

    monkeypatch.setattr(forward_links.ForwardIndex, "link", counting)
    monkeypatch.setattr(pipeline, "WINDOW_ROWS", 97)
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


def test_a_report_without_ranges_is_cut_at_slab_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 2021 export has no NVTX_EVENTS: its API calls and GPU ops still go through windows
    of a few slabs each (before, the one last window took all of them: 2.9 GB at 10M rows), and
    the dataset is the one-window dataset."""
    path = real_db("nsys-2021-pre-metadata.sqlite")
    assert not raw(path, "SELECT 1 FROM sqlite_master WHERE name = 'NVTX_EVENTS'")
    ((calls,),) = raw(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    whole = _one_window(path)
    monkeypatch.setattr(pipeline, "WINDOW_ROWS", 97)
    _no_whole_path(monkeypatch)
    taken: list[int] = []
    add = pipeline.Correlator.add

    def spy(self: Any, window: Any, *args: Any) -> Any:
        taken.append(window.api_calls.num_rows)
        return add(self, window, *args)

    monkeypatch.setattr(pipeline.Correlator, "add", spy)
    nvbridge.convert(path, tmp_path / "out")
    _assert_same(nvbridge.load(tmp_path / "out"), whole)
    assert sum(taken) == calls > 20 * 97
    # A slab holds about 97 // 2 API calls; a window spans SLABS_PER_WINDOW slabs of API calls
    # and GPU ops together, plus the slab its cut falls in.
    slab = 97 // 2
    assert len(taken) > calls // ((windows_mod.SLABS_PER_WINDOW + 1) * slab)
    assert max(taken) <= 2 * (windows_mod.SLABS_PER_WINDOW + 1) * slab, taken


def _two_runs(src: Path, dest: Path) -> Path:
    """A copy of ``src`` whose NVTX rows are stored as two runs out of start order."""
    shutil.copy(src, dest)
    con = sqlite3.connect(dest)
    con.executescript(f"""
        CREATE TABLE n2 AS SELECT * FROM NVTX_EVENTS {DISORDERS["two runs"]};
        DELETE FROM NVTX_EVENTS; INSERT INTO NVTX_EVENTS SELECT * FROM n2; DROP TABLE n2;""")
    con.commit()
    con.close()
    return dest


@pytest.mark.parametrize("late", [False, True])
def test_restarts_are_values_the_driver_follows(late: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the windows cannot carry comes back from the reader or the engine as a Restart, and
    the driver reads again: ranges out of start order by start; with no horizon at all (every
    GPU op starts after its launch's window), with longer horizons, then the whole report.
    Nothing raises between packages, and the dataset is the one-window dataset either way."""
    from nvbridge.readers.raw import Restart

    src = real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite")
    shuffled = _two_runs(src, tmp_path / "two_runs.sqlite")
    whole = _one_window(src)
    monkeypatch.setattr(pipeline, "WINDOW_ROWS", 997)
    if late:
        monkeypatch.setattr(source_mod, "LATE_NS", 0)
    seen: list[bool] = []  # each attempt: ended in a Restart
    attempt = pipeline._attempt

    def spy(run: Any, opened: Any, sinks: Any, progress: Any) -> Any:
        done = attempt(run, opened, sinks, progress)
        seen.append(isinstance(done, Restart))
        return done

    monkeypatch.setattr(pipeline, "_attempt", spy)
    opened: list[tuple[bool, int, bool]] = []
    open_windows = importlib.import_module("nvbridge.readers").open_windows

    def recording(*args: Any, **kwargs: Any) -> Any:
        opened.append((kwargs.get("by_start", False), kwargs.get("horizons", 1), kwargs.get("whole", False)))
        return open_windows(*args, **kwargs)

    monkeypatch.setattr(importlib.import_module("nvbridge.conversion.report"), "open_windows", recording)
    nvbridge.convert(shuffled, tmp_path / "out")
    if late:
        assert opened == [(False, 1, False), (True, 1, False), (True, pipeline.LATE_RETRY, False), (False, 1, True)]
        assert seen == [True, True, True, False]
    else:
        assert opened == [(False, 1, False), (True, 1, False)]
        assert seen == [True, False]
    # the two ranks' collectives too (their sink restarts with the others: one row per kernel)
    expected = sorted(f"{t}.parquet" for t in (*TABLES, "meta", "collectives"))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == expected
    assert pq.read_metadata(tmp_path / "out" / "collectives.parquet").num_rows == 62
    _assert_same(nvbridge.load(tmp_path / "out"), whole)


def test_the_command_line_sets_its_memory_pools_before_the_readers_load() -> None:
    """``nvbridge`` (nvbridge.__main__) sets Arrow's memory pool before the command's modules load,
    the readers among them: loaded first, a conversion of 2M NVTX rows took 600K page faults
    instead of 250K (0.7 s more system time, 20-40% more wall time). An import hook records
    Arrow's pool at the moment each reader module is found."""
    import pyarrow as pa

    readers = ("nsys", "nsys_source", "nsys_nvtx", "nsys_tables", "nvprof", "whole", "_db")
    code = (
        "import importlib.abc, sys\n"
        "class Spy(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.rpartition('.')[0] == 'nvbridge.readers' and name.rpartition('.')[2] in {readers!r}:\n"
        "            arrow = sys.modules.get('pyarrow')\n"
        "            pool = arrow.default_memory_pool().backend_name if arrow else 'none'\n"
        "            print(name, pool, flush=True)\n"
        "sys.meta_path.insert(0, Spy())\n"
        "sys.argv = ['nvbridge', '--version']\n"
        "import nvbridge.__main__\n"
        "nvbridge.__main__.main()\n"
    )
    try:
        pa.jemalloc_memory_pool()
        pool = "jemalloc"  # what nvbridge.output.process sets
    except NotImplementedError:
        pool = "system"
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True).stdout
    found = dict(line.split() for line in out.splitlines() if line.startswith("nvbridge.readers."))
    assert sorted(found) == sorted(f"nvbridge.readers.{r}" for r in readers), out  # loaded with the command line
    assert set(found.values()) == {pool}, out
