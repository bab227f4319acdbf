"""Each device's live bytes over time, by category, reduced to a picture's width: what
``plot --memory`` draws and the report page's memory chart shows.

The memory table (the columns the categories need) is read whole and put in time order (the categories need each block's
allocation and free together: nvbridge.analysis.memory_categories); the curves keep, in each
pixel column, the event with the highest total, so the peak is always among the points.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.analysis.memory import memory_rows
from nvbridge.analysis.memory_categories import (
    CATEGORIES,
    MEMORY_COLUMNS,
    OPS_COLUMNS,
    Blocks,
    categorize,
    columns_of,
    row_categories,
)
from nvbridge.columns import np_col
from nvbridge.dataset.schema import ReportTables
from nvbridge.errors import ExportError


@dataclass(frozen=True)
class Categorized:
    """A report's memory rows in time order, their blocks, and each row's category."""

    memory: pa.Table
    blocks: Blocks
    rows: np.ndarray  # category of each row (-1: its block's allocation was not seen)


def categorized(report: ReportTables) -> Categorized:
    """The report's memory, categorized.

    Raises:
        ExportError: the report recorded no allocator events.
    """
    if not memory_rows(report):
        raise ExportError(
            "the report has no memory events to plot; record with nvbridge.emit_nvtx(profile_memory=True) "
            "(or nsys --cuda-memory-usage=true)."
        )
    memory = columns_of(report, "memory", [*MEMORY_COLUMNS, "total_allocated"])
    memory = memory.take(pa.array(np.lexsort((np.arange(memory.num_rows), np_col(memory, "ts_ns")))))
    blocks = categorize(memory, columns_of(report, "ops", OPS_COLUMNS))
    return Categorized(memory, blocks, row_categories(memory, blocks))


def columns_kept(ts: np.ndarray, total: np.ndarray, lo: int, hi: int, width_px: int) -> np.ndarray:
    """Rows to draw (sorted by time): in each pixel column of [lo, hi], the row of the highest
    total (the first of equals), so no peak is lost to the reduction."""
    inside = np.flatnonzero((ts >= lo) & (ts <= hi))
    if not len(inside):
        return inside
    col = ((ts[inside] - lo) * (width_px - 1) // max(hi - lo, 1)).astype(np.int64)
    order = np.lexsort((np.arange(len(inside)), -total[inside], col))
    first = np.r_[True, col[order][1:] != col[order][:-1]]
    return np.sort(inside[order][first])


@dataclass(frozen=True)
class Curves:
    """One device's drawn points: times, the allocator's total after each, and each category's
    live bytes after each (CATEGORIES order)."""

    ts: np.ndarray
    total: np.ndarray
    live: dict[str, np.ndarray]


def curves(c: Categorized, device: str, lo: int, hi: int, width_px: int) -> Curves:
    """``device``'s points in [lo, hi], at most ``width_px`` of them."""
    memory = c.memory
    mine = pc.equal(memory.column("device").cast(pa.string()), device).to_numpy(zero_copy_only=False)
    ts, size = np_col(memory, "ts_ns")[mine], np_col(memory, "bytes")[mine]
    total = np_col(memory, "total_allocated", fill=0)[mine]
    cat = c.rows[mine]
    keep = columns_kept(ts, total, lo, hi, width_px)
    live = {name: np.cumsum(np.where(cat == i, size, 0))[keep] for i, name in enumerate(CATEGORIES)}
    return Curves(ts[keep], total[keep], live)
