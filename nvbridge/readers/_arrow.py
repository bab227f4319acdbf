"""Small columnar helpers shared by the readers (Arrow <-> NumPy, enum labels, blobs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Names repeat (a few thousand kernels over millions of launches): dictionary-encoded strings
# keep them small in memory and in Parquet, and make reordering rows cheap.
DICT_STR = pa.dictionary(pa.int32(), pa.string())

# The normalized gpu_ops columns every reader produces (see nvbridge.profile).
GPU_OPS_SCHEMA = pa.schema([
    ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("kind", DICT_STR),
    ("name", DICT_STR), ("short_name", DICT_STR), ("mangled_name", DICT_STR),
    ("device_id", pa.int64()), ("context_id", pa.int64()), ("stream_id", pa.int64()),
    ("process_key", pa.int64()), ("correlation_id", pa.int64()),
    ("bytes", pa.int64()), ("copy_kind", DICT_STR),
    ("grid_x", pa.int64()), ("grid_y", pa.int64()), ("grid_z", pa.int64()),
    ("block_x", pa.int64()), ("block_y", pa.int64()), ("block_z", pa.int64()),
    ("registers_per_thread", pa.int64()), ("static_shared_bytes", pa.int64()),
    ("dynamic_shared_bytes", pa.int64()), ("graph_node_id", pa.int64()),
])


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


def lookup(codes: np.ndarray, labels: Mapping[int, str], default: str | None = None) -> pa.DictionaryArray:
    """Enum codes -> dictionary-encoded labels, one label per distinct code (hashing, no sort)."""
    enc = pa.array(codes, pa.int64()).dictionary_encode()
    names = [labels.get(int(c), default if default is not None else f"{int(c)}") for c in enc.dictionary.to_pylist()]
    return pa.DictionaryArray.from_arrays(enc.indices, pa.array(names, pa.string()))


def constant(value: str, n: int) -> pa.DictionaryArray:
    """A column holding one string n times, stored once."""
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([value], pa.string()))


def prefixed(prefix: str, labels: pa.DictionaryArray) -> pa.DictionaryArray:
    """``prefix + label`` for a dictionary column, computed on the dictionary only."""
    labels = labels if isinstance(labels, pa.DictionaryArray) else labels.dictionary_encode()
    return pa.DictionaryArray.from_arrays(labels.indices, pc.binary_join_element_wise(prefix, labels.dictionary, ""))


def blob_u32(blobs: pa.Array, offset: int) -> np.ndarray:
    """Little-endian uint32 at ``offset`` of every blob, read straight from Arrow's buffers."""
    arr = blobs.cast(pa.binary()) if blobs.type != pa.binary() else blobs
    n = len(arr)
    if n == 0:
        return np.zeros(0, np.int64)
    offsets = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset : arr.offset + n + 1]
    data = np.frombuffer(arr.buffers()[2], np.uint8)
    if ((offsets[1:] - offsets[:-1]) < offset + 4).any():
        raise ValueError("blob shorter than expected")
    base = offsets[:-1].astype(np.int64) + offset
    out = np.zeros(n, np.int64)
    for k in range(4):
        out |= data[base + k].astype(np.int64) << (8 * k)
    return out


def align_gpu_ops(part: pa.Table) -> pa.Table:
    """A kernel/memcpy/memset table with GPU_OPS_SCHEMA's columns (absent ones null)."""
    cols = [part.column(f.name).cast(f.type) if f.name in part.column_names else pa.nulls(part.num_rows, f.type)
            for f in GPU_OPS_SCHEMA]
    return pa.table(cols, schema=GPU_OPS_SCHEMA)


def concat_gpu_ops(parts: Sequence[pa.Table]) -> pa.Table:
    """Stack aligned GPU op tables (:func:`align_gpu_ops`)."""
    if not parts:
        return GPU_OPS_SCHEMA.empty_table()
    # No copy: the engine orders GPU ops by start, and rows are taken in that order only
    # when written, a slice at a time (at 10M NVTX rows the table is 450 MB).
    return pa.concat_tables(parts).unify_dictionaries()


def resolve_strings(strings: pa.Table, ids: np.ndarray) -> pa.Array:
    """String-table ids -> a dictionary-encoded string array (the strings are not copied).

    ``strings`` has columns ``id`` and ``value`` (nsys StringIds, nvprof StringTable); an id
    missing from it reads as null.
    """
    sid = np_col(strings, "id")
    values = one_chunk(strings.column("value"))
    if len(sid) == 0:
        return pa.DictionaryArray.from_arrays(pa.nulls(len(ids), pa.int32()), values)
    order = np.argsort(sid, kind="stable")
    pos = np.clip(np.searchsorted(sid[order], ids), 0, len(sid) - 1)
    found = sid[order][pos] == ids
    indices = pa.array(order[pos].astype(np.int32), mask=~found)
    return pa.DictionaryArray.from_arrays(indices, values)


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
    pieces = [batches[b].take(pa.array(grouped[bounds[b]:bounds[b + 1]] - offsets[b]))
              for b in range(len(batches)) if bounds[b + 1] > bounds[b]]
    out = pa.Table.from_batches(pieces, schema=table.schema).combine_chunks()
    inverse = np.empty(len(rows), np.int64)
    inverse[order] = np.arange(len(rows))
    return out if (order == np.arange(len(rows))).all() else out.take(pa.array(inverse))
