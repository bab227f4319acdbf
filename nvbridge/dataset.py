"""``load``: a converted dataset (or a report, converted in memory) as Arrow/pandas tables."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from nvbridge import analysis
from nvbridge._version import __version__
from nvbridge.engine import Model, correlate
from nvbridge.events import EventsMixin
from nvbridge.export import parquet


class Report(EventsMixin):
    """The tables of one converted report.

    Attributes ``ops``, ``gpu_ops``, ``api_calls``, ``marks``, ``syncs``, ``threads`` and
    ``devices`` are Arrow tables (columns in docs/dataset.md); ``meta`` is the key/value
    description of the source. ``df(name)`` gives a table as a pandas DataFrame.
    """

    def __init__(self, meta: dict[str, str | None], tables: dict[str, pa.Table]) -> None:
        self.meta = meta
        self._tables = tables
        self.ops = tables["ops"]
        self.gpu_ops = tables["gpu_ops"]
        self.api_calls = tables["api_calls"]
        self.marks = tables["marks"]
        self.syncs = tables["syncs"]
        self.threads = tables["threads"]
        self.devices = tables["devices"]

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0,
                     group_by_module: bool = False, top_level_events_only: bool = False,
                     device: int | None = None) -> analysis.KeyAverages:
        """Ops grouped like torch's ``key_averages``; ``.table(sort_by=..., row_limit=...)`` prints it."""
        return analysis.key_averages(
            self.ops, self.gpu_ops, group_by_input_shape=group_by_input_shape,
            group_by_stack_n=group_by_stack_n, group_by_module=group_by_module,
            top_level_events_only=top_level_events_only, device=device)

    def gpu_summary(self) -> list[dict[str, Any]]:
        """Per device: busy and idle time, kernel count, copy volume by direction."""
        return analysis.gpu_header(self.gpu_ops, self.devices)

    def df(self, name: str) -> Any:
        """Table ``name`` as a pandas DataFrame (needs pandas); names come as plain strings,
        not categoricals, although Arrow keeps them dictionary-encoded."""
        table = self._tables[name]
        schema = pa.schema([pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f
                            for f in table.schema])
        return table.cast(schema).to_pandas()

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v.num_rows}" for k, v in self._tables.items())
        return f"<nvbridge.Report {self.meta.get('source')}: {counts}>"


def load(path: str | os.PathLike[str], columns: Mapping[str, Sequence[str]] | None = None,
         in_order: bool = True) -> Report:
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
    """
    p = Path(os.fspath(path))
    if p.is_dir():
        meta, tables = parquet.read(p, columns, in_order)
        return Report(meta, tables)
    from nvbridge.readers import read_profile

    return from_model(correlate(read_profile(path)))


def from_model(model: Model) -> Report:
    """A Report over an in-memory model (what a conversion is about to write)."""
    meta_t = parquet.meta_table(model.info, {name: getattr(model, name).num_rows for name in parquet.TABLES},
                                __version__)
    meta = dict(zip(meta_t.column("key").to_pylist(), meta_t.column("value").to_pylist()))
    return Report(meta, {name: getattr(model, name) for name in parquet.TABLES})


def is_partitioned(path: str | os.PathLike[str]) -> bool:
    """A directory of ``report=<name>/`` datasets (what converting several reports writes)."""
    p = Path(os.fspath(path))
    return p.is_dir() and not (p / "meta.parquet").is_file() and any(p.glob("report=*/meta.parquet"))


def report_dirs(path: str | os.PathLike[str]) -> list[Path]:
    """The report directories of a partitioned dataset, by rank where known, then by name;
    only their meta tables are read."""
    def key(d: Path) -> tuple[int, str]:
        meta = parquet.read_meta(d)
        rank = meta.get("rank")
        return (int(rank) if rank not in (None, "None") else 1 << 30, str(meta.get("source")))
    dirs = [d for d in Path(os.fspath(path)).glob("report=*") if (d / "meta.parquet").is_file()]
    return sorted(sorted(dirs), key=key)


def load_many(path: str | os.PathLike[str]) -> list[Report]:
    """Every report of a partitioned dataset, in :func:`report_dirs` order (all in memory at
    once: to go through thousands, load the directories one at a time)."""
    return [load(d) for d in report_dirs(path)]
