"""``load``: a converted dataset (or a report, converted in memory) as Arrow/pandas tables."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from nvbridge.dataset.check import check_dataset, check_rows, fix
from nvbridge.dataset.check import is_partitioned as is_partitioned  # part of this module's API
from nvbridge.dataset.check import read_meta as read_meta
from nvbridge.dataset.events import EventIndex, FunctionEvent
from nvbridge.dataset.files import Files, Window, read
from nvbridge.dataset.ranks import recorded_ranks
from nvbridge.dataset.schema import TABLES
from nvbridge.errors import DamagedDataset, MissingDependency


def parse_rank(value: str | None) -> int | None:
    """The rank recorded in a dataset's meta (text), or None where none was recorded."""
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


SomeTables = TypeVar("SomeTables", bound="DatasetTables")


class DatasetTables:
    """The tables of one converted report, read from its dataset folder (whole, or a row group at
    a time) or held from a conversion in memory; one implementation of the protocol
    :class:`nvbridge.dataset.schema.ReportTables` (``nvbridge.Report`` adds torch's answers).

    Attributes ``ops``, ``gpu_ops``, ``api_calls``, ``marks``, ``syncs``, ``threads``,
    ``devices`` and ``memory`` are Arrow tables (columns in docs/dataset.md); ``meta`` is the key/value
    description of the source, ``rank`` its distributed rank where one was recorded.
    ``df(name)`` gives a table as a pandas DataFrame. A report opened with
    ``load(..., streamed=True)`` reads a table when it is first asked for, and ``chunks``
    reads it a row group at a time instead.
    """

    def __init__(self, meta: dict[str, str | None], tables: Mapping[str, pa.Table], files: Files | None = None) -> None:
        self.meta = meta
        self.rank = parse_rank(meta.get("rank"))
        self.recorded_ranks = recorded_ranks(meta)  # the rank, or each process's (rank marks)
        self._tables = dict(tables)
        self._files = files

    @classmethod
    def view(cls: type[SomeTables], tables: DatasetTables) -> SomeTables:
        """The same tables (shared, not copied), as an instance of ``cls``."""
        return cls(tables.meta, tables._tables, tables._files)

    def table(self, name: str) -> pa.Table:
        """Table ``name`` whole (read now, if the report was opened streamed)."""
        if name not in self._tables and self._files is not None:
            self._tables[name] = self._files.read(name)
        return self._tables[name]

    @property
    def ops(self) -> pa.Table:
        return self.table("ops")

    @property
    def gpu_ops(self) -> pa.Table:
        return self.table("gpu_ops")

    @property
    def api_calls(self) -> pa.Table:
        return self.table("api_calls")

    @property
    def marks(self) -> pa.Table:
        return self.table("marks")

    @property
    def syncs(self) -> pa.Table:
        return self.table("syncs")

    @property
    def threads(self) -> pa.Table:
        return self.table("threads")

    @property
    def devices(self) -> pa.Table:
        return self.table("devices")

    @property
    def memory(self) -> pa.Table:
        """The allocator events (docs/dataset.md; no rows where the report has none)."""
        return self.table("memory")

    def rows(self, name: str) -> int:
        """Rows of table ``name``, without reading it."""
        if name in self._tables or self._files is None:
            return int(self._tables[name].num_rows)
        return self._files.rows(name)

    def column_names(self, name: str) -> list[str]:
        """Columns of table ``name``, without reading it."""
        if name in self._tables or self._files is None:
            return list(self._tables[name].column_names)
        return self._files.column_names(name)

    def all_null(self, name: str, column: str) -> bool:
        """Whether ``column`` of table ``name`` holds only nulls (from statistics where it can)."""
        if name in self._tables or self._files is None:
            return bool(self._tables[name].column(column).null_count == self._tables[name].num_rows)
        return self._files.nulls(name, column) == self._files.rows(name)

    def later_starts(self, name: str) -> list[int | None]:
        """For each part :meth:`chunks` yields (without a window), the least ``start_ns`` of
        all parts after it, from the row groups' statistics (None: unknown, or none after)."""
        if name in self._tables or self._files is None:
            return [None]
        firsts = self._files.first_starts(name)
        out: list[int | None] = [None] * len(firsts)
        low: int | None = None  # the least first start of the parts after i-1, while all are known
        for i in range(len(firsts) - 1, 0, -1):
            first = firsts[i]
            if first is None:
                break  # unknown from here back: nothing can be settled early
            low = first if low is None else min(first, low)
            out[i - 1] = low
        return out

    def chunks(self, name: str, columns: Sequence[str], window: Window = (None, None)) -> Iterator[pa.Table]:
        """Table ``name`` with only ``columns``, in parts: a row group at a time (checked as it
        is read) if the report was opened streamed and the table not read yet, else whole.
        ``window`` (start_ns, end_ns) lets a streamed read skip row groups entirely outside it."""
        if name in self._tables or self._files is None:
            yield self._tables[name].select(list(columns))
        else:
            yield from self._files.chunks(name, columns, window)

    @cached_property
    def _event_index(self) -> EventIndex:
        return EventIndex(self.ops, self.gpu_ops)

    def events(self) -> Iterator[FunctionEvent]:
        """Every op as a FunctionEvent view, in op_id order."""
        index = self._event_index
        return (FunctionEvent(index, i) for i in range(self.ops.num_rows))

    def df(self, name: str) -> Any:
        """Table ``name`` as a pandas DataFrame (needs pandas); names come as plain strings,
        not categoricals, although Arrow keeps them dictionary-encoded.

        Raises:
            MissingDependency: pandas is not installed.
        """
        try:
            import pandas  # noqa: F401  (to_pandas needs it)
        except ImportError as exc:
            raise MissingDependency("Report.df needs pandas; install it with: pip install pandas") from exc
        table = self.table(name)
        schema = pa.schema(
            [pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in table.schema]
        )
        return table.cast(schema).to_pandas()

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={self.rows(k)}" for k in TABLES if k in self._tables or self._files)
        return f"<{type(self).__name__} {self.meta.get('source')}: {counts}>"


def load(
    path: str | os.PathLike[str],
    columns: Mapping[str, Sequence[str]] | None = None,
    in_order: bool = True,
    *,
    streamed: bool = False,
) -> DatasetTables:
    """Open a dataset written by ``nvbridge convert`` (a report is converted in memory above this
    layer: nvbridge.conversion.memory.load_tables, which ``nvbridge.load`` calls).

    Args:
        path: a dataset directory.
        columns: read only these columns of these tables (a table
            not named is read whole), e.g. :data:`nvbridge.analysis.SUMMARY_COLUMNS`.
        in_order: ops in op_id order (the default); False skips the sort, for the summary
            tables, which do not need it.
        streamed: check its files now but read no table: each is
            read when first asked for, or a row group at a time by ``Report.chunks`` (what
            ``summary`` and ``plot`` do, so their memory does not grow with the report).

    Raises:
        ExportError: ``path`` is not an nvbridge dataset.
        DamagedDataset: a dataset file missing, unreadable, of another schema, or with rows a
            conversion never writes.
    """
    p = Path(os.fspath(path))
    if p.is_dir() and streamed:
        meta = check_dataset(p, TABLES, columns or {})
        return DatasetTables(meta, {}, Files(p, columns or {}, in_order))
    return _read_dataset(p, columns or {}, in_order)


def _read_dataset(directory: Path, columns: Mapping[str, Sequence[str]], in_order: bool) -> DatasetTables:
    check_dataset(directory, TABLES, columns)
    try:
        meta, tables = read(directory, columns, in_order)
    except (OSError, pa.ArrowException) as exc:  # damage inside a file whose footer reads
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise DamagedDataset(f"{directory} cannot be read ({detail}); {fix(directory)}.") from exc
    check_rows(directory, tables)
    return DatasetTables(meta, tables)


def report_dirs(path: str | os.PathLike[str]) -> list[Path]:
    """The report directories of a partitioned dataset, by rank where known, then by name;
    only their meta tables are read."""

    def key(d: Path) -> tuple[int, str]:
        meta = read_meta(d)
        rank = parse_rank(meta.get("rank"))
        return (rank if rank is not None else 1 << 30, str(meta.get("source")))

    dirs = [d for d in Path(os.fspath(path)).glob("report=*") if d.is_dir()]  # one without meta: an error
    return sorted(sorted(dirs), key=key)
