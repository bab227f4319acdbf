"""Time windows over a report: ProfilerStep windows, overlap filters and first/last event times.

One home for what ``trace`` and ``plot`` both cut by: a step's window comes from the
``ProfilerStep#N`` ranges (written by ``nvbridge.emit_nvtx(...).step()`` or torch.profiler), and a
row is in a window when it overlaps it (``end >= start_ns`` and ``start <= end_ns``, ends included).
Everything is columnar and works on a whole table or on one chunk of it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col

STEP_PATTERN = r"^ProfilerStep#(?P<n>\d+)$"


def step_numbers(names: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """N of each ``ProfilerStep#N`` name, -1 for any other name (dictionary arrays are matched
    on their dictionary, once per distinct name)."""
    if isinstance(names, pa.ChunkedArray):
        names = names.combine_chunks()
    if pa.types.is_dictionary(names.type):
        numbers = step_numbers(names.dictionary)
        indices = np.asarray(names.indices.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
        out = numbers[indices] if len(numbers) else np.full(len(names), -1, np.int64)
        return np.where(np.asarray(names.is_valid().to_numpy(zero_copy_only=False)), out, -1)
    steps = pc.extract_regex(names.cast(pa.string()), STEP_PATTERN)
    n = pc.struct_field(steps, "n").cast(pa.int64()).fill_null(-1)
    return np.asarray(n.to_numpy(zero_copy_only=False), np.int64)


def step_spans(ops: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N, start_ns, end_ns) of every ``ProfilerStep#N`` range in ``ops`` (a table or a chunk)."""
    n = step_numbers(ops.column("op_name"))
    sel = n >= 0
    return n[sel], np_col(ops, "start_ns")[sel], np_col(ops, "end_ns")[sel]


def step_window_of(spans: tuple[np.ndarray, np.ndarray, np.ndarray], first: int, last: int) -> tuple[int, int]:
    """[start, end] covering steps ``first``..``last`` among ``spans`` (from :func:`step_spans`).

    Raises:
        ValueError: the report has no such steps.
    """
    n, start, end = spans
    if not len(n):
        raise ValueError("the report has no ProfilerStep#N ranges; record with nvbridge.emit_nvtx(...).step()")
    sel = (n >= first) & (n <= last)
    if not sel.any():
        raise ValueError(f"no steps {first}..{last} in the report (it has steps {int(n.min())}..{int(n.max())})")
    return int(start[sel].min()), int(end[sel].max())


def step_window(ops: pa.Table, first: int, last: int) -> tuple[int, int]:
    """[start, end] of ProfilerStep#first .. ProfilerStep#last.

    Raises:
        ValueError: the report has no such steps.
    """
    return step_window_of(step_spans(ops), first, last)


def in_window(
    table: pa.Table, start_ns: int | None, end_ns: int | None, processes: Iterable[int] | None = None
) -> np.ndarray:
    """Mask of the rows overlapping [start_ns, end_ns] (either end open when None) of the given
    host processes (rows without a process are outside any process filter)."""
    keep = np.ones(table.num_rows, bool)
    if start_ns is not None:
        keep &= np_col(table, "end_ns") >= start_ns
    if end_ns is not None:
        keep &= np_col(table, "start_ns") <= end_ns
    if processes is not None:
        keep &= np.isin(np_col(table, "process_id", fill=-1), list(processes))
    return keep


def first_start(tables: Iterable[pa.Table]) -> int | None:
    """Earliest ``start_ns`` over the tables (None when all are empty)."""
    return min((int(pc.min(t.column("start_ns")).as_py()) for t in tables if t.num_rows), default=None)


def last_end(tables: Iterable[pa.Table]) -> int | None:
    """Latest ``end_ns`` over the tables (None when all are empty)."""
    return max((int(pc.max(t.column("end_ns")).as_py()) for t in tables if t.num_rows), default=None)
