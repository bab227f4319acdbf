"""Memory categories (nvbridge/analysis/memory_categories.py): each block's category, and each
category's bytes at the peak, against what the test labels by hand."""

from __future__ import annotations

import pyarrow as pa
import pytest

from nvbridge.analysis.memory_categories import CATEGORIES, categorize
from tests.memory_fake import FLOAT, mlp_adam


def _peak(memory: pa.Table) -> int:
    rows = memory.to_pylist()
    top = max(r["total_allocated"] for r in rows)
    return int(min(r["ts_ns"] for r in rows if r["total_allocated"] == top))


@pytest.mark.parametrize("set_to_none", [True, False])
def test_every_block_in_its_labelled_category(set_to_none: bool) -> None:
    fake = mlp_adam(layers=3, batch=5, width=8, steps=3, set_to_none=set_to_none)
    ops, memory = fake.tables()
    blocks = categorize(memory, ops).table.to_pylist()
    got = {b["address"]: CATEGORIES[b["category"]] for b in blocks}
    assert got == fake.truth


def test_bytes_at_the_peak_by_category_from_shapes() -> None:
    layers, batch, width = 4, 6, 10
    fake = mlp_adam(layers=layers, batch=batch, width=width, steps=3, set_to_none=False)
    ops, memory = fake.tables()
    at = _peak(memory)
    got = categorize(memory, ops).bytes_by_category(at, "cpu")
    params = layers * (width * width + width) * FLOAT
    assert got["parameter"] == params
    assert got["gradient"] == params  # kept across steps (set_to_none=False)
    assert got["optimizer_state"] == 2 * params + 2 * layers * FLOAT  # exp_avg, exp_avg_sq, step
    # the peak is in the backward's first node: every ReLU output still saved
    assert got["activation"] == layers * batch * width * FLOAT
    assert sum(got.values()) == max(memory.column("total_allocated").to_pylist())
