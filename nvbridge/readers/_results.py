"""Database.reading's results: tables that may still be reading (readers/_db.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from typing import Any

import pyarrow as pa


class Results(Mapping[str, pa.Table]):
    """Tables that may still be reading: an item waits for its own query only."""

    def __init__(self, items: dict[str, Any]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> pa.Table:
        item = self._items[key]
        table: pa.Table = item.result() if isinstance(item, Future) else item
        return table

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
