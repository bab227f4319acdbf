"""FLOPs on a held-out training workload (scripts/workloads/flops.py), recorded under
emit_nvtx, against torch's FlopCounterMode run on the same program in another process where
nvbridge is never imported: per family (mm, addmm, bmm, conv, attention) and pass (forward,
backward), the ops torch's counter sees; the model FLOPs MFU counts; and the dtypes of the
bfloat16-autocast MLP.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("torch")

from nvbridge.annotate import _observer  # noqa: E402
from nvbridge.engine import correlate  # noqa: E402
from nvbridge.engine.costs import flops
from nvbridge.engine.costs.tables import base_name  # noqa: E402
from tests.hand_built import _range, profile  # noqa: E402
from tests.nvtx_inject.nvtx_log import REPO, parse_log  # noqa: E402

PASSES = ("forward", "backward")


def family(op: str) -> str | None:
    """The family of an aten op (``aten.mm`` or ``aten::mm``): mm, addmm, bmm (baddbmm too), conv
    (every convolution and its backward), attention (every kernel and its backward); None for
    anything else."""
    base = op.replace("aten.", "").replace("aten::", "").split(".")[0]
    if base in ("mm", "addmm"):
        return base
    if base in ("bmm", "baddbmm"):
        return "bmm"
    if "conv" in base:
        return "conv"
    if "attention" in base and base != "scaled_dot_product_attention":  # the composite holds one
        return "attention"
    return None


# What FlopCounterMode's registry names (and the CPU flash kernels its reference maps): on our side
# the outermost op of these in a subtree is the one the counter saw.
COUNTED = {
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "convolution",
    "_convolution",
    "convolution_backward",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
}


def _run(mode: str, workdir: Path, injection: Path | None) -> tuple[dict[str, Any], Path]:
    out, log = workdir / f"{mode}.json", workdir / f"{mode}.tsv"
    log.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "NVTX_INJECTION64_PATH"}
    if injection is not None:
        env["NVTX_INJECTION64_PATH"] = str(injection)
    env["NVBRIDGE_NVTX_LOG"] = str(log)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.workloads.flops", mode, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text()), log


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("flops_workloads")


@pytest.fixture(scope="module")
def reference(workdir: Path) -> dict[str, Counter[str]]:
    """FlopCounterMode's FLOPs per (family, pass); nvbridge is not imported in that process."""
    facts, _ = _run("reference", workdir, None)
    out: dict[str, Counter[str]] = {p: Counter() for p in PASSES}
    for name, counts in facts["passes"].items():
        for op, value in counts.items():
            if name in out:
                kind = family(op)
                assert kind is not None, op  # every op the counter counts belongs to a family here
                out[name][kind] += value
    assert facts["passes"]["optimizer"] == {}  # AdamW: nothing FlopCounterMode counts
    return out


@functools.cache
def _annotated(backend: str, workdir: Path, injection: Path) -> pa.Table:
    """The workload under emit_nvtx(backend), its collector log converted by nvbridge's engine."""
    if backend == "observer" and _observer.load() is None:
        pytest.skip(f"observer unavailable: {_observer.unavailable_reason()}")
    _, log_path = _run(backend, workdir, injection)
    log = parse_log(log_path)
    assert not log.unclosed
    ranges = [_range(r.start_ns, r.end_ns, r.name, tid=r.tid) for r in log.ranges]
    return correlate(profile(ranges, [], [])).ops


def passes_and_families(ops: pa.Table, which: np.ndarray) -> dict[str, Counter[str]]:
    """FLOPs of the ``which`` rows per (pass, family); a row inside a backward node or its
    evaluate-function wrapper is backward."""
    rows = ops.to_pylist()
    by_id = {r["op_id"]: r for r in rows}
    out: dict[str, Counter[str]] = {p: Counter() for p in PASSES}
    for r, take in zip(rows, which):
        if not take:
            continue
        up, backward = r, False
        while up is not None:
            backward |= bool(up["is_backward"])
            up = by_id.get(up["parent_id"])
        kind = family(r["op_name"]) or _model_family(r["op_name"])
        out["backward" if backward else "forward"][kind] += r["flops"]
    return out


def _model_family(op: str) -> str:
    base, _ = base_name(op)
    return {"linear": "addmm", "matmul": "bmm", "einsum": "bmm"}.get(base, base)


def outermost(ops: pa.Table, candidate: np.ndarray) -> np.ndarray:
    """``candidate`` rows with no candidate among their ancestors."""
    parent = {r["op_id"]: r["parent_id"] for r in ops.select(["op_id", "parent_id"]).to_pylist()}
    ids = ops.column("op_id").to_pylist()
    marked = {i for i, c in zip(ids, candidate) if c}
    out = np.zeros(len(ids), bool)
    for k, i in enumerate(ids):
        if candidate[k]:
            up = parent.get(i)
            while up is not None and up not in marked:
                up = parent.get(up)
            out[k] = up is None
    return out


def counter_ops(ops: pa.Table) -> np.ndarray:
    """The rows FlopCounterMode's counting corresponds to: the outermost registry-named ops."""
    names = ops.column("op_name").to_pylist()
    return outermost(ops, np.array([base_name(n)[0] in COUNTED and n.startswith("aten::") for n in names]))


@pytest.mark.parametrize("backend", ["observer", "python"])
def test_each_family_equals_flop_counter(
    injection: Path, workdir: Path, reference: dict[str, Counter[str]], backend: str
) -> None:
    ops = _annotated(backend, workdir, injection)
    seen = counter_ops(ops)
    unknown = [
        n for n, s, f in zip(ops.column("name").to_pylist(), seen, ops.column("flops").to_pylist()) if s and f is None
    ]
    assert unknown == []  # no op the counter counts is unknown here
    ours = passes_and_families(ops, seen)
    for name in PASSES:
        assert set(ours[name]) == set(reference[name]), name
        for kind, value in reference[name].items():
            assert ours[name][kind] == pytest.approx(value, rel=0.01), (name, kind)
    assert set(reference["forward"]) == {"mm", "addmm", "bmm", "conv", "attention"}
    assert set(reference["backward"]) == {"mm", "bmm", "conv", "attention"}


@pytest.mark.parametrize("backend", ["observer", "python"])
def test_model_flops_equal_flop_counter(
    injection: Path, workdir: Path, reference: dict[str, Counter[str]], backend: str
) -> None:
    """MFU's rule (model ops with known FLOPs, each counted once: none inside another) gives the
    counter's total per pass: composites (linear, conv2d, einsum) and backward nodes count what
    the ops inside them count."""
    ops = _annotated(backend, workdir, injection)
    names = ops.column("op_name").to_pylist()
    known = np.array([f is not None for f in ops.column("flops").to_pylist()])
    model = np.array([flops.is_model_op(n) for n in names]) & known
    ours = passes_and_families(ops, outermost(ops, model))
    for name in PASSES:
        assert sum(ours[name].values()) == pytest.approx(sum(reference[name].values()), rel=0.01), name


@pytest.mark.parametrize("backend", ["observer", "python"])
def test_autocast_mlp_computes_in_bfloat16(injection: Path, workdir: Path, backend: str) -> None:
    """The MLP ran under bfloat16 autocast: its matmuls' FLOPs compare with the bf16 roof."""
    ops = _annotated(backend, workdir, injection).to_pylist()
    mlp = [
        r
        for r in ops
        if (r["module_path"] or "").startswith("mlp")
        and r["flops"] is not None
        and flops.is_model_op(r["op_name"])
        and not r["is_backward"]
    ]
    assert len(mlp) >= 4
    assert {(r["compute_dtype"], r["dtype_assumed"]) for r in mlp} == {("bf16", False)}
    assert {flops.precision(r["op_name"], r["compute_dtype"]) for r in mlp} == {"bf16"}
    # The ops outside it are float32 (recorded, not assumed).
    conv = [r for r in ops if r["op_name"] == "aten::convolution" and r["flops"] is not None]
    assert conv and {(r["compute_dtype"], r["dtype_assumed"]) for r in conv} == {("f32", False)}
