"""What ``advise`` reads of a dataset: only the columns its detectors use.

Read whole, the ops' names, shapes, stacks and input values are most of a report's memory
(10M ops: 4.9 GB of Arrow tables, 9.2 GB peak); the detectors (context, findings, waits,
dominant, below_roofline, memory_advice, the GPU timeline) need a few number columns and names.
A column a dataset predates is left out, as the detectors expect (they check ``column_names``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.analysis.memory import PEAK_COLUMNS
from nvbridge.analysis.memory_categories import MEMORY_COLUMNS, OPS_COLUMNS
from nvbridge.columns import np_col, one_chunk
from nvbridge.conversion.memory import load_tables
from nvbridge.dataset.report import DatasetTables
from nvbridge.dataset.schema import TABLES

# Per table, what advise reads (a table not named here is small and read whole).
ADVISE_COLUMNS: dict[str, tuple[str, ...]] = {
    "ops": tuple(
        dict.fromkeys(
            [
                *("op_id", "parent_id", "depth", "op_name", "module_path", "process_id", "thread_id"),
                *("start_ns", "end_ns", "step", "flops", "bytes", "compute_dtype", "input_shapes"),
                *OPS_COLUMNS,  # the memory finding's categories
            ]
        )
    ),
    "gpu_ops": (
        *("op_id", "api_call_id", "kind", "name", "device_id", "stream_id", "process_id", "thread_id"),
        *("start_ns", "end_ns", "bytes", "copy_kind", "src_kind", "dst_kind"),
    ),
    "api_calls": ("op_id", "name", "process_id", "thread_id", "start_ns", "end_ns"),
    "memory": tuple(dict.fromkeys([*MEMORY_COLUMNS, "step", "total_allocated", *PEAK_COLUMNS])),
}


def present(report: DatasetTables, wanted: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """``wanted``, without the columns the report's files lack (a dataset of an older nvbridge)."""
    out = {}
    for name, columns in wanted.items():
        have = set(report.column_names(name))
        out[name] = [c for c in columns if c in have]
    return out


def advise_tables(path: str | os.PathLike[str]) -> DatasetTables:
    """A dataset with only ADVISE_COLUMNS of its large tables, or a profiler database converted
    in memory (whole: a conversion builds every column anyway).

    Raises:
        InputError, ExportError, DamagedDataset: as :func:`nvbridge.conversion.memory.load_tables`.
    """
    if not os.path.isdir(path):
        return load_tables(path)
    # opened streamed first: the same checks as a whole read (files, contract columns), no table read
    files = load_tables(path, streamed=True)
    report = load_tables(path, present(files, ADVISE_COLUMNS), in_order=False)
    meta, tables = report.meta, {name: report.table(name) for name in TABLES}
    del report, files
    for name in ADVISE_COLUMNS:
        tables[name] = _one_chunk_each(tables, name)
    return DatasetTables(meta, tables)


def _one_chunk_each(tables: dict[str, pa.Table], name: str) -> pa.Table:
    """Table ``name`` (taken out of ``tables``) with each column in one chunk, the ops in op_id
    order, built a column at a time: a whole-table ``take`` held two copies of the ops (1.1 GB
    each at 10M rows), and a column of many row groups is copied again by every ``np_col``."""
    table = tables.pop(name)
    order = None
    if name == "ops" and table.num_rows > 1:
        op_id = np_col(table, "op_id")
        if (op_id[1:] < op_id[:-1]).any():  # as nvbridge.dataset.files sorts them
            order = pa.array(op_id.argsort(kind="stable"))
        del op_id
    schema, columns = table.schema, table.columns
    del table  # each old column is freed as its copy is made
    for i, column in enumerate(columns):
        if order is not None:
            column = column.take(order)
        one = one_chunk(column)
        if pa.types.is_string(one.type):
            # the ops' names, modules, shapes and dtypes repeat: dictionary-encoded once sorted, the
            # codes are the ones nvbridge.analysis.context.codes gives the strings (first seen
            # first), and 10M op names take 0.04 GB instead of 0.17 GB
            one = pc.dictionary_encode(one)
            schema = schema.set(i, schema.field(i).with_type(one.type))
        columns[i] = pa.chunked_array([one], one.type)
        del column, one
    return pa.Table.from_arrays(columns, schema=schema)
