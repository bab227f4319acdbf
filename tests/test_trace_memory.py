"""Memory counter tracks in the Chrome/Perfetto trace (nvbridge.export.chrome_memory), against the
raw allocator marks read with Python's sqlite3: one ``ph: "C"`` event per mark, in the mark's
process, at its time on the trace's clock (ns from the first range, as µs with three decimals),
``allocated``/``reserved`` the mark's totals; a cut (``--steps``, ``--start``) starts each track
with the last value before it, drawn at the cut.
"""

from __future__ import annotations

import gzip
import importlib
import json
import shutil
import sqlite3
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import nvbridge
from nvbridge.conversion.memory import export_chrome_trace
from nvbridge.dataset.schema import InMemory
from nvbridge.export import chrome, chrome_memory, chrome_native
from nvbridge.export.trace_cuts import export_many
from nvbridge.export.trace_many import PID_STRIDE
from tests.conftest import ALL_FILES, SAMPLE_DB, raw, real_db
from tests.test_chrome import load_strict, ns, validate
from tests.test_memory_dataset import DOMAIN, MARK, PID, THREADS, build

pipeline = importlib.import_module("nvbridge.conversion.pipeline")
whole_mod = importlib.import_module("nvbridge.readers.whole")

SAMPLE = SAMPLE_DB / "memory_cpu.sqlite"
RANGES = "eventType IN (59, 60, 70, 71)"
Counted = tuple[int, str, int, int, int | None]  # (pid, name, ns from time 0, allocated, reserved)


def raw_marks(path: Path) -> list[tuple[int, int, str, int, int]]:
    """(ts, pid, device, allocated, reserved) of nvbridge's allocator marks in time order (ties:
    rowid), by SQL: marks of a domain its process created as ``nvbridge``, six fields, integers."""
    rows = raw(
        path,
        f"""SELECT m.start, (m.globalTid >> 24) & 16777215, m.text FROM NVTX_EVENTS m
        WHERE m.eventType = {MARK} AND m.text LIKE 'mem %' AND EXISTS (SELECT 1 FROM NVTX_EVENTS d
            WHERE d.eventType = {DOMAIN} AND d.text = 'nvbridge' AND d.domainId = m.domainId
            AND (d.globalTid >> 24) = (m.globalTid >> 24))
        ORDER BY m.start, m.rowid""",
    )
    out = []
    for ts, pid, text in rows:
        fields = text.split(" ")
        try:
            numbers = [int(f) for f in fields[2:]]
        except ValueError:
            continue  # a malformed mark is no event
        if len(fields) == 6:
            out.append((int(ts), int(pid), fields[1], numbers[2], numbers[3]))
    return out


def raw_origin(path: Path, lo: int | None = None, hi: int | None = None) -> int:
    """The trace's time 0 for an export without CUDA rows: the first start of the ranges that
    overlap the window [lo, hi]."""
    where = f'{RANGES} AND "end" >= {-(2**62) if lo is None else lo} AND start <= {2**62 if hi is None else hi}'
    [(first,)] = raw(path, f"SELECT min(start) FROM NVTX_EVENTS WHERE {where}")
    return int(first)


def expected(path: Path, lo: int | None = None, hi: int | None = None) -> Counter[Counted]:
    """The counters a trace of the window [lo, hi] holds: the marks in it, and per (process,
    device) the last mark before its start drawn at the start unless a mark lies exactly there."""
    origin = raw_origin(path, lo, hi)
    floor = origin if lo is None else max(lo, origin)
    out: Counter[Counted] = Counter()
    before: dict[tuple[int, str], tuple[int, int]] = {}
    at_floor = set()
    for ts, pid, device, alloc, reserved in raw_marks(path):
        if ts < floor:
            before[(pid, device)] = (alloc, reserved)
        elif hi is None or ts <= hi:
            out[(pid, f"Memory {device}", ts - origin, alloc, reserved)] += 1
            at_floor |= {(pid, device)} if ts == floor else set()
    for (pid, device), (alloc, reserved) in before.items():
        if (pid, device) not in at_floor:
            out[(pid, f"Memory {device}", floor - origin, alloc, reserved)] += 1
    return out


def counters(trace: Path) -> Counter[Counted]:
    doc = load_strict(trace)
    validate(doc)
    return Counter(
        (e["pid"], e["name"], ns(e["ts"]), e["args"]["allocated"], e["args"].get("reserved"))
        for e in doc["traceEvents"]
        if e["ph"] == "C"
    )


@pytest.fixture(scope="module")
def many_processes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/test_memory_dataset.py's export (two threads, cpu, cuda:0, cuda:1, a malformed mark)
    with a second process's copy of the marks (its own nvbridge domain, no ranges of its own)
    and one mark before the first range."""
    path = build(tmp_path_factory.mktemp("trace_memory") / "memory.sqlite")
    other = PID + 1
    db = sqlite3.connect(path)
    db.execute(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?, NULL, ?, ?, ?, 1)",
        (3, DOMAIN, "nvbridge", (other << 24) | other),
    )
    db.execute(
        f"""INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId)
        SELECT start + 3, NULL, eventType, text, ({other} << 24) | {other}, 1 FROM NVTX_EVENTS
        WHERE eventType = {MARK} AND domainId = 1 AND text LIKE 'mem cuda%' ORDER BY start"""
    )
    db.execute(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (7, NULL, ?, ?, ?, 1)",
        (MARK, "mem cuda:1 99 512 512 1024", THREADS[0]),
    )
    db.commit()
    db.close()
    return path


def test_sample_counters_are_the_raw_marks_one_for_one(tmp_path: Path) -> None:
    """convert --chrome, and nvbridge trace of the dataset and of the report, all three."""
    want = expected(SAMPLE)
    assert len(raw_marks(SAMPLE)) == sum(want.values()) == 316  # the sample's README: 316 marks
    nvbridge.convert(SAMPLE, tmp_path / "ds", chrome_trace=tmp_path / "convert.json")
    export_chrome_trace(tmp_path / "ds", tmp_path / "dataset.json.gz")
    export_chrome_trace(SAMPLE, tmp_path / "report.json")
    for name in ("convert.json", "dataset.json.gz", "report.json"):
        assert counters(tmp_path / name) == want, name


def _streamed(path: Path, out: Path, trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """convert --chrome in windows of 97 NVTX rows (never the one-window fallback)."""
    with monkeypatch.context() as m:
        m.setattr(pipeline, "WINDOW_ROWS", 97)

        def refuse(*_args: Any, **_kwargs: Any) -> None:
            raise AssertionError("the report fell back to the one-window conversion")

        m.setattr(whole_mod, "OneWindow", refuse)
        nvbridge.convert(path, out, chrome_trace=trace)


def test_processes_devices_and_an_event_before_time_zero(
    many_processes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    want = expected(many_processes)
    assert {(pid, name) for pid, name, *_ in want} == {
        (p, f"Memory {d}") for p in (PID, PID + 1) for d in ("cpu", "cuda:0", "cuda:1") if (p, d) != (PID + 1, "cpu")
    }
    assert (PID, "Memory cuda:1", 0, 512, 1024) in want  # the mark before the first range, at time 0
    _streamed(many_processes, tmp_path / "ds", tmp_path / "convert.json.gz", monkeypatch)
    assert counters(tmp_path / "convert.json.gz") == want
    export_chrome_trace(many_processes, tmp_path / "report.json")
    assert counters(tmp_path / "report.json") == want
    names = {
        e["pid"]: e["args"]["name"]
        for e in load_strict(tmp_path / "report.json")["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert PID + 1 in names  # a process with counters and nothing else is named


@pytest.mark.parametrize("row_group", [None, 41])
def test_windows_start_each_track_with_the_value_live_at_the_cut(
    many_processes: Path, row_group: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--start/--end and --steps, over a dataset read a row group at a time (41 rows: a track's
    last row before the cut lies in an earlier row group than the cut)."""
    import nvbridge.export.parquet as parquet

    if row_group is not None:
        monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", row_group)
    nvbridge.convert(many_processes, tmp_path / "ds")
    origin = raw_origin(many_processes)
    marks = raw_marks(many_processes)
    at_mark = marks[len(marks) // 2][0]  # a cut exactly at a mark: that track draws no extra value
    for lo, hi in ((origin + 9_000, origin + 21_000), (at_mark, None), (origin + 100, origin + 150)):
        out = tmp_path / f"w{lo}.json"
        export_chrome_trace(tmp_path / "ds", out, start_ns=lo, end_ns=hi)
        assert counters(out) == expected(many_processes, lo, hi), (lo, hi)
    [(lo, hi)] = raw(SAMPLE, "SELECT start, \"end\" FROM NVTX_EVENTS WHERE text = 'ProfilerStep#1'")
    nvbridge.convert(SAMPLE, tmp_path / "sample")
    export_chrome_trace(tmp_path / "sample", tmp_path / "step.json", steps=(1, 1))
    want = expected(SAMPLE, lo, hi)
    assert counters(tmp_path / "step.json") == want
    assert sum(1 for c in want if c[2] == lo - raw_origin(SAMPLE, lo, hi)) == 1  # the carried value


def test_a_trace_per_process_holds_its_own_counters(many_processes: Path, tmp_path: Path) -> None:
    want = expected(many_processes)
    for pid in (PID, PID + 1):
        out = tmp_path / f"p{pid}.json"
        export_chrome_trace(many_processes, out, processes={pid} if pid == PID else {PID, pid})
        got = counters(out)
        assert got == Counter({c: n for c, n in want.items() if c[0] == pid or pid == PID + 1})


@pytest.mark.parametrize("name", ALL_FILES)
def test_reports_without_memory_have_no_counters(name: str, tmp_path: Path) -> None:
    """Every real export: the trace convert --chrome writes has as many counters as the raw
    marks (none of the ten has any)."""
    path = real_db(name)
    marks = len(raw_marks(path)) if raw(path, "SELECT 1 FROM sqlite_master WHERE name = 'NVTX_EVENTS'") else 0
    try:
        nvbridge.convert(path, tmp_path / "ds", chrome_trace=tmp_path / "t.json.gz", chrome_split="none")
    except nvbridge.errors.ExportError:  # the empty capture: nothing to trace at all
        assert marks == 0
        return
    text = gzip.decompress((tmp_path / "t.json.gz").read_bytes())
    assert text.count(b'"ph":"C"') == marks == 0


def test_each_counter_costs_its_line_and_no_more(tmp_path: Path) -> None:
    """The trace grows by exactly its counter lines, each within chrome_memory.line_bound."""
    report = nvbridge.load(SAMPLE)
    memory = report.memory
    without = InMemory(
        report.meta,
        {n: report.table(n) for n in ("ops", "api_calls", "gpu_ops", "threads", "devices")}
        | {"memory": memory.slice(0, 0)},
    )
    chrome.write(report, tmp_path / "with.json")
    chrome.write(without, tmp_path / "without.json")
    lines = [line for line in (tmp_path / "with.json").read_bytes().splitlines(True) if b'"ph":"C"' in line]
    assert len(lines) == memory.num_rows
    for line in lines:
        device = json.loads(line.rstrip(b",\n"))["name"].removeprefix("Memory ")
        assert len(line) <= chrome_memory.line_bound(device)
    grown = (tmp_path / "with.json").stat().st_size - (tmp_path / "without.json").stat().st_size
    assert grown == sum(len(line) for line in lines)


def test_compiled_and_arrow_lines_are_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    table = pa.table(
        {
            "ts_ns": pa.array([1_000, 2_500, 123_456_789_012], pa.int64()),
            "process_id": pa.array([5, 5, 4_294_967_295], pa.int64()),
            "device": pa.array(["cpu", "cuda:0", 'odd "name" \\ é']).dictionary_encode(),
            "total_allocated": pa.array([1, 0, 2**63 - 1], pa.int64()),
            "total_reserved": pa.array([0, None, -(2**63)], pa.int64()),
        }
    )
    fast = chrome_memory.counter_lines(table, 500)
    assert isinstance(fast, memoryview)
    monkeypatch.setattr(chrome_native, "native", None)
    arrow = chrome_memory.counter_lines(table, 500)
    text = "".join(arrow.to_pylist()).encode()  # type: ignore[union-attr]
    assert bytes(fast) == text
    events = [json.loads(line.rstrip(",")) for line in text.decode().splitlines()]
    assert [e["name"] for e in events] == ["Memory cpu", "Memory cuda:0", 'Memory odd "name" \\ é']
    assert [e["args"] for e in events] == [
        {"allocated": 1, "reserved": 0},
        {"allocated": 0},
        {"allocated": 2**63 - 1, "reserved": -(2**63)},
    ]
    for e, line in zip(events, text.splitlines(True)):
        assert len(line) <= chrome_memory.line_bound(e["name"].removeprefix("Memory "))


def test_a_trace_of_many_reports_holds_each_reports_counters(tmp_path: Path) -> None:
    """Two copies of the sample as a dataset of two reports: each report's counters in its own
    processes (pid + PID_STRIDE * (k + 1)), on the one clock (the copies share their session)."""
    copy = tmp_path / "again.sqlite"
    shutil.copyfile(SAMPLE, copy)
    nvbridge.convert([SAMPLE, copy], tmp_path / "ds")
    export_many(tmp_path / "ds", tmp_path / "all.json", split="none")
    one = expected(SAMPLE)
    want: Counter[Counted] = Counter()
    for k in range(2):
        want.update({(pid + PID_STRIDE * (k + 1), *rest): n for (pid, *rest), n in one.items()})  # type: ignore[misc]
    assert counters(tmp_path / "all.json") == want
    export_many(tmp_path / "ds", tmp_path / "step.json", split="none", steps=(1, 1))
    [(lo, hi)] = raw(SAMPLE, "SELECT start, \"end\" FROM NVTX_EVENTS WHERE text = 'ProfilerStep#1'")
    step = expected(SAMPLE, lo, hi)
    assert counters(tmp_path / "step.json") == Counter(
        {(pid + PID_STRIDE * (k + 1), *rest): n for (pid, *rest), n in step.items() for k in range(2)}
    )


def test_holistic_trace_analysis_reads_past_the_counters(tmp_path: Path) -> None:
    """HTA (which reads slices only) parses a trace with counters as the same trace without."""
    import logging

    parser = pytest.importorskip("hta.common.trace_parser")
    config = pytest.importorskip("hta.configs.parser_config")
    out = tmp_path / "t.json"
    export_chrome_trace(SAMPLE, out)
    doc = load_strict(out)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["ph"] != "C"]
    (tmp_path / "plain.json").write_text(json.dumps(doc))
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():  # pandas' deprecations inside HTA
            warnings.simplefilter("ignore")
            got, plain = (
                parser.parse_trace_dataframe(str(p), config.ParserConfig.get_default_cfg())
                for p in (out, tmp_path / "plain.json")
            )
    finally:
        logging.disable(logging.NOTSET)
    assert got[1].shape[0] == 597  # the sample's ranges (its README), no counter among them
    assert got[1].equals(plain[1])
