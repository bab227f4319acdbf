"""The column toolkit every stage shares: Arrow <-> NumPy, zero-copy takes, group sums.

The ground floor of the package: it imports nothing of nvbridge, so readers, the engine,
exporters and analyses all build on it without reaching into one another.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Names repeat (a few thousand kernels over millions of launches): dictionary-encoded strings
# keep them small in memory and in Parquet, and make reordering rows cheap.
DICT_STR = pa.dictionary(pa.int32(), pa.string())


def one_chunk(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    """The values as one array: a single chunk as it is, several concatenated.

    ``ChunkedArray.combine_chunks`` copies even a single chunk (at 10M NVTX rows, 0.1 s and
    30 MB of fresh pages for one API-call column).
    """
    if isinstance(values, pa.Array):
        return values
    return values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()


def np_col(table: pa.Table, name: str, fill: int | None = None) -> np.ndarray:
    """An integer column as a NumPy array (zero-copy where it can); nulls become ``fill``
    (required if any)."""
    col = one_chunk(table.column(name))
    if col.null_count:
        if fill is None:
            raise ValueError(f"column {name} has nulls and no fill value")
        col = col.fill_null(fill)
    return np.asarray(col.to_numpy(zero_copy_only=False))


def set_column(table: pa.Table, name: str, values: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Add or replace a column."""
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, values)
    return table.append_column(name, values)


def dense_ids(*columns: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense int64 ids for rows of several int columns (equal rows, equal id), by hashing.

    Much faster than ``np.unique(axis=0)``, which sorts structured rows.
    """
    if not columns or len(columns[0]) == 0:
        return np.zeros(0, np.int64), 0
    ids = np.zeros(len(columns[0]), np.int64)
    count = 1
    for col in columns:
        enc = pa.array(col).dictionary_encode()
        ids = ids * len(enc.dictionary) + np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64)
        count *= len(enc.dictionary)
        if count >= 2**62:  # renumber before the product overflows
            enc = pa.array(ids).dictionary_encode()
            ids = np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64)
            count = len(enc.dictionary)
    enc = pa.array(ids).dictionary_encode()
    return np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64), len(enc.dictionary)


def sum_by(index: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 group sums (index -1 is dropped).

    bincount sums in float64, exact while every partial sum stays below 2**53 (104 days of
    nanoseconds); beyond that, the slower integer path.
    """
    keep = index >= 0
    idx, vals = index[keep], values[keep]
    if len(vals) == 0 or (vals.min() >= 0 and int(vals.sum()) < 2**53):
        return np.rint(np.bincount(idx, weights=vals, minlength=n)).astype(np.int64)
    out = np.zeros(n, np.int64)
    np.add.at(out, idx, vals)
    return out


def take_sorted(values: pa.Table | pa.ChunkedArray, rows: np.ndarray) -> pa.Table | pa.ChunkedArray:
    """``values[rows]`` for ascending ``rows``, as zero-copy slices of their contiguous runs.

    A window emits nearly all of its rows (all but the few still open): Arrow's ``take``
    would first concatenate every chunk of every string column, then copy the rows out.
    """
    if len(rows) == 0:
        return values.slice(0, 0)
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    if len(breaks) > max(256, len(rows) // 8):  # many scattered rows: one take beats many slices
        return values.take(pa.array(rows))
    first = rows[np.r_[0, breaks]]
    last = rows[np.r_[breaks - 1, len(rows) - 1]]
    parts = [values.slice(int(a), int(b - a + 1)) for a, b in zip(first, last)]
    if isinstance(values, pa.Table):
        return pa.concat_tables(parts)
    return pa.chunked_array([c for p in parts for c in p.chunks], type=values.type)


def take_batches(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """``table[rows]`` for any row order, taking from each record batch only its own rows:
    Arrow's ``take`` on a multi-chunk table first concatenates every column whole."""
    batches = table.to_batches()
    offsets = np.cumsum([0] + [b.num_rows for b in batches])
    batch_of = np.searchsorted(offsets, rows, "right") - 1
    order = np.argsort(batch_of, kind="stable")
    grouped, groups = rows[order], batch_of[order]
    bounds = np.searchsorted(groups, np.arange(len(batches) + 1))
    pieces = [
        batches[b].take(pa.array(grouped[bounds[b] : bounds[b + 1]] - offsets[b]))
        for b in range(len(batches))
        if bounds[b + 1] > bounds[b]
    ]
    out = pa.Table.from_batches(pieces, schema=table.schema).combine_chunks()
    inverse = np.empty(len(rows), np.int64)
    inverse[order] = np.arange(len(rows))
    return out if (order == np.arange(len(rows))).all() else out.take(pa.array(inverse))


def merged_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of [start, end) intervals as disjoint, sorted intervals (touching ones merge)."""
    if len(start) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(start, kind="stable")
    s, reach = start[order], np.maximum.accumulate(end[order])
    new = np.flatnonzero(s[1:] > reach[:-1]) + 1  # an interval starting past all before it
    firsts = np.concatenate([[0], new])
    lasts = np.concatenate([new - 1, [len(s) - 1]])
    return s[firsts], reach[lasts]


def earliest_start_ns(*tables: pa.Table) -> int | None:
    """The first ``start_ns`` over tables (a table without rows or that column is skipped)."""
    firsts = [int(pc.min(t.column("start_ns")).as_py()) for t in tables if t.num_rows and "start_ns" in t.column_names]
    return min(firsts, default=None)


def latest_end_ns(*tables: pa.Table) -> int | None:
    """The last ``end_ns`` over tables (a table without rows or that column is skipped)."""
    lasts = [int(pc.max(t.column("end_ns")).as_py()) for t in tables if t.num_rows and "end_ns" in t.column_names]
    return max(lasts, default=None)


def levels_deepest_first(parent_row: np.ndarray, depth: np.ndarray) -> Iterator[np.ndarray]:
    """The rows with a parent, one depth level at a time from the deepest up to depth 1: the
    order in which a tree's sums roll up (``parent_row``: the parent's row, -1 at a root).

    One stable sort by depth groups every level (a radix sort, on int16 depths); a caller may
    update its sums between levels, as the next level is only sliced out when asked for.
    """
    kids = np.flatnonzero(parent_row >= 0)
    top = int(depth.max(initial=0))
    kid_depth = depth[kids]
    order = np.argsort(kid_depth.astype(np.int16) if top < 2**15 else kid_depth, kind="stable")
    by_depth = kids[order]
    bounds = np.searchsorted(kid_depth[order], np.arange(top + 2))
    for d in range(top, 0, -1):
        yield by_depth[bounds[d] : bounds[d + 1]]


def roll_up(values: np.ndarray, parent_row: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Subtree sums: each row's value plus all its descendants'."""
    total: np.ndarray = values.copy()
    for kids in levels_deepest_first(parent_row, depth):
        np.add.at(total, parent_row[kids], total[kids])
    return total
