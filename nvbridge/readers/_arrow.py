"""Columnar helpers only the readers need (enum labels, blobs, string ids, GPU table alignment);
the ones every stage shares are in :mod:`nvbridge.columns`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col, one_chunk
from nvbridge.readers.raw import GPU_OPS_SCHEMA


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
    cols = [
        part.column(f.name).cast(f.type) if f.name in part.column_names else pa.nulls(part.num_rows, f.type)
        for f in GPU_OPS_SCHEMA
    ]
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
