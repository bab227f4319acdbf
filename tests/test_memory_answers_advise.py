"""advise's memory finding (kind memory_peak) on a labelled made-up loop: what holds the peak by
category and module range, the op that allocated the most, the fix; and the growth of the steps'
starting allocation when a reference is kept across steps."""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
from click.testing import CliRunner

from nvbridge.analysis.memory_advice import _callers, memory_findings, module_range
from nvbridge.cli import cli
from nvbridge.dataset.schema import InMemory
from scripts.record import synthetic_memory
from tests.conftest import SAMPLE_DB
from tests.memory_fake import FLOAT, Fake, mlp_adam


def _report(fake: Fake) -> InMemory:
    ops, memory = fake.tables()
    return InMemory({"source": "fake"}, {"ops": ops, "memory": memory})


def _live_at_peak(fake: Fake) -> dict[int, dict[str, object]]:
    """The blocks live at the first row reaching the highest total, from the rows alone."""
    _, memory = fake.tables()
    rows = memory.to_pylist()
    top = max(r["total_allocated"] for r in rows)
    at = min(r["ts_ns"] for r in rows if r["total_allocated"] == top)
    live: dict[int, dict[str, object]] = {}
    for r in rows:
        if r["ts_ns"] > at:
            break
        if r["bytes"] > 0:
            live[r["address"]] = r
        else:
            live.pop(r["address"], None)
    return live


def test_activations_hold_the_peak_of_a_deep_narrow_batch() -> None:
    fake = mlp_adam(layers=6, batch=64, width=8, steps=3)
    (finding,) = memory_findings(_report(fake))
    figures = dict(finding.figures)
    live = _live_at_peak(fake)
    by_category: dict[str, int] = defaultdict(int)
    for address, r in live.items():
        by_category[fake.truth[address]] += int(r["bytes"])  # type: ignore[call-overload]
    for category, nbytes in by_category.items():
        assert figures[f"{category}_bytes"] == nbytes
    assert finding.top == "activation" == max(by_category, key=lambda c: by_category[c])
    assert figures["peak_allocated_bytes"] == sum(int(r["bytes"]) for r in live.values())  # type: ignore[call-overload]
    assert finding.module == "layers.0-layers.5"
    assert finding.op == "aten::relu" and figures["op_bytes"] == 6 * 64 * 8 * FLOAT
    assert "Checkpoint the activations of layers.0-layers.5" in finding.fix
    assert figures["growth_bytes_per_step"] == 0


def test_a_loss_kept_across_steps_is_growth_per_step() -> None:
    fake = mlp_adam(layers=2, batch=4, width=8, steps=6, keep_loss=True)
    (finding,) = memory_findings(_report(fake))
    assert dict(finding.figures)["growth_bytes_per_step"] == FLOAT  # one float loss a step
    assert "reference is kept across steps" in finding.fix
    steady = mlp_adam(layers=2, batch=4, width=8, steps=6)
    assert dict(memory_findings(_report(steady))[0].figures)["growth_bytes_per_step"] == 0


def test_stale_gradients_ask_for_set_to_none() -> None:
    fake = mlp_adam(layers=2, batch=4, width=64, steps=3, set_to_none=False)
    (finding,) = memory_findings(_report(fake))
    assert "zero_grad(set_to_none=True)" in finding.fix


def test_module_range() -> None:
    assert module_range(["blocks.3.attn", "blocks.11.mlp.fc1", "blocks.7", "head"]) == "blocks.3-blocks.11"
    assert module_range(["layers.2 (Linear)"]) == "layers.2"
    assert module_range(["head", "head", "embed"]) == "head"
    assert module_range([]) is None
    assert module_range(["0", "2", "6"]) == "0-6"  # an nn.Sequential's children


def test_allocations_belong_to_the_outermost_aten_op_of_their_chain() -> None:
    ops = pa.table(
        {
            "op_id": [0, 1, 2, 3, 4, 5],
            "parent_id": [None, 0, 1, 2, None, 4],
            "op_name": [
                "Optimizer.step#Adam.step",
                "aten::zeros_like",
                "aten::empty_like",
                "aten::empty_strided",
                "AddmmBackward0",
                "aten::mm",
            ],
        }
    )
    assert _callers(ops, np.array([3, 5, 0, -1])) == {
        3: "aten::zeros_like",
        5: "aten::mm",
        0: "Optimizer.step#Adam.step",
    }


def test_advise_prints_the_memory_finding_under_any_limit(tmp_path: Path) -> None:
    """On Nsight Systems' own device memory (scripts/record/synthetic_memory.py's labelled copy),
    beside the time findings: the memory finding is printed whatever --limit keeps, and its peak
    is the highest running total of the table's device allocations (sqlite3)."""
    db = tmp_path / "cuda_memory.sqlite"
    synthetic_memory.main([str(SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite"), str(db)])
    result = CliRunner().invoke(cli, ["advise", str(db), "--limit", "1"])
    assert result.exit_code == 0, result.output
    assert "Memory peak on cuda:0: " in result.stdout and "more (--limit -1 shows all)" in result.stdout
    data = json.loads(CliRunner().invoke(cli, ["advise", str(db), "--json"]).stdout)
    (finding,) = [f for f in data["findings"] if f["kind"] == "memory_peak"]
    assert finding["lanes"] == ["cuda:0"]
    assert finding["figures"]["peak_allocated_bytes"] == max(_running_totals(db))


def _running_totals(db: Path) -> list[int]:
    """The running total of device 0's allocations and frees (not host memory), in time order."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT m.bytes, o.label FROM CUDA_GPU_MEMORY_USAGE_EVENTS m "
            "JOIN ENUM_CUDA_DEV_MEM_EVENT_OPER o ON o.id = m.memoryOperationType "
            "JOIN ENUM_CUDA_MEM_KIND k ON k.id = m.memKind "
            "WHERE m.deviceId = 0 AND k.label NOT IN ('Pinned', 'Pageable') ORDER BY m.start"
        ).fetchall()
    finally:
        con.close()
    out, total = [], 0
    for nbytes, label in rows:
        total += -nbytes if label == "Deallocation" else nbytes
        out.append(total)
    return out
