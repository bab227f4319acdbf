"""A dataset's table files, read a row group at a time with only the columns asked for.

What lets ``summary`` and ``plot`` hold one row group of a table (131,072 rows) instead of the
whole table, whatever the report's size. Each part read is checked as ``dataset.load`` checks a
whole table (no row ending before it starts or lacking an end), and a damaged part is one line
naming the file and the fix.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nvbridge.columns import np_col
from nvbridge.dataset.check import TIMED, bad_intervals, bad_rows, check_intervals, fix, read_meta_file
from nvbridge.dataset.dictionaries import compact_table
from nvbridge.dataset.schema import OPTIONAL, SCHEMAS, TABLES
from nvbridge.errors import DamagedDataset

Window = tuple[int | None, int | None]  # [start_ns, end_ns]; None: open on that side


class Files:
    """The tables of the one-report dataset ``directory`` (already checked by
    ``dataset_check.check_dataset``), opened when first asked for."""

    def __init__(self, directory: Path, columns: Mapping[str, Sequence[str]], in_order: bool = True) -> None:
        self.directory = directory
        self.columns = columns  # what a whole read of each table holds (a table not named: all)
        self.in_order = in_order  # a whole read of the ops puts them in op_id order
        self._files: dict[str, pq.ParquetFile] = {}

    def _file(self, name: str) -> pq.ParquetFile:
        if name not in self._files:
            with self._reading(name):
                self._files[name] = pq.ParquetFile(self.directory / f"{name}.parquet")
        return self._files[name]

    def absent(self, name: str) -> bool:
        """A table the dataset predates (schema.OPTIONAL): read as the declared table, no rows."""
        return absent(self.directory, name)

    def _reading(self, name: str) -> ReadErrors:
        return ReadErrors(self.directory, name)

    def rows(self, name: str) -> int:
        return 0 if self.absent(name) else int(self._file(name).metadata.num_rows)

    def column_names(self, name: str) -> list[str]:
        return list(SCHEMAS[name].names) if self.absent(name) else list(self._file(name).schema_arrow.names)

    def first_starts(self, name: str) -> list[int | None]:
        """Per row group, its least ``start_ns`` as its statistics record it (None: unknown)."""
        if self.absent(name):
            return []
        pf = self._file(name)
        if "start_ns" not in pf.schema_arrow.names:
            return [None] * pf.metadata.num_row_groups
        column = pf.schema_arrow.names.index("start_ns")
        out: list[int | None] = []
        for i in range(pf.metadata.num_row_groups):
            stats = pf.metadata.row_group(i).column(column).statistics
            out.append(int(stats.min) if stats is not None and stats.has_min_max else None)
        return out

    def nulls(self, name: str, column: str) -> int | None:
        """Nulls in ``column`` of table ``name``, from the row groups' statistics (None: unknown)."""
        if self.absent(name):
            return 0
        pf = self._file(name)
        index = pf.schema_arrow.names.index(column)
        total = 0
        for i in range(pf.metadata.num_row_groups):
            stats = pf.metadata.row_group(i).column(index).statistics
            if stats is None or not stats.has_null_count:
                return None
            total += int(stats.null_count)
        return total

    def read(self, name: str) -> pa.Table:
        """Table ``name`` whole, with the columns ``load`` was asked for (checked as
        ``dataset.load`` checks it)."""
        wanted = list(self.columns[name]) if name in self.columns else None
        if self.absent(name):
            return SCHEMAS[name].empty_table().select(wanted or SCHEMAS[name].names)
        if name == "ops" and wanted is not None and "op_id" not in wanted:
            wanted = ["op_id", *wanted]
        with self._reading(name):
            # Dictionaries cut to what the rows use (a dataset of an older nvbridge holds more).
            table = compact_table(pq.read_table(self.directory / f"{name}.parquet", columns=wanted))
        if name in TIMED and {"start_ns", "end_ns"} <= set(table.column_names):
            check_intervals(self.directory, name, table)
        if name == "ops" and self.in_order and table.num_rows > 1:
            op_id = np_col(table, "op_id")
            if (op_id[1:] < op_id[:-1]).any():
                table = table.take(pa.array(op_id.argsort(kind="stable")))
        return table

    def chunks(self, name: str, columns: Sequence[str], window: Window = (None, None)) -> Iterator[pa.Table]:
        """Table ``name`` a row group at a time, in file order, with only ``columns``. Row
        groups whose statistics show no row overlapping ``window`` are skipped unread (and so
        unchecked: pass a window only for a table already read whole once)."""
        if self.absent(name):
            yield SCHEMAS[name].empty_table().select(list(columns))
            return
        pf = self._file(name)
        checked = name in TIMED and {"start_ns", "end_ns"} <= set(columns)
        if not pf.metadata.num_row_groups:  # an empty table: one empty part, so readers see its columns
            yield pf.schema_arrow.empty_table().select(list(columns))
        for i in range(pf.metadata.num_row_groups):
            if outside_window(pf.metadata.row_group(i), window):
                continue
            with self._reading(name):
                chunk = compact_table(pf.read_row_group(i, columns=list(columns)))
            if checked and bad_intervals(chunk):
                self._refuse(name, pf, i)
            yield chunk

    def _refuse(self, name: str, pf: pq.ParquetFile, first: int) -> None:
        """Row group ``first`` of ``name`` has bad rows: count them over the rest of the table,
        so the message gives the same count as a check of the whole table."""
        bad = 0
        for i in range(first, pf.metadata.num_row_groups):
            with self._reading(name):
                bad += bad_intervals(pf.read_row_group(i, columns=["start_ns", "end_ns"]))
        raise bad_rows(self.directory, name, bad)


def absent(directory: Path, name: str) -> bool:
    """Table ``name`` is one the dataset predates (schema.OPTIONAL) and has no file of."""
    return name in OPTIONAL and not (directory / f"{name}.parquet").exists()


def outside_window(row_group: pq.RowGroupMetaData, window: Window) -> bool:
    """The row group's statistics show no row overlapping the window."""
    start_ns, end_ns = window
    if start_ns is None and end_ns is None:
        return False
    stats = {row_group.column(i).path_in_schema: row_group.column(i).statistics for i in range(row_group.num_columns)}
    first, last = stats.get("start_ns"), stats.get("end_ns")
    if first is None or last is None or not first.has_min_max or not last.has_min_max:
        return False
    return bool((end_ns is not None and first.min > end_ns) or (start_ns is not None and last.max < start_ns))


class ReadErrors:
    """Arrow's and the file system's errors on a dataset file as one line naming the file and
    the fix."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory, self.path = directory, directory / f"{name}.parquet"

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, FileNotFoundError):
            raise DamagedDataset(f"{self.path} is missing; {fix(self.directory)}.") from exc
        if isinstance(exc, (pa.ArrowException, OSError)):
            detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            raise DamagedDataset(f"{self.path} cannot be read ({detail}); {fix(self.directory)}.") from exc


def read(
    directory: Path,
    columns: Mapping[str, Sequence[str]] | None = None,
    in_order: bool = True,
) -> tuple[dict[str, str | None], dict[str, pa.Table]]:
    """Read a whole dataset (nvbridge.export.parquet writes it): (meta, tables).

    Args:
        columns: per table, the only columns to read (a table not named is read whole); the
            ops are always read with ``op_id``.
        in_order: put the ops in op_id order (a copy of the ops when a streamed conversion
            wrote some out of order); False for readers that do not need it.

    Raises:
        ExportError: ``directory`` is not an nvbridge dataset, or one of a newer schema.
    """
    meta = read_meta_file(directory)
    wanted = dict(columns or {})
    if "ops" in wanted and "op_id" not in wanted["ops"]:
        wanted["ops"] = ["op_id", *wanted["ops"]]
    # Compacted as read: a dataset written before dictionaries were compacted holds the export's
    # whole string table in them.
    tables = {
        name: SCHEMAS[name].empty_table().select(list(wanted.get(name, SCHEMAS[name].names)))
        if absent(directory, name)
        else compact_table(
            pq.read_table(directory / f"{name}.parquet", columns=list(wanted[name]) if name in wanted else None)
        )
        for name in TABLES
    }
    # A streamed conversion writes a range that stayed open across windows after later ops:
    # hand the ops back in op_id order.
    op_id = np_col(tables["ops"], "op_id")
    if in_order and len(op_id) > 1 and (op_id[1:] < op_id[:-1]).any():
        tables["ops"] = tables["ops"].take(pa.array(op_id.argsort(kind="stable")))
    return meta, tables
