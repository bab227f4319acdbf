"""nvbridge._native's engine loops give exactly the NumPy path's columns (the reference, kept for
installs without a compiler), on random windows with every case the rules name: nesting,
crossing, zero-length and identical ranges, ranges ended on another thread, carried rows."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvbridge.compiled import native
from nvbridge.engine import window
from tests.conftest import REAL_DB, SAMPLE_DB, require_native


@pytest.fixture(autouse=True)
def _native_built() -> None:
    require_native()


@st.composite
def windows(draw: st.DrawFn) -> tuple[window.Rows, np.ndarray, np.ndarray, np.ndarray]:
    """A window's rows in output order (start, thread, longer first) with API calls."""
    n = draw(st.integers(0, 60))
    threads = draw(st.sampled_from([[7], [7, 3], [7, 3, 1 << 40]]))
    span = draw(st.sampled_from([5, 50, 1000]))
    raw = []
    for i in range(n):
        s = draw(st.integers(0, span))
        e = s + draw(st.sampled_from([0, 0, 1, 2, 5, 20, span]))
        raw.append((s, draw(st.sampled_from(threads)), -e, i))
    raw.sort()
    start = np.array([r[0] for r in raw], np.int64)
    end = np.array([-r[2] for r in raw], np.int64)
    key = np.array([r[1] for r in raw], np.int64)
    cross = np.array([draw(st.integers(0, 9)) == 0 for _ in raw], bool)
    rows = window.Rows(None, np.arange(n, dtype=np.int64), start, end, np.zeros(n, np.int64), cross, key, 0)
    m = draw(st.integers(0, 20))
    a_start = np.sort(np.array([draw(st.integers(0, span)) for _ in range(m)], np.int64))
    a_end = a_start + np.array([draw(st.sampled_from([0, 1, 3, span])) for _ in range(m)], np.int64)
    a_key = np.array([draw(st.sampled_from([*threads, 99])) for _ in range(m)], np.int64)
    return rows, a_start, a_end, a_key


@settings(max_examples=600, deadline=None)
@given(windows())
def test_compiled_tree_matches_the_numpy_forest(case: tuple[window.Rows, np.ndarray, np.ndarray, np.ndarray]) -> None:
    rows, a_start, a_end, a_key = case
    twin = window.Rows(rows.raw, rows.op_id, rows.start, rows.end, rows.flags.copy(), rows.cross, rows.thread_key, 0)
    got = window._build_tree_native(rows, a_start, a_end, a_key)
    with mock.patch.object(window, "native", None):
        want = window.build_tree(twin, a_start, a_end, a_key, int(rows.end.max(initial=0)))
    np.testing.assert_array_equal(got.parent, want.parent)
    np.testing.assert_array_equal(got.depth, want.depth)
    np.testing.assert_array_equal(got.in_tree, want.in_tree)
    np.testing.assert_array_equal(got.api_local, want.api_local)
    np.testing.assert_array_equal(rows.flags, twin.flags)  # CROSSING flags


def test_compiled_chunk_spans_match_the_sql_aggregates() -> None:
    """Slab planning's chunk spans from one compiled pass (the page reader's, and SQLite's when
    the page reader is not used) equal the per-chunk SQL aggregates, on every real export and
    sample, for API calls, kernels and NVTX ranges (with their filter)."""
    from nvbridge.readers._db import Database
    from nvbridge.readers._pages import RowFilter, latest_sql
    from nvbridge.readers.nsys_tables import RANGE_TYPES
    from nvbridge.readers.slabs import chunk_queries, chunks

    nvtx = RowFilter(member=("eventType", (59, 60, 70, 71, 34, 39, 75), True))
    reads = [
        ("CUPTI_ACTIVITY_KIND_RUNTIME", RowFilter(), ("end", None)),
        ("CUPTI_ACTIVITY_KIND_KERNEL", RowFilter(), None),
        ("NVTX_EVENTS", nvtx, ("start", ("eventType", RANGE_TYPES))),
    ]
    paths = [*sorted(REAL_DB.glob("nsys-*.sqlite")), *sorted(SAMPLE_DB.glob("*.sqlite"))]
    compared = dict.fromkeys(paths, 0)
    for path in paths:
        with Database(path) as db:
            for table, rows, latest in reads:
                if not db.has(table):
                    continue
                ((first, last),) = db.scalar_rows(f"SELECT min(rowid), max(rowid) FROM {table}")
                if first is None:
                    continue
                got = db.chunk_spans(table, rows, latest, first, last)
                with mock.patch.object(Database, "_layout", return_value=None):
                    through_sqlite = db.chunk_spans(table, rows, latest, first, last)
                queries = chunk_queries(table, rows.sql(), latest_sql(latest), first, last)
                want = chunks([r for q in queries for r in db.scalar_rows(q)])
                assert got is not None and through_sqlite is not None and want is not None
                for field in ("first", "last", "with_start", "lo", "hi"):
                    np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
                    np.testing.assert_array_equal(getattr(through_sqlite, field), getattr(want, field))
                assert (got.without_start, got.latest) == (want.without_start, want.latest)
                assert (through_sqlite.without_start, through_sqlite.latest) == (want.without_start, want.latest)
                compared[path] += 1
    # Every input (the samples always; the real exports where ../shared is) has a table compared.
    assert len(paths) >= 10 and all(compared.values()), compared


def test_compiled_reader_names_a_mismatch_of_columns_and_kinds(tmp_path: Path) -> None:
    """The message counts the query's columns (read before the statement is finalized)."""
    import sqlite3

    path = tmp_path / "two.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (a INTEGER, b INTEGER)")
    db.close()
    assert native is not None
    reader = native.Reader(f"file:{path}?mode=ro")
    with pytest.raises(ValueError, match="the query has 2 columns, 1 kinds given"):
        reader.read("SELECT a, b FROM t", "i")
    reader.close()


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4).flatmap(lambda k: st.lists(st.tuples(*[st.integers(-2, 3)] * k), max_size=80)))
def test_compiled_duplicate_count_matches_numpy(rows: list[tuple[int, ...]]) -> None:
    """validate.unique's count of duplicated rows: one hash-set pass equals the sort-based one."""
    from nvbridge.readers.validate import _duplicates

    if not rows:
        return
    cols = [np.array(c, np.int64) for c in zip(*rows)]
    assert native is not None
    assert native.duplicates(*cols) == _duplicates([c.astype(np.uint64) for c in cols])
    assert native.duplicates(*cols) == len(rows) - len(set(rows))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3)), max_size=30), st.integers(-1, 4)),
        min_size=1,
        max_size=6,
    ),
    st.lists(st.tuples(st.integers(0, 44), st.integers(0, 3)), max_size=30),
)
def test_compiled_store_matches_the_sorted_store(
    windows: list[tuple[list[tuple[int, int]], int]], queries: list[tuple[int, int]]
) -> None:
    """The forward-op store: the latest entry per key, seq checked, entries evicted by stamp with
    each group's evicted span of seqs; the hash map equals the NumPy sorted arrays after any
    sequence of windows and evictions."""
    from nvbridge.engine.forward_links import SEQ_BITS, SortedStore

    assert native is not None
    fast, slow = native.Store(SEQ_BITS), SortedStore()
    serial = 0
    for stamp, (rows, back) in enumerate(windows):
        # key k: group k // 10 above seq k % 10; the seq of the row is q (a mismatch is a miss)
        keys = np.array([(k // 10) << SEQ_BITS | (k % 10) for k, _ in rows], np.int64)
        seq = np.array([(k % 10) + 10 * q for k, q in rows], np.int64)
        values = np.arange(serial, serial + 5 * len(rows), dtype=np.int64).reshape(5, len(rows))
        serial += 5 * len(rows)
        fast.put(keys, seq, values, stamp)
        slow.put(keys, seq, values, stamp)
        if back >= 0:
            assert fast.evict(stamp - back) == slow.evict(stamp - back)
    q_keys = np.array([(k // 10) << SEQ_BITS | (k % 10) for k, _ in queries], np.int64)
    q_seq = np.array([(k % 10) + 10 * q for k, q in queries], np.int64)
    got = np.frombuffer(fast.get(q_keys, q_seq), np.int64).reshape(5, len(queries))
    np.testing.assert_array_equal(got, slow.get(q_keys, q_seq))
    np.testing.assert_array_equal(np.frombuffer(fast.evicted(q_keys, q_seq), np.uint8), slow.evicted(q_keys, q_seq))
    assert len(fast) == len(slow)


@settings(max_examples=400, deadline=None)
@given(
    windows(),
    st.integers(0, 5),
    st.lists(st.tuples(st.integers(-1, 59), st.integers(0, 50), st.integers(0, 9)), max_size=40),
)
def test_compiled_roll_up_matches_the_levels(
    case: tuple[window.Rows, np.ndarray, np.ndarray, np.ndarray], carried: int, gpu: list[tuple[int, int, int]]
) -> None:
    """Subtree sums in one backward pass equal the depth-level roll-up, carried rows included."""
    rows, a_start, a_end, a_key = case
    with mock.patch.object(window, "native", None):
        tree = window.build_tree(rows, a_start, a_end, a_key, int(rows.end.max(initial=0)))
    rows = window.Rows(
        rows.raw, rows.op_id, rows.start, rows.end, rows.flags, rows.cross, rows.thread_key, min(carried, rows.n)
    )
    g_local = np.array([r if r < rows.n else -1 for r, _, _ in gpu], np.int64)
    g_start = np.array([s for _, s, _ in gpu], np.int64)
    g_end = g_start + np.array([d for _, _, d in gpu], np.int64)
    got = window._roll_up_native(rows, tree, g_local, g_start, g_end)
    assert got is not None  # rows in output order
    with mock.patch.object(window, "native", None):
        want = window.roll_up(rows, tree, g_local, g_start, g_end)
    for name in want.values:
        np.testing.assert_array_equal(got.values[name], want.values[name], err_msg=name)
    np.testing.assert_array_equal(got.gpu_first, want.gpu_first)
    np.testing.assert_array_equal(got.gpu_last, want.gpu_last)


def test_a_parent_after_its_child_is_rolled_up_by_levels() -> None:
    """Rows out of output order (a parent after its child): the one backward pass declines, and
    roll_up's depth levels give the sums (row 1 holds row 0 and its GPU op)."""
    n = 2
    rows = window.Rows(
        None,
        np.arange(n, dtype=np.int64),
        np.array([5, 0], np.int64),
        np.array([8, 10], np.int64),
        np.zeros(n, np.int64),
        np.zeros(n, bool),
        np.zeros(n, np.int64),
        0,
    )
    tree = window.Tree(np.array([1, -1]), np.array([1, 0]), np.ones(n, bool), np.zeros(0, np.int64))
    gpu = np.array([0], np.int64), np.array([6], np.int64), np.array([7], np.int64)
    assert window._roll_up_native(rows, tree, *gpu) is None
    sums = window.roll_up(rows, tree, *gpu)
    assert sums.values["total_gpu"].tolist() == [1, 1]
    assert sums.values["self_gpu"].tolist() == [1, 0]
    assert sums.values["child_cpu"].tolist() == [0, 3]


@pytest.mark.parametrize(
    "source",
    [REAL_DB / "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite", SAMPLE_DB / "observer_two_threads_cpu.sqlite"],
    ids=lambda p: p.name,
)
def test_without_the_extension_every_table_is_the_same(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where nvbridge._native is not built, ConnectorX reads and NumPy and Arrow do the rest: the
    dataset (small windows, so carried ranges and slabs are crossed) and the trace are the same."""
    import nvbridge
    import nvbridge.conversion.pipeline as pipeline

    if not source.is_file():
        pytest.skip(f"{source} not found")
    monkeypatch.setattr(pipeline, "WINDOW_ROWS", 997)
    native = nvbridge.convert(source, tmp_path / "native", chrome_trace=tmp_path / "native.json")[0].traces
    for module in (
        "engine.window",
        "export.chrome_native",
        "engine.forward_links",
        "engine.names",
        "readers._sqlite",
        "readers.validate",
    ):
        monkeypatch.setattr(f"nvbridge.{module}.native", None)
    plain = nvbridge.convert(source, tmp_path / "plain", chrome_trace=tmp_path / "plain.json")[0].traces
    for table in ("ops", "api_calls", "gpu_ops", "marks", "syncs", "threads", "devices"):
        got = pq.read_table(tmp_path / "plain" / f"{table}.parquet")
        want = pq.read_table(tmp_path / "native" / f"{table}.parquet")
        assert got.equals(want), table
    assert len(plain) == len(native) > 0  # one trace, or one per rank (the FSDP export's two)
    for a, b in zip(plain, native):
        assert a.read_bytes() == b.read_bytes()
