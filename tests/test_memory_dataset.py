"""The memory table and the ops' memory columns from nvbridge's allocator marks, held to the
export itself: each event's op, each op's self and total bytes found here with SQL over
NVTX_EVENTS (Python's sqlite3, not nvbridge's reader), the peaks and the block lifetimes by a
plain walk over the marks in time order; streamed in windows of 97 rows as read whole."""

from __future__ import annotations

import importlib
import random
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import nvbridge
from nvbridge.dataset import schema
from nvbridge.engine import correlate
from nvbridge.readers import read_profile
from tests.test_schema import _doc_rows
from tests.tiny_nsys import DDL

pipeline = importlib.import_module("nvbridge.conversion.pipeline")
whole_mod = importlib.import_module("nvbridge.readers.whole")

PUSH_POP, MARK, DOMAIN = 59, 34, 75
PID = 4242
THREADS = [(PID << 24) | PID, (PID << 24) | (PID + 7)]
DEVICES = ["cpu", "cuda:0", "cuda:1"]


def _ranges(rng: random.Random, lo: int, hi: int, depth: int) -> list[tuple[int, int]]:
    """Nested ranges inside (lo, hi): starts 1 and ends 2 past a multiple of 10, so no time is
    another's (the marks are 5 past)."""
    out: list[tuple[int, int]] = []
    t = lo
    while depth < 4 and rng.random() < (0.97 if depth == 0 else 0.7):
        start = (t // 10 + rng.randrange(1, 10)) * 10 + 1
        end = (start // 10 + rng.randrange(1, 300 if depth else 120)) * 10 + 2
        if end > hi - 10:
            break
        out.append((start, end))
        out += _ranges(rng, start, end, depth + 1)
        t = end
    return out


def _events(rng: random.Random, span: int, tid: int) -> list[tuple[int, str]]:
    """Allocations and frees at distinct times (multiples of 10 + 5), some blocks freed much
    later (across windows), one freed block that was never allocated in the capture."""
    live: dict[tuple[str, int], int] = {}
    totals = dict.fromkeys(DEVICES, 0)
    out = []
    address = 1000 + tid % 97 * 1_000_000
    for t in range(15, span, 70):
        if rng.random() < 0.3:
            continue
        if live and rng.random() < 0.45:
            key = rng.choice(sorted(live))
            size = live.pop(key)
            device, addr = key
            totals[device] -= size
            out.append((t, f"mem {device} {addr} {-size} {totals[device]} {totals[device] * 2}"))
        else:
            device = rng.choice(DEVICES)
            address += rng.randrange(1, 4) * 256
            size = rng.randrange(1, 5000) * 8
            live[(device, address)] = size
            totals[device] += size
            out.append((t, f"mem {device} {address} {size} {totals[device]} {totals[device] * 2}"))
    out.insert(3, (out[2][0] + 2, "mem cpu 77 -4096 0 0"))  # a block from before the capture
    return out


def build(path: Path, seed: int = 0, memory: bool = True) -> Path:
    """An nsys-shaped export: nested push/pop ranges on two threads, nvbridge's allocator
    marks in the ``nvbridge`` domain among them, a user mark and a malformed ``mem`` mark."""
    rng = random.Random(seed)
    span = 40_000
    rows: list[tuple[Any, ...]] = [(5, None, DOMAIN, "nvbridge", THREADS[0], 1)]
    for tid in THREADS:
        rows += [
            (s, e, PUSH_POP, f"aten::op{i % 5}, op_id = {i}", tid, 0)
            for i, (s, e) in enumerate(_ranges(rng, 0, span, 0))
        ]
        if memory:
            rows += [(t, None, MARK, text, tid, 1) for t, text in _events(rng, span, tid)]
    rows += [
        (33, None, MARK, "user mark", THREADS[0], 0),
        (37, None, MARK, "mem cpu not-a-number 1 1 0", THREADS[0], 1),
        (span - 3, None, MARK, "a late mark of the domain", THREADS[1], 1),
    ]
    rows.sort(key=lambda r: (r[0], r[4]))
    db = sqlite3.connect(path)
    db.executescript(DDL)
    db.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?, ?, ?, ?, ?, ?)", rows
    )
    db.commit()
    db.close()
    return path


def _marks(path: Path) -> list[tuple[int, int, str]]:
    """(ts, globalTid, text) of the well-formed memory marks, in time order, by SQL."""
    db = sqlite3.connect(path)
    rows = db.execute(
        f"""SELECT start, globalTid, text FROM NVTX_EVENTS WHERE eventType = {MARK} AND domainId = 1
        AND text LIKE 'mem %' AND text NOT LIKE '%not-a-number%' ORDER BY start, rowid"""
    ).fetchall()
    db.close()
    return rows


def _innermost(path: Path) -> dict[tuple[int, int], tuple[int, int, int] | None]:
    """Each memory mark's innermost range on its thread, as (thread, start, end), by SQL."""
    db = sqlite3.connect(path)
    rows = db.execute(
        f"""SELECT m.start, (SELECT r.start || ',' || r.end FROM NVTX_EVENTS r WHERE r.eventType = {PUSH_POP}
              AND r.globalTid = m.globalTid AND r.start <= m.start AND r.end >= m.start
              ORDER BY r.start DESC LIMIT 1), m.globalTid
        FROM NVTX_EVENTS m WHERE m.eventType = {MARK} AND m.domainId = 1 AND m.text LIKE 'mem %'"""
    ).fetchall()
    db.close()
    out: dict[tuple[int, int], tuple[int, int, int] | None] = {}
    for ts, found, tid in rows:
        out[(ts, tid)] = None if found is None else (tid % (1 << 24), *map(int, found.split(",")))
    return out


def _usage(path: Path, device: str, self_only: bool) -> dict[tuple[int, int, int], int]:
    """Per range (thread, start, end): bytes of its events on ``device`` ('cpu', or 'cuda' for
    every cuda:N) in its subtree (by time on its thread) or only its own (innermost), by SQL."""
    like = "mem cpu %" if device == "cpu" else "mem cuda%"
    inner = f"""AND NOT EXISTS (SELECT 1 FROM NVTX_EVENTS c WHERE c.eventType = {PUSH_POP}
        AND c.globalTid = m.globalTid AND c.start <= m.start AND c.end >= m.start
        AND c.start > r.start)"""
    db = sqlite3.connect(path)
    db.create_function("field", 2, lambda text, i: int(text.split(" ")[i]) if text else 0)
    rows = db.execute(
        f"""SELECT r.globalTid, r.start, r.end, coalesce(sum(field(m.text, 3)), 0) FROM NVTX_EVENTS r
        LEFT JOIN NVTX_EVENTS m ON m.eventType = {MARK} AND m.domainId = 1 AND m.text LIKE '{like}'
          AND m.text NOT LIKE '%not-a-number%' AND m.globalTid = r.globalTid
          AND m.start BETWEEN r.start AND r.end {inner if self_only else ""}
        WHERE r.eventType = {PUSH_POP} GROUP BY r.rowid"""
    ).fetchall()
    db.close()
    return {(tid % (1 << 24), s, e): int(v) for tid, s, e, v in rows}


def _key(ops: pa.Table) -> list[tuple[int, int, int]]:
    return list(zip(*(ops.column(c).to_pylist() for c in ("thread_id", "start_ns", "end_ns")), strict=True))


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("memory") / "memory.sqlite")


def _streamed(path: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(pipeline, "WINDOW_ROWS", 97)

    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("the report fell back to the one-window conversion")

    monkeypatch.setattr(whole_mod, "OneWindow", refuse)
    nvbridge.convert(path, out)
    return nvbridge.load(out)


def test_the_memory_rows_are_the_marks_with_their_innermost_op(
    export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = _streamed(export, tmp_path / "out", monkeypatch)
    assert pq.ParquetFile(tmp_path / "out" / "memory.parquet").metadata.num_rows > 97  # many windows' worth
    memory, ops = report.memory, report.ops
    marks = _marks(export)
    assert memory.column("ts_ns").to_pylist() == [ts for ts, _, _ in marks]
    fields = [text.split(" ") for _, _, text in marks]
    assert memory.column("device").to_pylist() == [f[1] for f in fields]
    assert memory.column("device_id").to_pylist() == [-1 if f[1] == "cpu" else int(f[1][5:]) for f in fields]
    for i, column in enumerate(("address", "bytes", "total_allocated", "total_reserved"), 2):
        assert memory.column(column).to_pylist() == [int(f[i]) for f in fields], column
    assert memory.column("thread_id").to_pylist() == [tid % (1 << 24) for _, tid, _ in marks]
    assert set(memory.column("source").to_pylist()) == {"nvbridge"}
    by_key = dict(zip(_key(ops), ops.column("op_id").to_pylist(), strict=True))
    inner = _innermost(export)
    want = [None if (op := inner[(ts, tid)]) is None else by_key[op] for ts, tid, _ in marks]
    assert memory.column("op_id").to_pylist() == want
    assert any(v is None for v in want) and any(v is not None for v in want)
    # The marks table keeps the user's mark and the malformed one, never an allocator event.
    # a mark windows after its domain's creation still names it (it was null).
    assert report.marks.select(["name", "domain"]).to_pylist() == [
        {"name": "user mark", "domain": None},
        {"name": "mem cpu not-a-number 1 1 0", "domain": "nvbridge"},
        {"name": "a late mark of the domain", "domain": "nvbridge"},
    ]


def test_self_and_total_usage_equal_the_sql_sums(export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ops = _streamed(export, tmp_path / "out", monkeypatch).ops
    keys = _key(ops)
    for device in ("cpu", "cuda"):
        total, own = _usage(export, device, False), _usage(export, device, True)
        assert ops.column(f"{device}_memory_usage").to_pylist() == [total[k] for k in keys], device
        assert ops.column(f"self_{device}_memory_usage").to_pylist() == [own[k] for k in keys], device
        assert any(total.values()), device


def test_the_peaks_and_lifetimes_equal_a_walk_in_time_order(
    export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = _streamed(export, tmp_path / "out", monkeypatch)
    ops, memory = report.ops, report.memory
    marks = _marks(export)
    for device in ("cpu", "cuda"):
        want = []
        for tid, start, end in _key(ops):
            level = peak = 0
            for ts, gtid, text in marks:
                if gtid % (1 << 24) == tid and start <= ts <= end and text.split(" ")[1].startswith(device):
                    level += int(text.split(" ")[3])
                    peak = max(peak, level)
            want.append(peak)
        assert ops.column(f"{device}_memory_peak").to_pylist() == want, device
        assert max(want) > 0
    live: dict[tuple[str, str], int] = {}
    alloc_ns: list[int | None] = []
    free_ns: list[int | None] = []
    for ts, _, text in marks:
        _, device, address, size = text.split(" ")[:4]
        if int(size) >= 0:
            live[(device, address)] = len(alloc_ns)
            alloc_ns.append(ts)
            free_ns.append(None)
        else:
            row = live.pop((device, address), None)
            alloc_ns.append(None if row is None else alloc_ns[row])
            free_ns.append(ts)
            if row is not None:
                free_ns[row] = ts
    assert memory.column("alloc_ns").to_pylist() == alloc_ns
    assert memory.column("free_ns").to_pylist() == free_ns
    assert None in alloc_ns and None in free_ns  # the block from before, the blocks never freed


def test_streamed_in_memory_and_whole_give_the_same_tables(
    export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = correlate(read_profile(export))
    in_memory = nvbridge.load(export)
    streamed = _streamed(export, tmp_path / "out", monkeypatch)
    columns = [*(c for c, _ in (("op_id", 0),)), *schema.OPS.names[-6:]]
    for got in (streamed, in_memory):
        assert got.memory.to_pylist() == whole.memory.cast(got.memory.schema).to_pylist()
        assert got.ops.select(columns).to_pylist() == whole.ops.select(columns).to_pylist()


def test_without_memory_events_the_columns_are_null_and_the_table_empty(tmp_path: Path) -> None:
    path = build(tmp_path / "none.sqlite", memory=False)
    report = nvbridge.load(path)
    assert report.memory.num_rows == 0
    for column in schema.OPS.names[-6:]:
        assert report.ops.column(column).null_count == report.ops.num_rows > 0, column


def test_a_dataset_written_before_the_memory_table_reads_without_rows(export: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    nvbridge.convert(export, out)
    (out / "memory.parquet").unlink()
    for report in (nvbridge.load(out), nvbridge.load(out, streamed=True)):
        assert report.memory.num_rows == 0
        assert report.memory.column_names == schema.MEMORY.names


def test_the_docs_declare_the_memory_table_and_columns() -> None:
    rows = _doc_rows("memory")
    assert sorted(rows) == sorted(schema.MEMORY.names)
    assert sorted(n for n, (_, contract) in rows.items() if contract) == sorted(schema.CONTRACT["memory"])
    ops = _doc_rows("ops")
    assert set(schema.OPS.names[-6:]) <= set(ops)
