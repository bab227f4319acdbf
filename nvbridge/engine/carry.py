"""What the engine keeps between windows and orders within one: the tree ranges still open at a
window's cut (:class:`Carried`) and a window's API calls in start order (:class:`Calls`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col, take_sorted
from nvbridge.engine import memory, semantics
from nvbridge.engine import window as steps
from nvbridge.engine.activity import ProcessKeys


@dataclass(slots=True)
class Carried:
    """Tree ranges still open at a window's end, carried into the next window."""

    raw: pa.Table
    op_id: np.ndarray
    sums: dict[str, np.ndarray]
    gpu_first: np.ndarray
    gpu_last: np.ndarray
    parsed: pa.Table
    links: semantics.Links
    kernel_dtype: np.ndarray  # nvbridge.engine.costs.kernel_dtypes codes of the kernels in each subtree so far

    @classmethod
    def of(
        cls,
        rows: steps.Rows,
        sums: steps.Sums,
        state: pa.Table,
        links: semantics.Links,
        codes: np.ndarray,
        carry: np.ndarray,
    ) -> Carried:
        """The rows ``carry`` of a window (its first rows are the ones carried into it)."""
        # Compact copies: slices would keep this window's buffers alive.
        return cls(
            take_sorted(rows.raw, carry).combine_chunks(),
            rows.op_id[carry],
            {name: values[carry] for name, values in sums.values.items()},  # memory's too, if any
            sums.gpu_first[carry],
            sums.gpu_last[carry],
            take_sorted(state, carry).combine_chunks(),
            links.take(carry),
            codes[carry],
        )

    def add_to(self, sums: steps.Sums, codes: np.ndarray, parsed: pa.Table) -> pa.Table:
        """Add what the carried ranges had to the next window's first rows (``sums``, ``codes``,
        in place: the carried ranges come first in it); the window's parsed names after theirs."""
        k = len(self.op_id)
        for name in steps.SUMS:
            sums.values[name][:k] += self.sums[name]
        if memory.USAGE[0] in self.sums:
            memory.compose(sums.values, self.sums, k)
        sums.gpu_first[:k] = np.minimum(sums.gpu_first[:k], self.gpu_first)
        sums.gpu_last[:k] = np.maximum(sums.gpu_last[:k], self.gpu_last)
        codes[:k] = np.minimum(codes[:k], self.kernel_dtype)
        return pa.concat_tables([self.parsed, parsed]).combine_chunks()


class Calls:
    """A window's API calls in start order (``order``; None: as they came), with their keys."""

    def __init__(self, api: pa.Table, order: np.ndarray | None, keys: ProcessKeys) -> None:
        self._api = api
        self.order = order
        self.start = self.by_start("start_ns")
        self.end = np.maximum(self.by_start("end_ns"), self.start)
        self.key = keys.of(self.by_start("process_key", 0), self.by_start("correlation_id", -1))
        self.id = self.by_start("api_call_id")

    def by_start(self, name: str, fill: int | None = None) -> np.ndarray:
        values = np_col(self._api, name, fill)
        return values if self.order is None else values[self.order]


def one_chunk_each(table: pa.Table) -> pa.Table:
    """``table`` with one chunk per column (a window's held-back rows and the rest come as two),
    copied only if it has more."""
    return table.combine_chunks() if any(c.num_chunks > 1 for c in table.columns) else table


def start_order(start: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
    """The order of API calls by start, ties by id; None when they are in it already (exports
    list them so, mostly)."""
    if len(start) < 2 or ((np.diff(start) > 0) | ((np.diff(start) == 0) & (np.diff(ids) > 0))).all():
        return None
    return np.lexsort((ids, start))
