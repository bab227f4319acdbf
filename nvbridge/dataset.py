"""``load``: a converted dataset (or a report, converted in memory) as Arrow/pandas tables."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from nvbridge._version import __version__
from nvbridge.dataset_check import check_dataset, check_rows, fix
from nvbridge.dataset_check import is_partitioned as is_partitioned  # part of this module's API
from nvbridge.dataset_check import read_meta as read_meta
from nvbridge.engine import Model, correlate
from nvbridge.errors import DamagedDataset, MissingDependency
from nvbridge.events import EventIndex, FunctionEvent
from nvbridge.export import parquet

if TYPE_CHECKING:  # analysis reads Reports; a Report hands its tables to analysis on demand
    from nvbridge.analysis import GpuHeader, KeyAverages


def parse_rank(value: str | None) -> int | None:
    """The rank recorded in a dataset's meta (text), or None where none was recorded."""
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


class Report:
    """The tables of one converted report.

    Attributes ``ops``, ``gpu_ops``, ``api_calls``, ``marks``, ``syncs``, ``threads`` and
    ``devices`` are Arrow tables (columns in docs/dataset.md); ``meta`` is the key/value
    description of the source, ``rank`` its distributed rank where one was recorded.
    ``df(name)`` gives a table as a pandas DataFrame.
    """

    def __init__(self, meta: dict[str, str | None], tables: dict[str, pa.Table]) -> None:
        self.meta = meta
        self.rank = parse_rank(meta.get("rank"))
        self._tables = tables
        self.ops = tables["ops"]
        self.gpu_ops = tables["gpu_ops"]
        self.api_calls = tables["api_calls"]
        self.marks = tables["marks"]
        self.syncs = tables["syncs"]
        self.threads = tables["threads"]
        self.devices = tables["devices"]

    def key_averages(
        self,
        group_by_input_shape: bool = False,
        group_by_stack_n: int = 0,
        group_by_module: bool = False,
        top_level_events_only: bool = False,
        device: int | None = None,
        unattributed: bool = False,
    ) -> KeyAverages:
        """Ops grouped like torch's ``key_averages``; ``.table(sort_by=..., row_limit=...)`` prints it.
        ``unattributed`` adds a ``[no op]`` row for GPU ops launched outside every op."""
        from nvbridge.analysis import key_averages

        return key_averages(
            self.ops,
            self.gpu_ops,
            group_by_input_shape=group_by_input_shape,
            group_by_stack_n=group_by_stack_n,
            group_by_module=group_by_module,
            top_level_events_only=top_level_events_only,
            device=device,
            unattributed=unattributed,
        )

    def gpu_summary(self) -> list[GpuHeader]:
        """Per device: busy and idle time, kernel count, copy volume by direction."""
        from nvbridge.analysis import gpu_header

        return gpu_header(self.gpu_ops, self.devices)

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
        table = self._tables[name]
        schema = pa.schema(
            [pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in table.schema]
        )
        return table.cast(schema).to_pandas()

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v.num_rows}" for k, v in self._tables.items())
        return f"<nvbridge.Report {self.meta.get('source')}: {counts}>"


def load(
    path: str | os.PathLike[str], columns: Mapping[str, Sequence[str]] | None = None, in_order: bool = True
) -> Report:
    """Open a dataset written by ``nvbridge convert``, or convert a report in memory.

    Args:
        path: a dataset directory, a profiler database file, or an SQLAlchemy URL.
        columns: from a dataset directory, read only these columns of these tables (a table
            not named is read whole), e.g. :data:`nvbridge.analysis.SUMMARY_COLUMNS`.
        in_order: ops in op_id order (the default); False skips the sort, for the summary
            tables, which do not need it.

    Raises:
        InputError: a report that cannot be read.
        ExportError: a directory that is not an nvbridge dataset.
        DamagedDataset: a dataset file missing, unreadable, of another schema, or with rows a
            conversion never writes.
    """
    p = Path(os.fspath(path))
    if p.is_dir():
        return _read_dataset(p, columns or {}, in_order)
    from nvbridge.readers import read_profile

    return from_model(correlate(read_profile(path)))


def from_model(model: Model) -> Report:
    """A Report over an in-memory model (what a conversion is about to write)."""
    meta_t = parquet.meta_table(
        model.info, {name: getattr(model, name).num_rows for name in parquet.TABLES}, __version__
    )
    meta = dict(zip(meta_t.column("key").to_pylist(), meta_t.column("value").to_pylist()))
    return Report(meta, {name: getattr(model, name) for name in parquet.TABLES})


def _read_dataset(directory: Path, columns: Mapping[str, Sequence[str]], in_order: bool) -> Report:
    check_dataset(directory, parquet.TABLES, columns)
    try:
        meta, tables = parquet.read(directory, columns, in_order)
    except (OSError, pa.ArrowException) as exc:  # damage inside a file whose footer reads
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise DamagedDataset(f"{directory} cannot be read ({detail}); {fix(directory)}.") from exc
    check_rows(directory, tables)
    return Report(meta, tables)


def report_dirs(path: str | os.PathLike[str]) -> list[Path]:
    """The report directories of a partitioned dataset, by rank where known, then by name;
    only their meta tables are read."""

    def key(d: Path) -> tuple[int, str]:
        meta = read_meta(d)
        rank = parse_rank(meta.get("rank"))
        return (rank if rank is not None else 1 << 30, str(meta.get("source")))

    dirs = [d for d in Path(os.fspath(path)).glob("report=*") if d.is_dir()]  # one without meta: an error
    return sorted(sorted(dirs), key=key)
