"""FLOPs and bytes on real reports, against formulas computed here from the raw marker text."""

from __future__ import annotations

import ast
from collections import Counter
from math import prod
from typing import Any

import nvbridge
from tests.conftest import raw, real_db

PYPROF = "nvprof-2020-pytorch14-pyprof-lm.sqlite"
ELEMENT = {"float32": 4, "float16": 2, "int64": 8}


def raw_markers() -> list[dict[str, Any]]:
    """Every PyProf op marker's dict, one per range (flags 2: the range's start row)."""
    texts = raw(
        real_db(PYPROF),
        "SELECT s.value FROM CUPTI_ACTIVITY_KIND_MARKER m JOIN StringTable s ON s._id_ = m.name WHERE m.flags = 2",
    )
    markers = []
    for (text,) in texts:
        if str(text).startswith("{'mod'"):
            markers.append(ast.literal_eval(str(text)))
    return markers


def matmul_flops(op: str, shapes: list[tuple[int, ...]]) -> int | None:
    """2 x multiply-adds: (m, k) @ (k, n), batched; linear is x @ w.T."""
    if op == "linear":
        x, w = shapes[0], shapes[1]
        return 2 * prod(x[:-1]) * x[-1] * w[0]
    if op in ("mm", "bmm", "matmul"):
        a, b = shapes[0], shapes[1]
        return 2 * prod(a[:-1]) * a[-1] * b[-1]
    return None


def test_pyprof_matmul_flops_equal_the_marker_formula() -> None:
    expected: Counter[tuple[str, int, int]] = Counter()
    for marker in raw_markers():
        tensors = [a for a in marker["args"] if a["type"] == "tensor"]
        flops = matmul_flops(marker["op"], [tuple(a["shape"]) for a in tensors])
        if flops is not None:
            # Bytes: both inputs (and linear's bias) read, the output written, float32 each.
            out = prod(tensors[0]["shape"][:-1]) * (
                tensors[1]["shape"][0] if marker["op"] == "linear" else tensors[1]["shape"][-1]
            )
            moved = sum(prod(a["shape"]) * ELEMENT[a["dtype"]] for a in tensors) + out * 4
            expected[(f"{marker['mod']}.{marker['op']}", flops, moved)] += 1
    assert sum(expected.values()) >= 12 and {k[0] for k in expected} >= {
        "torch.nn.functional.linear",
        "torch.bmm",
        "Tensor.matmul",
    }

    ops = nvbridge.load(real_db(PYPROF)).df("ops")
    mine = ops[ops["op_name"].isin({k[0] for k in expected})]
    got = Counter(zip(mine["op_name"], mine["flops"].astype(int), mine["bytes"].astype(int)))
    assert got == expected
    assert set(mine["compute_dtype"]) == {"float32"} and not mine["dtype_assumed"].any()
    # Achieved TFLOP/s over the op's GPU time: the kernels launched inside its range, summed here
    # from raw SQL.
    db = real_db(PYPROF)
    ranges = raw(
        db,
        "SELECT s.value, a.timestamp, b.timestamp FROM CUPTI_ACTIVITY_KIND_MARKER a "
        "JOIN CUPTI_ACTIVITY_KIND_MARKER b ON b.id = a.id AND b.flags = 4 "
        "JOIN StringTable s ON s._id_ = a.name WHERE a.flags = 2 AND s.value LIKE '{''mod''%'",
    )
    launches = raw(
        db,
        'SELECT r.start, k."end" - k.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r '
        "JOIN CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL k ON k.correlationId = r.correlationId",
    )
    rates: Counter[tuple[str, float]] = Counter()
    for text, begin, finish in ranges:
        marker = ast.literal_eval(str(text))
        tensors = [tuple(a["shape"]) for a in marker["args"] if a["type"] == "tensor"]
        flops = matmul_flops(marker["op"], tensors)
        gpu_ns = sum(int(str(d)) for t, d in launches if int(str(begin)) <= int(str(t)) <= int(str(finish)))
        if flops is not None and gpu_ns:
            rates[(f"{marker['mod']}.{marker['op']}", round(flops / gpu_ns / 1e3, 9))] += 1
    timed = mine[mine["total_gpu_ns"] > 0]
    assert Counter(zip(timed["op_name"], timed["achieved_tflops"].round(9))) == rates and len(rates) >= 5


def test_pyprof_ops_without_a_formula_are_unknown_not_zero() -> None:
    ops = nvbridge.load(real_db(PYPROF)).df("ops")
    # multi_head_attention_forward is a composite PyProf cannot see into: no count.
    mha = ops[ops["op_name"] == "torch.nn.functional.multi_head_attention_forward"]
    assert len(mha) and mha["flops"].isna().all()
    views = ops[ops["op_name"].isin(["Tensor.view", "Tensor.transpose"])]
    assert len(views) and (views["flops"] == 0).all() and (views["bytes"] == 0).all()


def test_pyprof_conv2d_flops_equal_flop_counter_on_the_recorded_arguments() -> None:
    """nsys PyProf capture: conv2d markers record shapes and stride/padding/dilation/groups."""
    torch = __import__("pytest").importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    db = real_db("nsys-2024.2-pyprof-markers.sqlite")
    expected: Counter[int] = Counter()
    for (text,) in raw(
        db, "SELECT text FROM NVTX_EVENTS WHERE text LIKE '{''mod'': ''torch.nn.functional'', ''op'': ''conv2d''%'"
    ):
        args = ast.literal_eval(str(text))["args"]
        x, w = (torch.empty(a["shape"], device="meta") for a in args[:2])
        params = [a["value"] for a in args[3:]]
        with FlopCounterMode(display=False) as mode:
            torch.nn.functional.conv2d(x, w, None, *params)
        expected[int(mode.get_total_flops())] += 1
    ops = nvbridge.load(db).df("ops")
    conv = ops[ops["op_name"] == "torch.nn.functional.conv2d"]
    assert sum(expected.values()) == len(conv) == 18
    assert Counter(conv["flops"].astype(int)) == expected
