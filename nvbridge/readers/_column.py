"""How a reader declares the raw columns it reads: one ``Column`` per output field.

Shared by the local reader (:mod:`nvbridge.readers._db`) and SQLAlchemy's side
(:mod:`nvbridge.readers._generic`), which therefore never import each other's module state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

ColumnType = Literal["int", "str", "float", "bytes"]
ARROW_TYPES: dict[str, pa.DataType] = {
    "int": pa.int64(),
    "str": pa.string(),
    "float": pa.float64(),
    "bytes": pa.binary(),
}
# Every SQLite table's row id, selectable as a column (a slab's rows carry it for their order).
ROWID = "rowid"


@dataclass(frozen=True, slots=True)
class Column:
    """One output field read from one raw column (or SQL expression) of a profiler table.

    ``raw`` absent from the table: ``required`` columns raise MissingTable, the others
    read as ``default`` (NULL when None), so older exporters load without a crash.
    """

    field: str
    raw: str
    type: ColumnType = "int"
    required: bool = False
    default: int | str | None = None


def lenient_text(raw: bytes) -> str:
    """Text that is not UTF-8 (a corrupted NVTX message) reads with U+FFFD, not an error."""
    return raw.decode("utf-8", "replace")
