"""Checks of a dataset directory before and after it is read, so a damaged one ends in one line
naming the file and the fix instead of an Arrow error: files present and readable, the
columns the reader needs there with integer types where they hold times and ids, and no row a
conversion never writes (an end before its start, or no start or end)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from nvbridge.dataset.schema import CONTRACT, DATASET_SCHEMA_VERSION, OPTIONAL, SCHEMAS
from nvbridge.errors import DamagedDataset, ExportError
from nvbridge.output.names import check_name

# What a reader of each table can rely on: its *contract* columns (docs/dataset.md lists every column).
REQUIRED: dict[str, tuple[str, ...]] = dict(CONTRACT)
TIMED = ("ops", "gpu_ops", "api_calls")  # tables of intervals: end_ns >= start_ns on every row


def fix(directory: Path) -> str:
    return f"convert the report again with `nvbridge convert REPORT -o {directory} --force`"


def _is_integer_column(table: str, name: str) -> bool:
    """Whether nvbridge.dataset.schema declares column ``name`` of ``table`` an integer."""
    declared = SCHEMAS.get(table)
    return declared is not None and name in declared.names and pa.types.is_integer(declared.field(name).type)


def check_files(directory: Path, tables: Sequence[str], columns: Mapping[str, Sequence[str]]) -> None:
    """Every table file there, readable as Parquet, with the columns to be read."""
    for name in tables:
        path = directory / f"{name}.parquet"
        if name in OPTIONAL and not path.exists():
            continue  # written by an nvbridge older than the table: read without rows
        if not path.is_file():
            raise DamagedDataset(f"{path} is missing; {fix(directory)}.")
        try:
            schema = pq.read_schema(path)
        except (OSError, pa.ArrowException) as exc:
            raise DamagedDataset(
                f"{path} is not a readable Parquet file ({_first_line(exc)}); {fix(directory)}."
            ) from exc
        wanted = tuple(columns[name]) if name in columns else REQUIRED.get(name, ())
        missing = [c for c in wanted if c not in schema.names]
        if missing:
            raise DamagedDataset(
                f"{path} lacks the column{'s' if len(missing) > 1 else ''} "
                f"{', '.join(missing)}: it is not this table of an nvbridge dataset; "
                f"{fix(directory)}."
            )
        wrong = [c for c in wanted if _is_integer_column(name, c) and not pa.types.is_integer(schema.field(c).type)]
        if wrong:
            raise DamagedDataset(f"{path} has {', '.join(wrong)} of another type than integer; {fix(directory)}.")


def check_rows(directory: Path, tables: Mapping[str, pa.Table]) -> None:
    """No interval ends before it starts or lacks an end: such rows would give negative or
    nonsense times with no warning."""
    for name in TIMED:
        table = tables[name]
        if {"start_ns", "end_ns"} <= set(table.column_names):
            check_intervals(directory, name, table)


def check_intervals(directory: Path, name: str, table: pa.Table) -> None:
    """``table`` (all of table ``name`` or a part of it) has no row ending before it starts or
    lacking an end; a reader that streams a dataset checks each part it reads."""
    bad = bad_intervals(table)
    if bad:
        raise bad_rows(directory, name, bad)


def bad_rows(directory: Path, name: str, bad: int) -> DamagedDataset:
    """The error for ``bad`` rows of table ``name`` ending before they start or lacking an end."""
    return DamagedDataset(
        f"{directory / (name + '.parquet')} has {bad:,} row{'s' if bad > 1 else ''} "
        f"whose end_ns is before start_ns or missing, which a conversion never writes; "
        f"{fix(directory)}."
    )


def bad_intervals(table: pa.Table) -> int:
    """Rows of ``table`` ending before they start or lacking a start or end."""
    if not table.num_rows:
        return 0
    start, end = table.column("start_ns"), table.column("end_ns")
    return int(pc.sum(pc.less(end, start)).as_py() or 0) + int(start.null_count) + int(end.null_count)


def check_dataset(
    directory: Path,
    tables: Sequence[str],
    columns: Mapping[str, Sequence[str]],
) -> dict[str, str | None]:
    """The meta of the one-report dataset ``directory``, once its ``tables`` files are there,
    readable and hold ``columns``: a folder of several reports, a damaged meta or table file is
    one line naming it."""
    if is_partitioned(directory):
        parts = sorted(directory.glob("report=*"))
        raise ExportError(
            f"{directory} holds {len(parts)} converted reports; pass one of them, "
            f"e.g. {parts[0]} (`nvbridge summary` reads them all)."
        )
    meta = read_meta(directory)
    check_files(directory, tables, columns)
    return meta


def read_meta(directory: Path) -> dict[str, str | None]:
    """A dataset's meta table, a damaged one (its integers not integers) as DamagedDataset. Its
    path must be one Arrow can open (UTF-8, within PATH_MAX)."""
    check_name(directory, "the dataset", utf8=True)
    try:
        meta = read_meta_file(directory)
    except ExportError:
        raise
    except (OSError, pa.ArrowException, KeyError) as exc:
        raise DamagedDataset(f"{directory / 'meta.parquet'} is not a readable meta table; {fix(directory)}.") from exc
    # A conversion writes these as decimal int64s or not at all; anything else (text, '²') was edited.
    for key, value in meta.items():
        if key in _INTEGER_META or key.startswith("rows."):
            if value is not None and value != "None" and not _int64(value):
                raise DamagedDataset(
                    f"{directory / 'meta.parquet'} gives {key} as {value!r}, not a whole number; {fix(directory)}."
                )
    return meta


def read_meta_file(directory: Path) -> dict[str, str | None]:
    """The ``meta`` key/value table of a dataset (nvbridge.export.parquet writes it).

    Raises:
        ExportError: ``directory`` is not an nvbridge dataset, or one of a newer schema.
    """
    meta_path = directory / "meta.parquet"
    if not meta_path.is_file():
        raise ExportError(
            f"{directory} is not an nvbridge dataset (no meta.parquet); "
            f"create one with `nvbridge convert REPORT -o {directory}`."
        )
    meta_t = pq.read_table(meta_path)
    meta = dict(zip(meta_t.column("key").to_pylist(), meta_t.column("value").to_pylist()))
    version = meta.get("dataset_schema_version")
    if version != DATASET_SCHEMA_VERSION:
        raise ExportError(
            f"{directory} has dataset schema {version}, this nvbridge reads "
            f"{DATASET_SCHEMA_VERSION}; convert the report again or upgrade nvbridge."
        )
    return meta


_INTEGER_META = ("rank", "world_size", "session_start_utc_ns", "capture_end_ns")


def _int64(text: str) -> bool:
    return re.fullmatch(r"-?[0-9]+", text) is not None and -(2**63) <= int(text) < 2**63


def is_partitioned(path: str | os.PathLike[str]) -> bool:
    """A directory of ``report=<name>/`` datasets (what converting several reports writes)."""
    p = Path(os.fspath(path))
    return p.is_dir() and not (p / "meta.parquet").is_file() and any(p.glob("report=*/meta.parquet"))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
