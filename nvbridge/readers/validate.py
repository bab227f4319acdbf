"""Validation at read: rows no profiler can write are refused, naming table, column and count.

A profiler writes integer nanoseconds in [0, 2^62) (Unix-epoch times are about 2^60.6 today),
ends no earlier than starts, every event with its ids, and each GPU activity once. A row
that breaks one of these comes from damage or a hand-made file; keeping it would print
impossible numbers (negative durations, sums beyond int64, every range clamped open), so
the reader refuses the file and says which rows are wrong. Never-closed NVTX ranges
(``end`` NULL) are not impossible: the engine clamps them at the capture end.

Every check is a vectorized pass over columns already in memory (no extra SQL scan);
the readers raise :class:`BadRows`, and :meth:`Database.translate_errors` names the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col
from nvbridge.compiled import native

if TYPE_CHECKING:
    from nvbridge.readers._column import Column

# The largest timestamp a profiler writes, with 70 years to spare (epoch ns reach 2^62 in 2116).
MAX_NS = 1 << 62
# Longer than any capture (sessions last minutes to hours; CUPTI buffers and disks end them long
# before): an event, or the events of one table or capture, spanning more is damage. A time
# thrown that far (an nvprof marker at 0 among Unix-epoch times, an end at 2^61) gives ranges of
# decades: sums that overflow later arithmetic and impossible totals.
SPAN_NS = 1 << 50  # 13 days
FIX = "the export is damaged or was edited; export the report again"


class BadRows(Exception):
    """Impossible rows; the message names table, column and row count (never reaches a user
    unnamed: the database's error translation adds the file name)."""


def _rows(n: int) -> str:
    return f"{n:,} row" + ("" if n == 1 else "s")


_ABSENT = b"nvbridge.absent"


def mark_absent(t: pa.Table, fields: Sequence[str]) -> pa.Table:
    """Record which fields the database lacks (read as their defaults): an optional column an older
    exporter does not write is NULL by design, not damage."""
    return t.replace_schema_metadata({_ABSENT: ",".join(fields).encode()}) if fields else t


def no_nulls(table: str, t: pa.Table, raw: Mapping[str, str], fields: Sequence[str]) -> None:
    """Refuse NULLs in ``fields`` (``raw`` maps each to its column name in ``table``), except in
    columns the database lacks (:func:`mark_absent`)."""
    absent = set((t.schema.metadata or {}).get(_ABSENT, b"").decode().split(","))
    for name in fields:
        if name in t.column_names and name not in absent and (n := t.column(name).null_count):
            raise BadRows(f"{table}.{raw.get(name, name)} is empty (NULL) in {_rows(n)}; {FIX}.")


def times(
    table: str,
    t: pa.Table,
    raw: Mapping[str, str],
    start: str = "start_ns",
    end: str | None = "end_ns",
    *,
    open_ok: bool = False,
) -> None:
    """Refuse NULL times, times outside [0, 2^62), ends before starts, and durations whose sum
    does not fit in int64. With ``open_ok`` a NULL ``end`` (a never-closed NVTX range) passes."""
    if not t.num_rows:
        return
    no_nulls(table, t, raw, [start] if open_ok or end is None else [start, end])
    s = np_col(t, start)
    _in_range(table, raw.get(start, start), s)
    if end is None:
        capture_span([(f"{table}.{raw.get(start, start)}", s)])
        return
    e = np_col(t, end, fill=0)
    if t.column(end).null_count:  # never closed: no duration to check here
        e = np.where(t.column(end).is_null().to_numpy(zero_copy_only=False), s, e)
    _in_range(table, raw.get(end, end), e)
    if bad := int(np.count_nonzero(e < s)):
        raise BadRows(f"{table}.{raw.get(end, end)} is before {raw.get(start, start)} in {_rows(bad)}; {FIX}.")
    if bad := int(np.count_nonzero(e - s >= SPAN_NS)):
        raise BadRows(f"{table}: {_rows(bad)} last more than 2^50 ns (13 days), longer than any capture; {FIX}.")
    if float((e - s).sum(dtype=np.float64)) >= MAX_NS:
        raise BadRows(
            f"{table}: durations add up to more than 2^62 ns (146 years), more than a capture can hold; {FIX}."
        )
    capture_span([(f"{table}.{raw.get(start, start)}", s), (f"{table}.{raw.get(end, end)}", e)])


def capture_span(parts: Sequence[tuple[str, np.ndarray]]) -> None:
    """Refuse times (``parts``: where they come from, and the times) more than SPAN_NS apart."""
    parts = [(where, values) for where, values in parts if len(values)]
    if not parts:
        return
    lo_at, lo = min(((where, int(v.min())) for where, v in parts), key=lambda p: p[1])
    hi_at, hi = max(((where, int(v.max())) for where, v in parts), key=lambda p: p[1])
    if hi - lo >= SPAN_NS:
        raise BadRows(
            f"times {(hi - lo) / 86.4e12:,.0f} days apart ({lo_at} {lo:,} ns, {hi_at} {hi:,} ns), longer than any "
            f"capture; {FIX}."
        )


def _in_range(table: str, column: str, values: np.ndarray) -> None:
    if bad := int(np.count_nonzero((values < 0) | (values >= MAX_NS))):
        raise BadRows(f"{table}.{column} is negative or beyond 2^62 ns (year 2116) in {_rows(bad)}; {FIX}.")


def unique(table: str, t: pa.Table, key: Sequence[str], what: str) -> None:
    """Refuse rows equal on every column of ``key`` (``what`` says what that key means)."""
    if t.num_rows < 2:
        return
    if native is not None:  # one pass with a hash set
        n = native.duplicates(*(np.ascontiguousarray(np_col(t, k, fill=-1), np.int64) for k in key))
    else:
        n = _duplicates([np_col(t, k, fill=-1).astype(np.uint64) for k in key])
    if n:
        raise BadRows(f"{table} holds {_rows(n)} duplicated ({what}); {FIX}.")


def _duplicates(cols: list[np.ndarray]) -> int:
    """Rows equal to another on every column (NumPy: hashes sorted, equal ones compared)."""
    n_rows = len(cols[0])
    # A 64-bit hash per row, sorted; only equal hashes are compared column by column.
    h = np.zeros(n_rows, np.uint64)
    for c in cols:
        h = (h ^ c) * np.uint64(0x100000001B3)
        h ^= h >> np.uint64(29)
    order = np.argsort(h, kind="stable")
    hs = h[order]
    same = np.flatnonzero(hs[1:] == hs[:-1])
    if not len(same):
        return 0
    a, b = order[same], order[same + 1]
    equal = np.ones(len(same), bool)
    for c in cols:
        equal &= c[a] == c[b]
    return int(np.count_nonzero(equal))


def names_found(table: str, column: str, ids: np.ndarray, resolved: pa.Array, strings_table: str) -> None:
    """Refuse ids (other than the -1 of NULL) that the string table does not hold."""
    missing = resolved.is_null().to_numpy(zero_copy_only=False) & (ids != -1)
    if n := int(np.count_nonzero(missing)):
        raise BadRows(
            f"{table}.{column} names a string that {strings_table} lacks in {_rows(n)} "
            f"(e.g. id {int(ids[missing][0])}); {FIX}."
        )


# More than any device holds or moves (GPU memory is 10^11 bytes today): a copy or memset size,
# or a bandwidth in KB/s, beyond it is damage, and summing such values overflowed later sums.
MAX_SIZE = 1 << 50


def sizes(table: str, t: pa.Table, raw: Mapping[str, str], field: str) -> None:
    """Refuse sizes (bytes, bandwidths) that are negative or beyond MAX_SIZE."""
    if field not in t.column_names or not t.num_rows:
        return
    values = np_col(t, field, fill=0)
    if bad := int(np.count_nonzero((values < 0) | (values >= MAX_SIZE))):
        raise BadRows(f"{table}.{raw.get(field, field)} is negative or beyond 2^50 in {_rows(bad)}; {FIX}.")


def raw_names(columns: Sequence[Column]) -> dict[str, str]:
    """field -> raw column name, from a reader's Column declarations."""
    return {c.field: c.raw for c in columns}


def non_integers(counts: Mapping[str, int], table: str) -> None:
    """Refuse integer columns holding text, reals or BLOBs (counts from SQLite's typeof)."""
    for column, n in counts.items():
        if n:
            raise BadRows(f"{table}.{column} holds text, a real or a BLOB instead of an integer in {_rows(n)}; {FIX}.")


def blobs_in_text(counts: Mapping[str, int], table: str) -> None:
    """Refuse text columns (names) holding BLOBs (counts from SQLite's typeof)."""
    for column, n in counts.items():
        if n:
            raise BadRows(f"{table}.{column} holds a BLOB instead of text in {_rows(n)}; {FIX}.")
