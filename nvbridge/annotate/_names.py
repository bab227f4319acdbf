"""Range names in torch 2.x's NVTX grammar, so one parser reads torch's ranges and ours.

torch (``torch/csrc/profiler/util.cpp`` getNvtxStr) writes
``<name>[, seq = N][, op_id = K][, sizes = [[d0, d1], [], ...]]``; with shapes nvbridge adds each
argument's dtype, ``dtypes = [bf16, f32, -]`` (``-``: not a tensor), so bytes moved and the
precision-specific peak are known (nvbridge.engine.costs.flops), and, for the ops whose FLOPs need more than
shapes (:func:`wants_values`), the other arguments as JSON, ``values = [null, null, null, [2, 2],
[1, 1], [1, 1], false, [0, 0], 1]`` (``null`` for a tensor), always last. For backward nodes nvbridge
writes the form torch's emit_nvtx documents (and torch 1.0 emitted) plus the forward thread:
``AddmmBackward0, stashed seq = 5, fwd_tid = 123``, so a backward range is recognisable without
guessing from its name and links to its forward op exactly. Module and step ranges use
``nn.Module: <path> (<Class>)`` (path empty for the root module) and ``ProfilerStep#N``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

__all__ = [
    "backward_name",
    "dtypes_text",
    "forward_name",
    "module_name",
    "sizes_text",
    "step_name",
    "values_text",
    "wants_values",
]

# torch dtype -> the short name nvbridge writes (nvbridge.engine.costs.flops.DTYPE_BYTES reads both).
_SHORT_DTYPE = {
    "bfloat16": "bf16",
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "b8",
    "float8_e4m3fn": "f8e4m3",
    "float8_e5m2": "f8e5m2",
    "complex64": "c64",
    "complex128": "c128",
}


def sizes_text(sizes: Sequence[Sequence[int]]) -> str:
    """``[[3], [2, 4], []]``: one shape per schema argument, as torch prints them."""
    return "[" + ", ".join("[" + ", ".join(map(str, shape)) + "]" for shape in sizes) + "]"


def dtypes_text(values: Sequence[object]) -> str:
    """``[bf16, f32, -]``: one dtype per input (as sizes lists them), ``-`` for what is not a tensor."""
    names = []
    for value in values:
        dtype = getattr(value, "dtype", None) if hasattr(value, "shape") else None
        text = str(dtype).removeprefix("torch.") if dtype is not None else "-"
        names.append(_SHORT_DTYPE.get(text, text))
    return "[" + ", ".join(names) + "]"


def wants_values(op: str) -> bool:
    """Whether an op's range records its argument values: the ops whose FLOPs or bytes depend on
    arguments the sizes do not show (convolutions, attention, einsum, the bmm/addmm family). The
    observer (``_observer.cpp``, ``wants_values``) applies the same rule."""
    if not op.startswith("aten::"):
        return False
    base = op[6:]
    return "conv" in base or "attention" in base or base in ("einsum", "addmm") or "bmm" in base


def _json_value(value: object) -> object:
    """One argument as the observer writes it: numbers, booleans, strings and lists of them;
    None for a tensor or anything else."""
    if isinstance(value, bool) or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if type(value).__name__ == "SymInt":
        try:
            return int(value)  # type: ignore[call-overload]
        except Exception:  # a symbol without a hint
            return None
    return None


def values_text(values: Sequence[object]) -> str:
    """``[null, null, [2, 2], false, "ij,jk->ik"]``: one JSON value per input (as sizes lists them)."""
    return json.dumps([_json_value(v) for v in values], separators=(", ", ": "))


def forward_name(op: str, seq: int | None, op_id: int, sizes: Sequence[Sequence[int]] | None = None) -> str:
    """``aten::addmm, seq = 5, op_id = 12[, sizes = [...]]``; seq only where torch gives one."""
    text = f"{op}, seq = {seq}, op_id = {op_id}" if seq is not None else f"{op}, op_id = {op_id}"
    if sizes is not None:
        text += ", sizes = " + sizes_text(sizes)
    return text


def backward_name(node: str, stashed_seq: int | None, fwd_tid: int | None) -> str:
    """``AddmmBackward0, stashed seq = 5, fwd_tid = 123``; bare name for AccumulateGrad."""
    if stashed_seq is None:
        return node
    if fwd_tid is None:
        return f"{node}, stashed seq = {stashed_seq}"
    return f"{node}, stashed seq = {stashed_seq}, fwd_tid = {fwd_tid}"


def module_name(path: str, cls: str) -> str:
    """``nn.Module: encoder.layers.0 (Linear)``; the root module is ``nn.Module: (Net)``."""
    return f"nn.Module: {path} ({cls})" if path else f"nn.Module: ({cls})"


def step_name(step: int) -> str:
    """``ProfilerStep#3``, the name torch.profiler gives its step ranges."""
    return f"ProfilerStep#{step}"
