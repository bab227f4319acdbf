"""Parse NVTX range names into PyTorch columns, for every naming scheme real reports hold.

Grammars (column-wise: Arrow kernels and NumPy for the common names, Arrow's RE2 regular
expressions for the rest; no Python per row):

- torch 1.0:   ``add, seq=3`` / ``AddBackward, stashed seq=3``
- torch 1.x:   ``embedding, seq = 65`` / ``NllLossBackward, seq = 128``
- torch 2.x:   ``aten::addmm, seq = 5, op_id = 12, sizes = [[3], [2, 4]], input_op_ids = [(63,0)]``
               and ``autograd::engine::evaluate_function: AddmmBackward0``
- nvbridge:    ``AddmmBackward0, stashed seq = 5, fwd_tid = 123``, ``sizes = [[3], []], dtypes = [bf16, -]``,
               ``values = [null, null, [2, 2], false]`` (argument values as JSON, last),
               ``nn.Module: encoder.layers.0.attn (MultiheadAttention)``, ``ProfilerStep#3``
- PyProf:      ``{'mod': 'torch', 'op': 'embedding', 'args': [...]}`` and ``{'traceMarker': [...]}``
               (rare, old captures: parsed per distinct text, nvbridge.engine.names_legacy)
- torch 0.4/1.0 C++ node classes, as ``typeid`` names them (nvprof 2018 reports):
               ``N5torch8autograd5CloneE`` -> ``torch::autograd::Clone`` (nvbridge.engine.names_legacy)
- anything else (NCCL, user ranges) passes through: ``op_name`` is the whole name.

A name never makes the parser fail; what it cannot read stays in ``op_name``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import one_chunk
from nvbridge.compiled import native
from nvbridge.engine.names_legacy import demangle_types, pyprof

# The reference grammar (_decorations_regex; _decorations gives the same columns faster for
# the simple names). Each field is found by its own small regular expression: RE2 runs these
# about ten times faster over millions of names than one pattern with many optional groups.
DECORATION = (
    r"(?s), (?:(?:stashed )?seq ?= ?\d|op_id = \d|fwd_tid = \d|sizes = \[|dtypes = \[|values = \[|input_op_ids = \[).*$"
)
SEQ = r", (?P<stashed>stashed )?seq ?= ?(?P<v>\d+)"
FIELDS = {
    "torch_op_id": (", op_id = ", r", op_id = (?P<v>\d+)"),
    "fwd_tid": (", fwd_tid = ", r", fwd_tid = (?P<v>\d+)"),
    "input_shapes": (
        ", sizes = ",
        r"(?s), sizes = (?P<v>\[.*?\])(?:, dtypes = \[|, values = \[|, input_op_ids = \[|$)",
    ),
    "input_dtypes": (", dtypes = ", r", dtypes = (?P<v>\[[^\]]*\])"),
    # nvbridge writes values last: JSON, whose strings and nested lists may hold any bracket.
    "input_values": (", values = ", r"(?s), values = (?P<v>\[.*\])$"),
    "input_op_ids": (", input_op_ids = ", r", input_op_ids = (?P<v>\[.*?\])$"),
}
MODULE = r"^nn\.Module: (?P<path>\S*) ?\((?P<type>[^()]*)\)$"
STEP = r"^ProfilerStep#(?P<step>\d+)$"
EVALUATE = "autograd::engine::evaluate_function: "

PARSED_SCHEMA = pa.schema(
    [
        ("op_name", pa.string()),
        ("seq", pa.int64()),
        ("torch_op_id", pa.int64()),
        ("input_shapes", pa.string()),
        ("input_dtypes", pa.string()),
        ("input_values", pa.string()),
        ("input_op_ids", pa.string()),
        ("fwd_tid", pa.int64()),
        ("is_backward", pa.bool_()),
        ("module", pa.string()),
        ("step", pa.int64()),
        ("stack", pa.list_(pa.string())),
    ]
)


# The fast path: a name split on ", " into its op name and decorations, each of which is exactly
# one of these prefixes then 1-18 ASCII digits (field, stashed). Longer prefixes come before the
# ones they start with. Names with any other decoration (sizes, input_op_ids, an op name holding
# ", ", ...) go to the regular expressions.
_SIMPLE = [
    ("seq = ", "seq", False),
    ("op_id = ", "torch_op_id", False),
    ("stashed seq = ", "seq", True),
    ("fwd_tid = ", "fwd_tid", False),
    ("seq= ", "seq", False),
    ("seq =", "seq", False),
    ("seq=", "seq", False),
    ("stashed seq= ", "seq", True),
    ("stashed seq =", "seq", True),
    ("stashed seq=", "seq", True),
]
_INT_FIELDS = ("seq", "torch_op_id", "fwd_tid")
_FIELD_OF_KIND = np.array([_INT_FIELDS.index(field) for (_, field, _) in _SIMPLE])
_PREFIX_LEN = np.array([len(prefix) for (prefix, _, _) in _SIMPLE], dtype=np.int32)
_STASHED_KIND = np.array([prefix.startswith("stashed ") for (prefix, _, _) in _SIMPLE])


def parse(names: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Parse range names column-wise; returns PARSED_SCHEMA columns, one row per name.

    ``module`` is the module path a ``nn.Module:`` range names (for that range only; the
    enclosing module of other ops is derived from the tree in nvbridge.engine.semantics).
    """
    names = one_chunk(names)
    names = names.cast(pa.string()).fill_null("")
    n = len(names)
    cols, node, evaluate = _decorations(names)
    op, demangled = demangle_types(cols.pop("op"))
    stashed = cols.pop("stashed")
    seq = cols["seq"]
    if node is None or evaluate is None or demangled:
        evaluate, node = _backward_marks(op)
    # A node needs a seq; fwd_tid marks a backward node of nvbridge's observer whatever its
    # class name (CopySlices).
    node = pc.and_(node, pc.is_valid(seq))
    is_backward = pc.or_(pc.or_(pc.or_(stashed, node), evaluate), pc.is_valid(cols["fwd_tid"]))

    first_bytes = _first_bytes(names)
    module_path = pa.nulls(n, pa.string())
    op_name = op
    mask, module = _match_prefixed(names, first_bytes, "nn.Module: ", MODULE)
    if module is not None:
        module_path = pc.replace_with_mask(module_path, mask, module.field("path"))
        module_op = pc.binary_join_element_wise("nn.Module:", module.field("type"), " ")
        op_name = pc.replace_with_mask(op, mask, module_op)
    step_no = pa.nulls(n, pa.int64())
    mask, step = _match_prefixed(names, first_bytes, "ProfilerStep#", STEP)
    if step is not None:
        step_no = pc.replace_with_mask(step_no, mask, step.field("step").cast(pa.int64()))

    out: dict[str, Any] = {
        "op_name": op_name,
        "seq": seq,
        "torch_op_id": cols["torch_op_id"],
        "input_shapes": cols["input_shapes"],
        "input_dtypes": cols["input_dtypes"],
        "input_values": cols["input_values"],
        "input_op_ids": cols["input_op_ids"],
        "fwd_tid": cols["fwd_tid"],
        "is_backward": is_backward,
        "module": module_path,
        "step": step_no,
        "stack": pa.nulls(n, pa.list_(pa.string())),
    }
    markers = _rows_starting(names, first_bytes, "{")
    if len(markers):
        pyprof(names, markers, out)
    return pa.table(out, schema=PARSED_SCHEMA)


def _backward_marks(op: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(evaluate_function wrapper, backward node class name) of each op name."""
    evaluate = pc.starts_with(op, EVALUATE)
    # Autograd node class names (AddmmBackward0, NllLossBackward, torch::autograd::CopyBackwards),
    # without a regular expression: trailing digits off, then "Backward(s)".
    trimmed = pc.utf8_rtrim(op, "0123456789")
    return evaluate, pc.or_(pc.ends_with(trimmed, "Backward"), pc.ends_with(trimmed, "Backwards"))


def _match_prefixed(
    names: pa.Array,
    first_bytes: np.ndarray,
    prefix: str,
    pattern: str,
) -> tuple[pa.Array, pa.StructArray | None]:
    """(mask of names matching ``pattern``, their matches in row order), trying the regular
    expression only on names that start with ``prefix``; the matches are None when none match."""
    rows = _rows_starting(names, first_bytes, prefix)
    if not len(rows):
        return pa.array(np.zeros(len(names), dtype=bool)), None
    found = pc.extract_regex(names.take(pa.array(rows)), pattern)
    mask = np.zeros(len(names), dtype=bool)
    mask[rows] = np.asarray(found.is_valid().to_numpy(zero_copy_only=False))
    if not mask.any():
        return pa.array(mask), None
    return pa.array(mask), found.filter(found.is_valid())


def _rows_starting(names: pa.Array, first_bytes: np.ndarray, prefix: str) -> np.ndarray:
    """Row numbers of the names starting with prefix (ASCII), tested only where the first byte is."""
    rows = np.flatnonzero(first_bytes == ord(prefix[0]))
    if len(rows):
        hits = pc.starts_with(names.take(pa.array(rows)), prefix)
        rows = rows[np.asarray(hits.to_numpy(zero_copy_only=False))]
    return rows


def _first_bytes(names: pa.Array) -> np.ndarray:
    """Each name's first byte, 0 for an empty name."""
    _, offsets, data = names.buffers()
    starts = np.frombuffer(offsets, dtype=np.int32)[names.offset : names.offset + len(names) + 1]
    if data is None or not len(data):
        return np.zeros(len(names), dtype=np.uint8)
    data = np.frombuffer(data, dtype=np.uint8)
    firsts = data[np.minimum(starts[:-1], len(data) - 1)]
    firsts[starts[:-1] == starts[1:]] = 0
    return firsts


def _decorations_regex(names: pa.Array) -> dict[str, pa.Array]:
    """op (name without its decorations), seq, stashed and FIELDS by the regular expressions."""
    op = pc.replace_substring_regex(names, DECORATION, "", max_replacements=1)
    seq_match = pc.extract_regex(names, SEQ)
    cols: dict[str, pa.Array] = {
        "op": op,
        "seq": _int_or_null(pc.struct_field(seq_match, "v")),
        "stashed": pc.fill_null(pc.equal(pc.struct_field(seq_match, "stashed"), "stashed "), False),
    }
    for name, (marker, pattern) in FIELDS.items():
        typ = pa.int64() if name in ("torch_op_id", "fwd_tid") else pa.string()
        if pc.any(pc.match_substring(names, marker)).as_py():
            found = pc.struct_field(pc.extract_regex(names, pattern), "v")
            cols[name] = _int_or_null(found) if typ == pa.int64() else found
        else:
            cols[name] = pa.nulls(len(names), typ)
    return cols


def _int_or_null(digits: pa.Array) -> pa.Array:
    """Decimal digits as int64; null past 18 digits (a number no counter reaches, which int64
    may not hold: such a name is not torch's)."""
    fits = pc.less_equal(pc.utf8_length(digits), 18)
    return pc.if_else(fits, digits, pa.scalar(None, pa.string())).cast(pa.int64())


def _decorations(names: pa.Array) -> tuple[dict[str, pa.Array], pa.Array | None, pa.Array | None]:
    """_decorations_regex's columns, without regular expressions for the simple names; and
    (where the compiled splitter ran) each name's backward-node and evaluate-function marks.

    A name is simple when, split on ", ", every part after the first is one of _SIMPLE's
    prefixes then 1-18 ASCII digits: its op is the first part (DECORATION matches at the
    first ", "), and each field is the first part of its kind (the leftmost match). Every
    other name is parsed by _decorations_regex.
    """
    if native is not None:
        return _decorations_native(names)
    return _decorations_arrow(names), None, None


def _decorations_native(names: pa.Array) -> tuple[dict[str, pa.Array], pa.Array, pa.Array]:
    """_decorations by nvbridge._native.split_names: one pass over the names' bytes."""
    assert native is not None
    n = len(names)
    _, offsets, data = names.buffers()
    data = data if data is not None else b""
    op_offsets, op_data, raw_values, raw_flags = native.split_names(offsets, data, names.offset, n)
    values = np.frombuffer(raw_values, np.int64).reshape(len(_INT_FIELDS), n)
    flags = np.frombuffer(raw_flags, np.bool_).reshape(len(_INT_FIELDS) + 4, n)
    found, stashed, complex_rows, node, evaluate = flags[:3], flags[3], flags[4], flags[5], flags[6]
    cols: dict[str, pa.Array] = {
        "op": pa.StringArray.from_buffers(n, pa.py_buffer(op_offsets), pa.py_buffer(op_data)),
    }
    for f, field in enumerate(_INT_FIELDS):
        cols[field] = pa.array(values[f], mask=~found[f]) if found[f].any() else pa.nulls(n, pa.int64())
    cols["stashed"] = pa.array(stashed)
    for field in ("input_shapes", "input_dtypes", "input_values", "input_op_ids"):
        cols[field] = pa.nulls(n, pa.string())
    node_marks, eval_marks = pa.array(node), pa.array(evaluate)
    if complex_rows.any():
        _parse_complex(names, complex_rows, cols)
        # The regular expressions' op names, marked again.
        rows = pa.array(complex_rows)
        eval_complex, node_complex = _backward_marks(cols["op"].filter(rows))
        node_marks = pc.replace_with_mask(node_marks, rows, node_complex)
        eval_marks = pc.replace_with_mask(eval_marks, rows, eval_complex)
    return cols, node_marks, eval_marks


def _decorations_arrow(names: pa.Array) -> dict[str, pa.Array]:
    """_decorations with Arrow kernels and NumPy (where nvbridge._native was not built)."""
    n = len(names)
    parts = pc.split_pattern(names, ", ")
    offsets = parts.offsets.to_numpy()
    first = offsets[:-1] - offsets[0]
    flat = parts.flatten()
    cols: dict[str, pa.Array] = {"op": flat.take(pa.array(first))}
    complex_rows = np.zeros(n, dtype=bool)
    values = {field: np.zeros(n, dtype=np.int64) for field in _INT_FIELDS}
    valid = {field: np.zeros(n, dtype=bool) for field in _INT_FIELDS}
    stashed = np.zeros(n, dtype=bool)
    is_tail = np.ones(len(flat), dtype=bool)
    is_tail[first] = False
    if len(flat) > n:
        kind, left = _part_kinds(flat, first, is_tail)
        parent = np.asarray(pc.list_parent_indices(parts).to_numpy(zero_copy_only=False))
        complex_rows[parent[left]] = True
        known = np.flatnonzero(kind >= 0)
        if len(known):
            # The digits after each known prefix: every other string of an array whose
            # offsets alternate digit starts and ends over flat's own bytes.
            kinds = kind[known]
            flat_offsets = np.frombuffer(flat.buffers()[1], dtype=np.int32)[flat.offset :]
            bounds = np.empty(2 * len(known), dtype=np.int32)
            bounds[0::2] = flat_offsets[known] + _PREFIX_LEN[kinds]
            bounds[1::2] = flat_offsets[known + 1]
            pieces = pa.StringArray.from_buffers(2 * len(known) - 1, pa.py_buffer(bounds), flat.buffers()[2])
            digits = pieces.take(pa.array(np.arange(0, 2 * len(known), 2)))
            good = np.asarray(pc.ascii_is_decimal(digits).to_numpy(zero_copy_only=False))
            good &= bounds[1::2] - bounds[0::2] <= 18
            rows = parent[known]
            if not good.all():
                complex_rows[rows[~good]] = True
                digits = pc.if_else(pa.array(good), digits, "0")
            number = digits.cast(pa.int64()).to_numpy()
            field_of = _FIELD_OF_KIND[kinds]
            for f, field in enumerate(_INT_FIELDS):
                sel = np.flatnonzero(field_of == f)
                if not len(sel):
                    continue
                # The first part of this kind in each row: parts come in row order.
                at = rows[sel]
                lead = np.ones(len(sel), dtype=bool)
                np.not_equal(at[1:], at[:-1], out=lead[1:])
                sel, at = sel[lead], at[lead]
                values[field][at] = number[sel]
                valid[field][at] = True
                if field == "seq":
                    stashed[at] = _STASHED_KIND[kinds[sel]]
    for field in _INT_FIELDS:
        cols[field] = pa.array(values[field], mask=~valid[field]) if valid[field].any() else pa.nulls(n, pa.int64())
    cols["stashed"] = pa.array(stashed)
    for field in ("input_shapes", "input_dtypes", "input_values", "input_op_ids"):
        cols[field] = pa.nulls(n, pa.string())
    if complex_rows.any():
        _parse_complex(names, complex_rows, cols)
    return cols


def _part_kinds(flat: pa.Array, first: np.ndarray, is_tail: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each part's kind (index in _SIMPLE, -1 for none) and the tail parts of no kind."""
    # The two common kinds over all parts, the others over the parts still undecided.
    kind = np.full(len(flat), -1, dtype=np.int8)
    for k in (1, 0):
        kind[np.asarray(pc.starts_with(flat, _SIMPLE[k][0]).to_numpy(zero_copy_only=False))] = k
    kind[first] = -1
    left = np.flatnonzero(is_tail & (kind < 0))
    for k in range(2, len(_SIMPLE)):
        if not len(left):
            break
        hit = np.asarray(pc.starts_with(flat.take(pa.array(left)), _SIMPLE[k][0]).to_numpy(zero_copy_only=False))
        kind[left[hit]] = k
        left = left[~hit]
    return kind, left


def _parse_complex(names: pa.Array, complex_rows: np.ndarray, cols: dict[str, pa.Array]) -> None:
    """Replace the complex rows of ``cols`` by _decorations_regex's columns for them."""
    rows = np.flatnonzero(complex_rows)
    slow = _decorations_regex(names.take(pa.array(rows)))
    mask = pa.array(complex_rows)
    for key, column in slow.items():
        cols[key] = pc.replace_with_mask(cols[key], mask, column.cast(cols[key].type))


def _stem(name: str) -> str:
    """``aten::_native_layer_norm_`` -> ``nativelayernorm``: what a node's class name is built from."""
    base = name.rsplit("::", 1)[-1].lower().replace("_", "")
    trimmed = base.rstrip("0123456789")
    for suffix in ("backwards", "backward"):
        if trimmed.endswith(suffix):
            return trimmed[: -len(suffix)]
    return base


# Nodes whose forward op is named otherwise: CopySlices wraps the in-place op on a view it
# replaces; CopyBackwards comes from copy_; the rest are views or copies torch makes inside ops.
_NODE_OPS = {
    "copyslices": ("", "copy"),  # "" = any in-place op (name ending in "_")
    "copybackwards": ("copy", "contiguous", "to", "clone", "type"),  # ops that call copy_
    "unsafeview": ("reshape", "view", "flatten", "matmul", "linear", "einsum"),
    "expand": ("expandas", "broadcastto", "matmul", "linear"),
}


def fits(node: str, forward: str) -> bool:
    """Could the forward op ``forward`` have made the backward node ``node``?

    ``AddmmBackward0`` fits ``aten::addmm``; ``NativeLayerNormBackward0`` fits
    ``aten::native_layer_norm``; ``MyFnBackward`` fits the custom Function ``MyFn``; a node
    without a ``Backward`` class name fits only the ops listed for it. Used where a backward
    node does not name its forward thread, to refuse links a colliding seq would make.
    """
    op, stem = _stem(forward), _stem(node)
    if op in (stem, stem + "forward"):  # torch 1.x: NllLossBackward <- nll_loss_forward
        return True
    for allowed in _NODE_OPS.get(stem if stem in _NODE_OPS else node.rsplit("::", 1)[-1].lower(), ()):
        if (allowed == "" and forward.endswith("_")) or (allowed and op == allowed):
            return True
    return False
