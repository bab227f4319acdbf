"""Dictionary-encoded columns that hold only the values their rows use.

A name column is read as indices into the export's whole string table (``StringIds``,
``StringTable``), and Arrow keeps that table as the column's dictionary; Parquet writes an Arrow
dictionary as it is, and ``load`` hands it on. A real export's string table holds the capture's
process environment (``KEY=VALUE``, tokens among them), host names and install paths: anyone
reading a dictionary page would read them. So every table is compacted before it is written or
handed out: indices -> the set of entries they use -> a dictionary of those entries, the indices
renumbered. One pass over the indices per dictionary column, no Python object per row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def compact_table(table: pa.Table) -> pa.Table:
    """``table`` with each dictionary column's dictionary cut to the entries its rows use.

    The chunks of a column share one dictionary afterwards (the Parquet writer falls back to
    plain encoding inside a row group whose chunks change dictionary).
    """
    out = table
    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            column = compact_column(table.column(i))
            if column is not table.column(i):
                out = out.set_column(i, field, column)
    return out


def compact_column(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """One dictionary column, compacted (the column itself when every entry is used)."""
    if column.num_chunks == 0:
        return column
    chunks = column.chunks
    if any(c.dictionary is not chunks[0].dictionary for c in chunks[1:]) and not all(
        c.dictionary.equals(chunks[0].dictionary) for c in chunks[1:]
    ):
        chunks = pa.table({"c": column}).unify_dictionaries().column(0).chunks
    dictionary = chunks[0].dictionary
    indices = [_indices(c) for c in chunks]
    used = np.zeros(len(dictionary), bool)
    for idx, valid in indices:
        used[idx if valid is None else idx[valid]] = True
    if used.all() and all(c.dictionary is dictionary for c in chunks):
        return column
    # Null slots' indices are 0 (filled), renumbered with the rest and masked again; with no
    # entry used, every slot is null and maps to 0 of an empty dictionary, masked.
    remap = np.maximum(np.cumsum(used, dtype=np.int32) - 1, 0).astype(np.int32) if used.any() else np.zeros(1, np.int32)
    kept = dictionary.filter(pa.array(used))
    out = [
        pa.DictionaryArray.from_arrays(
            pa.array(remap[idx], mask=None if valid is None else ~valid).cast(chunk.type.index_type),
            kept,
            ordered=chunk.type.ordered,
            safe=False,
        )
        for chunk, (idx, valid) in zip(chunks, indices)
    ]
    return pa.chunked_array(out, column.type)


def _indices(chunk: pa.DictionaryArray) -> tuple[np.ndarray, np.ndarray | None]:
    """The chunk's indices (0 where null) and where it holds a value (None: everywhere)."""
    if chunk.null_count == 0:
        return np.asarray(chunk.indices.to_numpy(zero_copy_only=False)), None
    valid = np.asarray(chunk.is_valid().to_numpy(zero_copy_only=False), bool)
    return np.asarray(chunk.indices.fill_null(0).to_numpy(zero_copy_only=False)), valid
