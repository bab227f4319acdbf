"""FLOPs and bytes moved by one op, from its name, input shapes and (where recorded) dtypes.

The FLOP formulas are torch.utils.flop_counter's (FlopCounterMode), so nvbridge's counts equal
torch's for every op torch counts: a multiply-add is 2 FLOPs, convolution counts its
multiply-adds only (no bias), attention counts its two batched matmuls (four plus the recompute
backward) and counts a causal mask as full. Beyond torch's registry: ``matmul``/``linear``
(torch counts them as the mm/bmm they dispatch to), elementwise ops (``ELEMENTWISE_FLOPS`` per
output element), reductions (one per input element), softmax, norms; embeddings and copies move
bytes and do no FLOPs; views do neither. Anything else is unknown (None), never zero.

Backward nodes (``AddmmBackward0``) that record no sizes of their own carry their forward op's
shapes (nvbridge.engine.semantics); they are counted as torch counts the backward of that op when every
tensor input needs a gradient: twice the forward for matmuls, grad-input plus grad-weight for
convolution. Where nodes record their own sizes, the ops inside them carry the exact cost.

Bytes are the tensors an op reads and writes once each: the sum of its input and output
tensor sizes (a copy reads its source and writes its destination; a reduction counts its input).
Element sizes come from the recorded dtypes, else ``ASSUMED_DTYPE`` (reported as assumed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Re-exported: nvbridge.engine.costs.flops is where callers find the dtype tables, base_name and call_args.
from nvbridge.engine.costs import formulas as f
from nvbridge.engine.costs.args import call_args as call_args
from nvbridge.engine.costs.tables import ASSUMED_DTYPE as ASSUMED_DTYPE
from nvbridge.engine.costs.tables import (
    COMPARE,
    CONV_FWD,
    COPY,
    MATMUL_FWD,
    NORM,
    REDUCE,
    SDPA_BWD,
    SDPA_FWD,
    SOFTMAX,
    VIEW,
)
from nvbridge.engine.costs.tables import DTYPE_BYTES as DTYPE_BYTES
from nvbridge.engine.costs.tables import ELEMENTWISE_FLOPS as ELEMENTWISE_FLOPS
from nvbridge.engine.costs.tables import PRECISION as PRECISION
from nvbridge.engine.costs.tables import base_name as base_name

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Cost:
    """What one op does: FLOPs and bytes (None: unknown), the dtype it computes in, whether that
    was assumed (nothing recorded it) or inferred from its kernels' names."""

    flops: int | None
    bytes: int | None
    dtype: str | None
    dtype_assumed: bool
    dtype_inferred: bool = False


def precision(op_name: str, dtype: str | None) -> str:
    """The peak an op's FLOPs compare with (nvbridge.gpu.peaks.Peaks fields): its dtype's, except
    that float32 convolutions use TF32, as cuDNN does by default (torch.backends.cudnn.allow_tf32;
    float32 matmuls do not: torch.backends.cuda.matmul.allow_tf32 is False by default)."""
    name = PRECISION.get(dtype or "", "fp32")
    base, _ = base_name(op_name)
    return "tf32" if name == "fp32" and (base in CONV_FWD or base == "convolution_backward") else name


def is_model_op(op_name: str) -> bool:
    """Whether an op counts toward model FLOPs (MFU): matmuls, convolutions, attention and their
    backward, the families torch's FlopCounterMode counts."""
    base, _ = base_name(op_name)
    return (
        base in MATMUL_FWD
        or base in CONV_FWD
        or base in SDPA_FWD
        or base in SDPA_BWD
        or base in ("convolution_backward", "einsum")
    )


def op_cost(
    op_name: str,
    shapes: list[Shape] | None,
    dtypes: list[str | None] | None = None,
    args: dict[str, Any] | None = None,
    inferred: str | None = None,
) -> Cost:
    """FLOPs and bytes of one op.

    Args:
        op_name: the op or backward node name, as in the dataset's ``op_name``.
        shapes: one shape per argument (``()`` for a non-tensor), as in ``input_shapes``.
        dtypes: one dtype name per argument (None or ``-`` for a non-tensor); None: not recorded.
        args: non-tensor arguments by name where known (nvbridge.engine.costs.args.call_args):
            convolutions need ``stride``, ``padding``, ``dilation``, ``transposed``,
            ``output_padding``, ``groups`` (their backward ``output_mask``), einsum its
            ``equation``; ``beta`` 0 leaves the addmm family's input unread.
        inferred: the compute dtype the op's kernels' names carry (nvbridge.engine.costs.kernel_dtypes), for
            an op whose inputs' dtypes were not recorded (torch's own names, user ranges): its
            compute dtype then, and its tensors' element size.

    Returns:
        The op's Cost; flops/bytes None where the op or its shapes are not understood.
    """
    base, backward = base_name(op_name)
    known = [d for d in (dtypes or []) if d and d != "-"]
    # The compute precision: the first floating-point input's (embedding indices are int64).
    floating = [d for d in known if PRECISION.get(d, "int8") != "int8"]
    recorded = floating[0] if floating else known[0] if known else None
    inferred = None if recorded is not None else inferred  # what was recorded comes first
    dtype = recorded or inferred
    assumed = dtype is None
    elt = DTYPE_BYTES.get(dtype or ASSUMED_DTYPE, 4)
    if shapes is None:
        return Cost(None, None, dtype, assumed, inferred is not None)
    if op_name.startswith("torch.nn.functional.embedding") and len(shapes) >= 2:
        # PyProf's functional form takes (indices, weight); aten's embedding (weight, indices).
        shapes = [shapes[1], shapes[0], *shapes[2:]]
        dtypes = None if dtypes is None else [*dtypes[1:2], *dtypes[0:1], *dtypes[2:]]
    sizes = [_elt(dtypes, i, elt) for i in range(len(shapes))]
    try:
        flops, moved = _cost(base, backward, shapes, sizes, elt, args or {})
    except (ValueError, IndexError, TypeError, ZeroDivisionError):
        flops, moved = None, None
    if flops is None and moved is None:
        return Cost(None, None, inferred, inferred is None, inferred is not None)
    return Cost(flops, moved, dtype or ASSUMED_DTYPE, assumed, inferred is not None)


def _elt(dtypes: list[str | None] | None, i: int, default: int) -> int:
    """Element size of argument ``i``: its recorded dtype, else ``default``."""
    if dtypes is None or i >= len(dtypes) or not dtypes[i]:
        return default
    return DTYPE_BYTES.get(str(dtypes[i]), default)


def _nbytes(shapes: list[Shape], sizes: list[int]) -> int:
    """Bytes of every tensor argument (non-tensors are ``()``, and count as nothing)."""
    return sum(prod(s) * b for s, b in zip(shapes, sizes) if s)


def _cost(
    base: str, backward: bool, shapes: list[Shape], sizes: list[int], elt: int, args: dict[str, Any]
) -> tuple[int | None, int | None]:
    """(flops, bytes) by op family; raises ValueError on shapes the formula cannot read."""
    if base in MATMUL_FWD:
        flops, out = f.matmul(base, shapes)
        read = _nbytes(shapes, sizes)
        if base in ("addmm", "baddbmm", "addbmm") and args.get("beta", 1) == 0 and not backward:
            read -= _nbytes(shapes[:1], sizes[:1])  # beta = 0: the input is never read
        moved = read + prod(out) * elt
        # The backward reads the inputs and the output's gradient and writes the inputs' gradients.
        return (2 * flops, 2 * moved) if backward else (flops, moved)
    if base in CONV_FWD:
        return f.convolution(base, backward, shapes, args, elt)
    if base == "convolution_backward":
        return f.convolution_backward(shapes, args, elt)
    if base in SDPA_FWD:
        return f.attention(base, shapes, backward, elt)
    if base in SDPA_BWD:
        return f.attention_backward(base, shapes, elt)
    if base == "einsum" and not backward:
        return f.einsum(str(args.get("equation", "")), shapes, sizes, elt)
    if backward:
        return None, None
    tensors = [s for s in shapes if s]
    if base in VIEW:
        return 0, 0
    if base in ELEMENTWISE_FLOPS or base in COPY:
        out = f.broadcast([s for s in shapes if s] or [()])
        if base == "copy_" and len(shapes) >= 2:
            return 0, prod(shapes[0]) * sizes[0] + prod(shapes[1]) * sizes[1]
        out_elt = 1 if base in COMPARE else sizes[next(i for i, s in enumerate(shapes) if s)] if tensors else elt
        flops = 0 if base in COPY else ELEMENTWISE_FLOPS[base] * prod(out)
        return flops, _nbytes(shapes, sizes) + prod(out) * out_elt
    if not tensors:
        return None, None
    first = next(i for i, s in enumerate(shapes) if s)
    x = shapes[first]
    if base in REDUCE:
        return prod(x), prod(x) * sizes[first]
    if base in SOFTMAX:
        return SOFTMAX[base] * prod(x), 2 * prod(x) * sizes[first]
    if base in NORM:
        return NORM[base] * prod(x), _nbytes(shapes, sizes) + prod(x) * sizes[first]
    if base in ("embedding", "embedding_bag") and len(tensors) >= 2:
        return f.embedding(shapes, sizes)
    return None, None


COST_SCHEMA = pa.schema(
    [
        ("flops", pa.int64()),
        ("bytes", pa.int64()),
        ("compute_dtype", pa.string()),
        ("dtype_assumed", pa.bool_()),
        ("dtype_inferred", pa.bool_()),
    ]
)


@lru_cache(maxsize=1 << 16)
def _cost_of_text(
    op_name: str, shapes: str | None, dtypes: str | None, values: str | None = None, inferred: str | None = None
) -> Cost:
    """op_cost of one distinct (name, sizes, dtypes, values text, kernel dtype): a training loop
    repeats them."""
    unknown = Cost(None, None, inferred, inferred is None, inferred is not None)
    if shapes is None:
        return unknown
    try:
        parsed = json.loads(shapes)
        dims = [tuple(int(d) for d in s) for s in parsed]
        args = call_args(op_name, json.loads(values)) if values else None
    except (ValueError, TypeError):
        return unknown
    types: list[str | None] | None = None if dtypes is None else [d.strip() for d in dtypes.strip("[]").split(",")]
    return op_cost(op_name, dims, types, args, inferred)


def cost_columns(
    op_name: pa.Array,
    shapes: pa.Array,
    dtypes: pa.Array,
    values: pa.Array | None = None,
    kernel_dtype: pa.Array | None = None,
) -> dict[str, pa.Array]:
    """The ops table's cost columns (COST_SCHEMA) from its op_name, input_shapes, input_dtypes,
    input_values and the dtype its kernels carry (nvbridge.engine.costs.kernel_dtypes; an op without shapes
    still gets that as its compute dtype): each distinct combination is costed once, then taken
    back to the rows."""
    n = len(op_name)
    cols = {field.name: pa.nulls(n, field.type) for field in COST_SCHEMA}
    kernel_dtype = pa.nulls(n, pa.string()) if kernel_dtype is None else kernel_dtype
    if shapes.null_count == n and kernel_dtype.null_count == n:
        return cols
    values = pa.nulls(n, pa.string()) if values is None else values
    keys = pc.binary_join_element_wise(
        op_name.cast(pa.string()).fill_null(""),
        shapes.fill_null(_NULL),
        dtypes.fill_null(_NULL),
        values.fill_null(_NULL),
        kernel_dtype.fill_null(_NULL),
        _SEP,
    ).dictionary_encode()
    values = [
        _cost_of_text(*(None if part == _NULL else part for part in key.split(_SEP)))
        for key in keys.dictionary.to_pylist()
    ]
    index = keys.indices
    cols["flops"] = pa.array([v.flops for v in values], pa.int64()).take(index)
    cols["bytes"] = pa.array([v.bytes for v in values], pa.int64()).take(index)
    cols["compute_dtype"] = pa.array([v.dtype for v in values], pa.string()).take(index)
    cols["dtype_assumed"] = pa.array([v.dtype_assumed if v.dtype else None for v in values], pa.bool_()).take(index)
    cols["dtype_inferred"] = pa.array([v.dtype_inferred if v.dtype else None for v in values], pa.bool_()).take(index)
    return cols


_SEP, _NULL = "\x1f", "\x00"


def with_rates(ops: pa.Table) -> pa.Table:
    """``ops`` plus achieved_tflops, achieved_gbps (over total_gpu_ns) and intensity (FLOP per
    byte); null where the cost or the GPU time is unknown or zero."""
    if ops.column("flops").null_count == ops.num_rows and ops.column("bytes").null_count == ops.num_rows:
        for name in ("achieved_tflops", "achieved_gbps", "intensity"):  # nothing costed: all null
            ops = ops.append_column(name, pa.nulls(ops.num_rows, pa.float64()))
        return ops
    t = np.asarray(ops.column("total_gpu_ns").to_numpy(zero_copy_only=False), np.float64)
    f = np.asarray(ops.column("flops").to_numpy(zero_copy_only=False), np.float64)  # NaN: unknown
    b = np.asarray(ops.column("bytes").to_numpy(zero_copy_only=False), np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rates = {"achieved_tflops": f / t / 1e3, "achieved_gbps": b / t, "intensity": f / b}
    for name, values in rates.items():
        ops = ops.append_column(name, pa.array(values, mask=~np.isfinite(values)))
    return ops
