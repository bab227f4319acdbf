"""The bundled Nsight Systems recording of the held-out FLOPs workload (sample_db/flops_cpu.sqlite,
observer backend, record_shapes): converted as a user converts it, its FLOPs equal torch's
FlopCounterMode run on the same program in a process without nvbridge."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

import nvbridge  # noqa: E402
from nvbridge.analysis.mfu import counted_once  # noqa: E402
from tests.conftest import SAMPLE_DB, raw  # noqa: E402
from tests.test_flops_workloads import PASSES, _run, counter_ops, family, passes_and_families  # noqa: E402

SAMPLE = SAMPLE_DB / "flops_cpu.sqlite"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Counter[str]]:
    facts, _ = _run("reference", tmp_path_factory.mktemp("flops_sample"), None)
    out: dict[str, Counter[str]] = {p: Counter() for p in PASSES}
    for name in PASSES:
        for op, value in facts["passes"][name].items():
            kind = family(op)
            assert kind is not None, op
            out[name][kind] += value
    return out


def test_the_recording_holds_what_the_formulas_need() -> None:
    """Raw NVTX text: convolutions record their arguments, attention its flags, every op dtypes."""
    texts = [str(t) for (t,) in raw(SAMPLE, "SELECT text FROM NVTX_EVENTS WHERE text LIKE 'aten::%'")]
    conv = [t for t in texts if t.startswith("aten::convolution,")]
    assert conv and all(", values = [null, null, null, [" in t for t in conv)
    backward = [t for t in texts if t.startswith("aten::convolution_backward,")]
    assert backward and all(t.endswith("false]]") or t.endswith("true]]") for t in backward)  # output_mask
    assert any(t.startswith("aten::_scaled_dot_product_flash_attention_for_cpu,") for t in texts)
    assert any(t.startswith("aten::einsum,") and '"bld,bmd->blm"' in t for t in texts)
    shaped = [t for t in texts if ", sizes = " in t]
    assert shaped and all(", dtypes = [" in t for t in shaped)
    assert any("bf16" in t for t in shaped)


def test_families_and_model_flops_equal_flop_counter(reference: dict[str, Counter[str]], tmp_path: Path) -> None:
    nvbridge.convert(SAMPLE, tmp_path / "out")
    report = nvbridge.load(tmp_path / "out")
    ops = report.ops.sort_by("op_id")
    seen = counter_ops(ops)
    assert not any(f is None for f, s in zip(ops.column("flops").to_pylist(), seen) if s)
    ours = passes_and_families(ops, seen)
    once = counted_once(report)
    assert once is not None
    model = passes_and_families(ops, once[np.asarray(ops.column("op_id").to_numpy())])
    for name in PASSES:
        assert set(ours[name]) == set(reference[name])
        for kind, value in reference[name].items():
            assert ours[name][kind] == pytest.approx(value, rel=0.01), (name, kind)
        assert sum(model[name].values()) == pytest.approx(sum(reference[name].values()), rel=0.01), name
    # The autocast MLP's matmuls compute in bfloat16 (recorded, not assumed).
    rows = [
        r
        for r in ops.select(
            ["module_path", "op_name", "flops", "compute_dtype", "dtype_assumed", "is_backward"]
        ).to_pylist()
        if (r["module_path"] or "").startswith("mlp")
        and r["flops"] is not None
        and not r["is_backward"]
        and r["op_name"] in ("aten::linear", "aten::addmm", "aten::mm")
    ]
    assert len(rows) >= 4 and {(r["compute_dtype"], r["dtype_assumed"]) for r in rows} == {("bf16", False)}
