"""The grammars of old captures, parsed per distinct name (they are rare; nvbridge.engine.names reads
every other one column-wise): NVIDIA PyProf's dict markers (``{'mod': 'torch', 'op':
'embedding', 'args': [...]}`` and ``{'traceMarker': [...]}``, read with ``ast.literal_eval``)
and torch 0.4/1.0 C++ autograd nodes named as ``typeid`` gives them (``N5torch8autograd5CloneE``,
nvprof 2018 reports), demangled with cxxfilt.
"""

from __future__ import annotations

import ast
import json
from typing import Any

import cxxfilt
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["MANGLED_TYPE", "demangle_types", "pyprof"]


# An Itanium-mangled nested type name (what ``typeid(...).name()`` gives): N, then length-prefixed
# identifiers (two or more: N...E encodes a nested name), then E. torch 0.4 and 1.0 named C++
# autograd nodes so (nvprof 2018 reports).
MANGLED_TYPE = r"^N(?:[1-9][0-9]*[A-Za-z_][A-Za-z0-9_]*){2,}E$"


def demangle_types(op: pa.Array) -> tuple[pa.Array, bool]:
    """``op`` with mangled type names (MANGLED_TYPE) demangled, each distinct one once; and
    whether any was. A name cxxfilt refuses stays as it is."""
    if not len(op) or not pc.any(pc.starts_with(op, "N")).as_py():
        return op, False
    mask = pc.fill_null(pc.match_substring_regex(op, MANGLED_TYPE), False)
    if not pc.any(mask).as_py():
        return op, False
    found = op.filter(mask).dictionary_encode()
    readable = pa.array([_demangled(str(text)) for text in found.dictionary.to_pylist()], pa.string())
    return pc.replace_with_mask(op, mask, readable.take(found.indices)), True


def _demangled(text: str) -> str:
    """``N5torch8autograd5CloneE`` -> ``torch::autograd::Clone``; ``text`` if it is not a type name."""
    try:
        return str(cxxfilt.demangle(text, external_only=False))
    except Exception:  # cxxfilt raises its own errors on anything __cxa_demangle rejects
        return text


def _shape_text(args: list[Any]) -> tuple[str, str, str]:
    """PyProf's argument list as torch's ``sizes`` text (tensors' shapes, ``[]`` otherwise),
    nvbridge's ``dtypes`` text (tensors' dtypes, ``-`` otherwise) and the other arguments'
    values as JSON (``null`` for tensors; a named argument as ``{"stride": [1, 1]}``)."""
    dims, dtypes, values = [], [], []
    for arg in args:
        tensor = isinstance(arg, dict) and arg.get("type") == "tensor"
        shape = arg.get("shape") if tensor else None
        dims.append("[" + ", ".join(str(d) for d in shape) + "]" if shape is not None else "[]")
        dtypes.append(str(arg.get("dtype", "-")) if tensor else "-")
        value = None if tensor or not isinstance(arg, dict) else arg.get("value")
        values.append({arg["name"]: value} if isinstance(arg, dict) and arg.get("name") else value)
    return "[" + ", ".join(dims) + "]", "[" + ", ".join(dtypes) + "]", json.dumps(values, default=str)


_NOT_A_MARKER: tuple[None, None, None, None, None] = (None, None, None, None, None)


def _marker_fields(text: str) -> tuple[str | None, str | None, str | None, str | None, list[str] | None]:
    """(op_name, input_shapes, input_dtypes, input_values, stack) of one PyProf dict marker;
    Nones where it is not one."""
    try:
        marker = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return _NOT_A_MARKER
    if not isinstance(marker, dict):
        return _NOT_A_MARKER
    if "traceMarker" in marker and isinstance(marker["traceMarker"], list):
        return "traceMarker", None, None, None, [str(frame) for frame in marker["traceMarker"]]
    if "op" in marker:
        mod = marker.get("mod")
        shapes, dtypes, values = (
            _shape_text(marker["args"]) if isinstance(marker.get("args"), list) else (None, None, None)
        )
        return (f"{mod}.{marker['op']}" if mod else str(marker["op"])), shapes, dtypes, values, None
    return _NOT_A_MARKER


def pyprof(names: pa.Array, rows: np.ndarray, cols: dict[str, Any]) -> None:
    """Fill op_name / input_shapes / input_dtypes / input_values / stack for NVIDIA PyProf's
    dict markers (old captures).

    Each distinct marker text is evaluated once: a training loop repeats the same markers
    every iteration (``literal_eval`` costs about 13 us a marker).
    """
    op_name = cols["op_name"].to_pylist()
    shapes = cols["input_shapes"].to_pylist()
    dtypes = cols["input_dtypes"].to_pylist()
    values = cols["input_values"].to_pylist()
    stack: list[list[str] | None] = [None] * len(names)
    texts = names.take(pa.array(rows)).dictionary_encode()
    fields = [_marker_fields(text) for text in texts.dictionary.to_pylist()]
    for i, which in zip(rows, texts.indices.to_pylist()):
        name, shape, dtype, value, frames = fields[which]
        if name is None:
            continue
        op_name[i] = name
        if shape is not None:
            shapes[i], dtypes[i], values[i] = shape, dtype, value
        if frames is not None:
            stack[i] = frames
    cols["op_name"] = pa.array(op_name, pa.string())
    cols["input_shapes"] = pa.array(shapes, pa.string())
    cols["input_dtypes"] = pa.array(dtypes, pa.string())
    cols["input_values"] = pa.array(values, pa.string())
    cols["stack"] = pa.array(stack, pa.list_(pa.string()))
