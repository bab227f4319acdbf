"""Memory categories (nvbridge/analysis/memory_categories.py): each block's category, and each
category's bytes at the peak, against what the test labels by hand (a made-up loop) and what it
computes from the shapes of a Linear+Adam model recorded under nsys with
emit_nvtx(profile_memory=True), the peak read from the raw NVTX marks with sqlite3."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import nvbridge
from nvbridge.analysis.memory_categories import CATEGORIES, OPS_COLUMNS, categorize
from tests.memory_fake import FLOAT, mlp_adam
from tests.nsys_recorded import record


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


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """scripts/workloads/memory_categories.py under nsys: the database and the workload's shapes."""
    pytest.importorskip("torch", reason="the workload needs torch")
    work = tmp_path_factory.mktemp("categories")
    db = record(work, "scripts.workloads.memory_categories", str(work / "facts.json"))
    return db, json.loads((work / "facts.json").read_text())


def _raw_peak(db: Path) -> tuple[int, int]:
    """(timestamp, total allocated) of the first allocator mark reaching the highest total, read
    from NVTX_EVENTS with sqlite3 (the spec's `mem <device> <address> <bytes> <total> <reserved>`)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT start, text FROM NVTX_EVENTS WHERE text LIKE 'mem %' ORDER BY start").fetchall()
    finally:
        con.close()
    totals = [(int(ts), int(text.split()[4])) for ts, text in rows]
    top = max(t for _, t in totals)
    return next(ts for ts, t in totals if t == top), top


@pytest.mark.nsys
def test_recorded_linear_adam_bytes_at_the_peak_from_shapes(recorded: tuple[Path, dict[str, Any]]) -> None:
    db, facts = recorded
    report = nvbridge.load(db)
    memory, ops = report.table("memory"), report.ops.select(OPS_COLUMNS)
    at, top = _raw_peak(db)
    assert (at, top) == max(
        ((r["ts_ns"], r["total_allocated"]) for r in memory.to_pylist()), key=lambda x: (x[1], -x[0])
    )
    got = categorize(memory, ops).bytes_by_category(at, "cpu")
    size = facts["element_size"]
    params = sum(facts["params"]) * size  # the Linear layers' weights and biases
    assert got["parameter"] == params
    assert got["gradient"] == params  # zero_grad(set_to_none=False): every .grad live after step 0
    # Adam: exp_avg and exp_avg_sq of each parameter's size, and a float32 scalar step per parameter
    assert got["optimizer_state"] == 2 * params + size * len(facts["params"])
    # the peak is in the first backward nodes of a later step, before any activation is freed:
    # each ReLU output (saved by ReLU's and the next Linear's backward), the last Linear's input
    relus = facts["layers"] - 1
    assert got["activation"] == relus * facts["batch"] * facts["width"] * size
    assert sum(got.values()) == top
