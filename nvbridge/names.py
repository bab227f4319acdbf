"""Parse NVTX range names into PyTorch columns, for every naming scheme real reports hold.

Grammars (one regular expression, run column-wise by Arrow's RE2; no Python per row):

- torch 1.0:   ``add, seq=3`` / ``AddBackward, stashed seq=3``
- torch 1.x:   ``embedding, seq = 65`` / ``NllLossBackward, seq = 128``
- torch 2.x:   ``aten::addmm, seq = 5, op_id = 12, sizes = [[3], [2, 4]], input_op_ids = [(63,0)]``
               and ``autograd::engine::evaluate_function: AddmmBackward0``
- nvbridge:    ``AddmmBackward0, stashed seq = 5, fwd_tid = 123``,
               ``nn.Module: encoder.layers.0.attn (MultiheadAttention)``, ``ProfilerStep#3``
- PyProf:      ``{'mod': 'torch', 'op': 'embedding', 'args': [...]}`` and ``{'traceMarker': [...]}``
               (rare, old captures: parsed per row with ``ast.literal_eval``)
- anything else (NCCL, user ranges) passes through: ``op_name`` is the whole name.

A name never makes the parser fail; what it cannot read stays in ``op_name``.
"""

from __future__ import annotations

import ast
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TORCH = (
    r"(?s)^(?P<op>.*?)"
    r"(?:, (?P<stashed>stashed )?seq ?= ?(?P<seq>\d+))?"
    r"(?:, op_id = (?P<op_id>\d+))?"
    r"(?:, fwd_tid = (?P<fwd_tid>\d+))?"
    r"(?:, sizes = (?P<sizes>\[.*?\]))?"
    r"(?:, input_op_ids = (?P<input_op_ids>\[.*?\]))?$"
)
MODULE = r"^nn\.Module: (?P<path>\S*) ?\((?P<type>[^()]*)\)$"
STEP = r"^ProfilerStep#(?P<step>\d+)$"
EVALUATE = "autograd::engine::evaluate_function: "
# Autograd node class names: AddmmBackward0, NllLossBackward, torch::autograd::CopyBackwards.
BACKWARD_NODE = r"Backwards?\d*$"

PARSED_SCHEMA = pa.schema([
    ("op_name", pa.string()), ("seq", pa.int64()), ("torch_op_id", pa.int64()),
    ("input_shapes", pa.string()), ("input_op_ids", pa.string()), ("fwd_tid", pa.int64()),
    ("is_backward", pa.bool_()), ("module", pa.string()), ("step", pa.int64()),
    ("stack", pa.list_(pa.string())),
])


def _int(field: pa.Array) -> pa.Array:
    """An optional digits group: '' -> null, else int64."""
    return _str(field).cast(pa.int64())


def _str(field: pa.Array) -> pa.Array:
    return pc.if_else(pc.equal(field, ""), pa.scalar(None, pa.string()), field)


def parse(names: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Parse range names column-wise; returns PARSED_SCHEMA columns, one row per name.

    ``module`` is the module path a ``nn.Module:`` range names (for that range only; the
    enclosing module of other ops is derived from the tree in nvbridge.semantics).
    """
    names = names.combine_chunks() if isinstance(names, pa.ChunkedArray) else names
    names = names.cast(pa.string()).fill_null("")
    t = pc.extract_regex(names, TORCH)
    op = t.field("op")
    stashed = pc.equal(t.field("stashed"), "stashed ")
    seq = _int(t.field("seq"))
    evaluate = pc.starts_with(op, EVALUATE)
    node = pc.and_(pc.match_substring_regex(op, BACKWARD_NODE), pc.is_valid(seq))
    is_backward = pc.or_(pc.or_(stashed, node), evaluate)

    module = pc.extract_regex(names, MODULE)
    is_module = pc.is_valid(module)
    module_path = pc.if_else(is_module, module.field("path"), pa.scalar(None, pa.string()))
    op_name = pc.if_else(is_module, pc.binary_join_element_wise("nn.Module:", module.field("type"), " "), op)
    step = pc.extract_regex(names, STEP)
    step_no = pc.if_else(pc.is_valid(step), step.field("step"), pa.scalar(None, pa.string())).cast(pa.int64())

    cols: dict[str, Any] = {
        "op_name": op_name,
        "seq": seq,
        "torch_op_id": _int(t.field("op_id")),
        "input_shapes": _str(t.field("sizes")),
        "input_op_ids": _str(t.field("input_op_ids")),
        "fwd_tid": _int(t.field("fwd_tid")),
        "is_backward": is_backward,
        "module": module_path,
        "step": step_no,
        "stack": pa.nulls(len(names), pa.list_(pa.string())),
    }
    pyprof = np.flatnonzero(np.asarray(pc.starts_with(names, "{").to_numpy(zero_copy_only=False)))
    if len(pyprof):
        _pyprof(names, pyprof, cols)
    return pa.table(cols, schema=PARSED_SCHEMA)


def _shape_text(args: list[Any]) -> str:
    """PyProf's argument list as torch's ``sizes`` text: tensors' shapes, ``[]`` otherwise."""
    dims = []
    for arg in args:
        shape = arg.get("shape") if isinstance(arg, dict) and arg.get("type") == "tensor" else None
        dims.append("[" + ", ".join(str(d) for d in shape) + "]" if shape is not None else "[]")
    return "[" + ", ".join(dims) + "]"


def _pyprof(names: pa.Array, rows: np.ndarray, cols: dict[str, Any]) -> None:
    """Fill op_name / input_shapes / stack for NVIDIA PyProf's dict markers (old captures)."""
    op_name = cols["op_name"].to_pylist()
    shapes = cols["input_shapes"].to_pylist()
    stack: list[list[str] | None] = [None] * len(names)
    for i, text in zip(rows, names.take(pa.array(rows)).to_pylist()):
        try:
            marker = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if not isinstance(marker, dict):
            continue
        if "traceMarker" in marker and isinstance(marker["traceMarker"], list):
            op_name[i] = "traceMarker"
            stack[i] = [str(frame) for frame in marker["traceMarker"]]
        elif "op" in marker:
            mod = marker.get("mod")
            op_name[i] = f"{mod}.{marker['op']}" if mod else str(marker["op"])
            if isinstance(marker.get("args"), list):
                shapes[i] = _shape_text(marker["args"])
    cols["op_name"] = pa.array(op_name, pa.string())
    cols["input_shapes"] = pa.array(shapes, pa.string())
    cols["stack"] = pa.array(stack, pa.list_(pa.string()))
