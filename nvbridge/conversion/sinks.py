"""Where a conversion's rows go (:class:`nvbridge.conversion.pipeline.Sink`): the dataset's
Parquet files, or tables in memory (``nvbridge.load`` of a report)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from nvbridge._version import __version__
from nvbridge.columns import np_col, set_column
from nvbridge.conversion.result import with_marked_ranks
from nvbridge.dataset.dictionaries import compact_table
from nvbridge.engine import WindowRows
from nvbridge.engine.memory import no_rows as memory_no_rows
from nvbridge.export import parquet
from nvbridge.readers.raw import SourceInfo, WindowSource

# The tables written as windows finish them; the others come whole at the end.
STREAMED = ("ops", "api_calls", "gpu_ops", "memory")


class ParquetSink:
    """The dataset's files in ``directory``: ops, api_calls and gpu_ops written in row groups of
    ROW_GROUP_ROWS as their rows become final, the small tables and meta at the end."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._out: dict[str, _Grouped] = {}
        self._info: SourceInfo | None = None
        self._frees: list[pa.Table] = []

    def start(self, source: WindowSource, info: SourceInfo) -> None:
        self._info = info
        # Windows' rows regrouped into row groups of ROW_GROUP_ROWS: a row group per window cost
        # 2-7 ms of encoder set-up each (a compressor and a dictionary per column chunk).
        self._out = {name: _Grouped(self.directory / f"{name}.parquet") for name in STREAMED}
        self._frees = []

    def rows(self, rows: WindowRows) -> None:
        for name in STREAMED:
            self._out[name].write([t] if (t := _rows(rows, name)) is not None else [])
        if rows.memory_frees is not None and rows.memory_frees.num_rows:
            self._frees.append(rows.memory_frees)

    def finish(self, tables: dict[str, pa.Table]) -> None:
        assert self._info is not None, "finish before start"
        writers = {name: out.writer for name, out in self._out.items()}
        try:
            for out in self._out.values():
                out.write([], last=True)
        finally:
            self._close()
        written = {name: writer.rows for name, writer in writers.items()}  # once every write is done
        if self._frees:
            write_frees(self.directory / "memory.parquet", pa.concat_tables(self._frees))
            self._frees = []
        for name, table in tables.items():
            parquet.write_table(table, self.directory / f"{name}.parquet")
        info = with_marked_ranks(self._info, tables.get("marks"))  # the ranks the processes marked
        parquet.write_meta(self.directory, info, {**written, **{n: t.num_rows for n, t in tables.items()}}, __version__)

    def _close(self) -> None:
        """Close every writer even when one fails (see TableWriter.close); the first failure is raised."""
        first: BaseException | None = None
        for out in self._out.values():
            try:
                out.writer.close()
            except BaseException as exc:  # raised below, once all are closed
                first = first or exc
        self._out = {}
        if first is not None:
            raise first

    def abort(self) -> None:
        """Close the writers and remove every file of the run."""
        with contextlib.suppress(Exception):
            self._close()
        for part in self.directory.iterdir():
            part.unlink()


class _Grouped:
    """ops, api_calls or gpu_ops, written in row groups of ROW_GROUP_ROWS rows as they become
    final; a table that got no rows is written without rows, with the columns it came with."""

    def __init__(self, path: Path) -> None:
        self.writer = parquet.TableWriter(path)
        self._schema: pa.Schema | None = None
        self._held: list[pa.Table] = []
        self._rows = 0
        self._written = False

    def write(self, tables: list[pa.Table], last: bool = False) -> list[pa.Table]:
        """Hold ``tables``; write the full row groups among the rows held (``last``: all of
        them). Returns the row groups written."""
        if self._schema is None and tables:
            self._schema = tables[0].schema
        # A column may change type between windows (a domain named only in later ones): the
        # first table's types hold for the file, as TableWriter casts.
        self._held += [t if t.schema == self._schema else t.cast(self._schema) for t in tables if t.num_rows]
        self._rows += sum(t.num_rows for t in tables)
        size = parquet.ROW_GROUP_ROWS
        if self._rows < size and not (last and self._rows):
            if last and not self._written:
                # The file still holds the table's schema.
                self.writer.write(pa.schema(self._schema or []).empty_table())
                self._written = True
            return []
        held = pa.concat_tables(self._held) if len(self._held) > 1 else self._held[0]
        stop = self._rows if last else self._rows - self._rows % size
        groups = [held.slice(i, min(size, stop - i)) for i in range(0, stop, size)]
        for group in groups:
            self.writer.write(group)
        self._held = [held.slice(stop)] if stop < self._rows else []
        self._rows -= stop
        self._written = True
        return groups


class MemorySink:
    """The tables in memory, one chunk a column, the ops in op_id order, dictionaries cut to
    what the rows use as a conversion writes them (never the export's whole string table: its
    environment, host names, paths)."""

    def __init__(self) -> None:
        self.info: SourceInfo | None = None
        self._parts: dict[str, list[pa.Table]] = {}
        self._frees: list[pa.Table] = []
        self.tables: dict[str, pa.Table] = {}

    def start(self, source: WindowSource, info: SourceInfo) -> None:
        self.info = info
        self._parts = {name: [] for name in STREAMED}
        self._frees = []

    def rows(self, rows: WindowRows) -> None:
        for name in STREAMED:
            if (table := _rows(rows, name)) is not None:
                self._parts[name].append(table)
        if rows.memory_frees is not None and rows.memory_frees.num_rows:
            self._frees.append(rows.memory_frees)

    def finish(self, tables: dict[str, pa.Table]) -> None:
        if self.info is not None:
            self.info = with_marked_ranks(self.info, tables.get("marks"))  # the ranks the processes marked
        if not self._parts["memory"]:
            self._parts["memory"] = [memory_no_rows()[0]]
        whole = {name: _concat(parts) for name, parts in self._parts.items()}
        if self._frees:
            whole["memory"] = with_frees(whole["memory"], pa.concat_tables(self._frees), 0)
        self._parts, self._frees = {}, []
        # A range open across windows comes out with the window where it closes, after ops
        # with higher ids: back in op_id order, as a dataset is read (nvbridge.dataset.files.read).
        op_id = np_col(whole["ops"], "op_id")
        if len(op_id) > 1 and (op_id[1:] < op_id[:-1]).any():
            whole["ops"] = whole["ops"].take(pa.array(op_id.argsort(kind="stable")))
        self.tables = {name: compact_table(t) for name, t in {**whole, **tables}.items()}

    def abort(self) -> None:
        self._parts, self.tables, self._frees = {}, {}, []


def _rows(rows: WindowRows, name: str) -> pa.Table | None:
    """A window's table ``name`` (the memory rows: also where the engine made none)."""
    table: pa.Table | None = getattr(rows, name)
    return memory_no_rows()[0] if table is None and name == "memory" else table


def with_frees(memory: pa.Table, frees: pa.Table, offset: int) -> pa.Table:
    """Memory rows ``offset``.. with ``free_ns`` set on the allocations freed in later windows
    (``frees``: nvbridge.engine.memory.FREES, sorted by row, possibly beyond these rows)."""
    rows, free_ns = np_col(frees, "row"), np_col(frees, "free_ns")
    lo, hi = np.searchsorted(rows, [offset, offset + memory.num_rows])
    if hi == lo:
        return memory
    values = np_col(memory, "free_ns", fill=-1).copy()
    values[rows[lo:hi] - offset] = free_ns[lo:hi]
    return set_column(memory, "free_ns", pa.array(values, mask=values < 0))


def write_frees(path: Path, frees: pa.Table) -> None:
    """Rewrite the memory table at ``path`` with the frees of later windows in its allocations'
    ``free_ns``, a row group at a time (the file as written, then replaced)."""
    frees = frees.sort_by([("row", "ascending")])
    staged = path.with_name(f".{path.name}.frees")
    writer = parquet.TableWriter(staged)
    try:
        source = pq.ParquetFile(path)
        offset = 0
        for i in range(source.metadata.num_row_groups):
            group = source.read_row_group(i)
            writer.write(with_frees(group, frees, offset))
            offset += group.num_rows
    finally:
        writer.close()
    os.replace(staged, path)


def _concat(parts: list[pa.Table]) -> pa.Table:
    """Parts of one table as one, the first part's types holding (a domain named only later)."""
    if len(parts) == 1:
        return parts[0]
    schema = parts[0].schema
    table = pa.concat_tables([p if p.schema == schema else p.cast(schema) for p in parts])
    return table.unify_dictionaries().combine_chunks()
