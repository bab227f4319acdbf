"""The Parquet dataset: one file per table in a directory, schema versioned in ``meta``.

The columns documented in docs/dataset.md are a contract other tools rely on: add
columns freely, never rename or retype one without bumping DATASET_SCHEMA_VERSION.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nvbridge.correlate import Model
from nvbridge.errors import ExportError
from nvbridge.profile import SourceInfo

DATASET_SCHEMA_VERSION = "1"
TABLES = ("ops", "gpu_ops", "api_calls", "marks", "syncs", "threads", "devices")
# Row groups of this size keep readers' memory bounded and let DuckDB skip by statistics.
ROW_GROUP_ROWS = 1 << 20


def meta_table(info: SourceInfo, model: Model, nvbridge_version: str) -> pa.Table:
    """Key/value rows describing the source and the dataset.

    Only what was detected about the capture is recorded: never its environment variables,
    which real exports carry (tokens, addresses).
    """
    rows: dict[str, str | None] = {
        "dataset_schema_version": DATASET_SCHEMA_VERSION,
        "nvbridge_version": nvbridge_version,
        "converted_at_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    for field in dataclasses.fields(info):
        value = getattr(info, field.name)
        rows[field.name] = None if value is None else str(value)
    for name in TABLES:
        rows[f"rows.{name}"] = str(getattr(model, name).num_rows)
    return pa.table({
        "key": pa.array(list(rows), pa.string()),
        "value": pa.array(list(rows.values()), pa.string()),
    })


def _encodings(schema: pa.Schema) -> dict[str, object]:
    """Integers (times, ids: high cardinality, mostly increasing) are delta-encoded, with
    min/max statistics for row-group skipping; text is dictionary-encoded, without
    statistics (min/max of names skip nothing). At 2M ops this encodes in 0.65 s instead of
    0.95 s, for files 4% larger."""
    ints = [f.name for f in schema if pa.types.is_integer(f.type)]
    return {
        "use_dictionary": [f.name for f in schema if f.name not in ints],
        "column_encoding": dict.fromkeys(ints, "DELTA_BINARY_PACKED"),
        "write_statistics": ints,
    }


def write(model: Model, directory: Path, nvbridge_version: str) -> None:
    """Write every table of ``model`` and ``meta.parquet`` into ``directory`` (must exist).

    Tables are encoded two at a time: Parquet encoding releases the GIL.
    """
    def one(name: str) -> None:
        table = getattr(model, name)
        pq.write_table(table, directory / f"{name}.parquet", compression="zstd",
                       row_group_size=ROW_GROUP_ROWS, **_encodings(table.schema))

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(one, TABLES))
    pq.write_table(meta_table(model.info, model, nvbridge_version), directory / "meta.parquet")


def read(directory: Path) -> tuple[dict[str, str | None], dict[str, pa.Table]]:
    """Read a dataset written by :func:`write`: (meta, tables).

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
    tables = {name: pq.read_table(directory / f"{name}.parquet") for name in TABLES}
    return meta, tables
