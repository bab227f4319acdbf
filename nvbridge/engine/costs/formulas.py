"""The FLOP formulas of nvbridge.engine.costs.flops, written as torch.utils.flop_counter writes them.

Each takes input shapes (tuples; ``()`` for a non-tensor argument) and raises ValueError on
shapes it cannot read, which nvbridge.engine.costs.flops turns into "unknown". Bytes are input plus output
tensor sizes at ``elt`` bytes an element for the shapes these formulas derive themselves.
"""

from __future__ import annotations

from math import prod
from typing import Any

Shape = tuple[int, ...]


def numel(shape: Shape) -> int:
    """Elements of a tensor argument; 0 for a non-tensor (record_shapes writes ``[]``)."""
    return prod(shape) if shape else 0


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)


def broadcast(shapes: list[Shape]) -> Shape:
    """The shape NumPy/torch broadcasting gives ``shapes``."""
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    for s in shapes:
        for i, d in enumerate(s, ndim - len(s)):
            _need(d == out[i] or d == 1 or out[i] == 1, "shapes do not broadcast")
            out[i] = d if out[i] == 1 else out[i]
    return tuple(out)


def mm(a: Shape, b: Shape) -> int:
    """torch's mm_flop: 2 m k n."""
    _need(len(a) == 2 and len(b) == 2 and a[1] == b[0], "mm needs (m, k) @ (k, n)")
    return 2 * a[0] * a[1] * b[1]


def bmm(a: Shape, b: Shape) -> int:
    """torch's bmm_flop: 2 b m k n."""
    _need(len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1], "bmm needs (b, m, k) @ (b, k, n)")
    return 2 * a[0] * a[1] * a[2] * b[2]


def matmul(base: str, shapes: list[Shape]) -> tuple[int, Shape]:
    """(FLOPs, output shape) of the matmul family."""
    if base in ("mm", "_scaled_mm"):
        return mm(shapes[0], shapes[1]), (shapes[0][0], shapes[1][1])
    if base == "addmm":
        return mm(shapes[1], shapes[2]), (shapes[1][0], shapes[2][1])
    if base == "bmm":
        return bmm(shapes[0], shapes[1]), (shapes[0][0], shapes[0][1], shapes[1][2])
    if base in ("baddbmm", "addbmm"):
        a, b = shapes[1], shapes[2]
        return bmm(a, b), ((a[0], a[1], b[2]) if base == "baddbmm" else (a[1], b[2]))
    if base == "linear":
        x, w = shapes[0], shapes[1]
        _need(len(x) >= 1 and len(w) in (1, 2) and x[-1] == w[-1], "linear needs (..., k) and (n, k)")
        n = w[0] if len(w) == 2 else 1
        return 2 * prod(x[:-1]) * x[-1] * n, x[:-1] + ((n,) if len(w) == 2 else ())
    a, b = shapes[0], shapes[1]  # matmul, with torch.matmul's 1-D and batch rules
    _need(len(a) >= 1 and len(b) >= 1, "matmul needs tensors")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    _need(a2[-1] == b2[-2], "matmul inner dimensions differ")
    batch = broadcast([a2[:-2], b2[:-2]]) if len(a2) > 2 or len(b2) > 2 else ()
    out = batch + (a2[-2],) * (len(a) > 1) + (b2[-1],) * (len(b) > 1)
    return 2 * prod(batch) * a2[-2] * a2[-1] * b2[-1], out


def conv_flop_count(x: Shape, w: Shape, out: Shape, transposed: bool) -> int:
    """torch's conv_flop_count: multiply-adds over output (input, if transposed) positions."""
    conv_shape = (x if transposed else out)[2:]
    return 2 * prod(conv_shape) * prod(w[2:]) * x[0] * w[0] * w[1]


def _per_dim(value: Any, dims: int) -> list[int]:
    """A conv parameter for every spatial dimension (an int applies to all)."""
    values = [int(value)] * dims if isinstance(value, int) else [int(v) for v in value]
    return values * dims if len(values) == 1 else values


def conv_output(x: Shape, w: Shape, args: dict[str, Any], transposed: bool) -> Shape:
    """Output shape of a convolution from its stride, padding, dilation (and output padding)."""
    _need(all(k in args for k in ("stride", "padding")), "convolution needs stride and padding")
    dims = len(x) - 2
    _need(dims >= 1 and len(w) == len(x), "convolution needs (N, C, ...) and (O, C/g, ...)")
    stride = _per_dim(args["stride"], dims)
    dilation = _per_dim(args.get("dilation", 1), dims)
    kernel = w[2:]
    if args["padding"] == "same":
        return (x[0], w[0]) + x[2:]
    padding = _per_dim(0 if args["padding"] == "valid" else args["padding"], dims)
    groups = int(args.get("groups", 1))
    if transposed:
        extra = _per_dim(args.get("output_padding", 0), dims)
        spatial = [
            (i - 1) * s - 2 * p + d * (k - 1) + e + 1
            for i, s, p, d, k, e in zip(x[2:], stride, padding, dilation, kernel, extra)
        ]
        return (x[0], w[1] * groups, *spatial)
    spatial = [
        (i + 2 * p - d * (k - 1) - 1) // s + 1 for i, s, p, d, k in zip(x[2:], stride, padding, dilation, kernel)
    ]
    return (x[0], w[0], *spatial)


def _transposed_t(shape: Shape) -> Shape:
    return (shape[1], shape[0]) + shape[2:]


def conv_backward_flops(go: Shape, x: Shape, w: Shape, transposed: bool, mask: tuple[bool, bool]) -> int:
    """torch's conv_backward_flop: grad-input as the transposed conv, grad-weight as a conv."""
    flops = 0
    if mask[0]:
        flops += conv_flop_count(go, w, x, not transposed)
    if mask[1]:
        pair = (go, x) if transposed else (x, go)
        flops += conv_flop_count(_transposed_t(pair[0]), _transposed_t(pair[1]), _transposed_t(w), False)
    return flops


def convolution(
    base: str, backward: bool, shapes: list[Shape], args: dict[str, Any], elt: int
) -> tuple[int | None, int | None]:
    """Forward convolution (or its backward node, from the forward's shapes and arguments)."""
    transposed = bool(args.get("transposed", "transpose" in base))
    x, w = shapes[0], shapes[1]
    out = conv_output(x, w, args, transposed)
    if backward:
        return conv_backward_flops(out, x, w, transposed, (True, True)), (prod(out) + 2 * prod(x) + 2 * prod(w)) * elt
    moved = (prod(x) + prod(w) + prod(out)) * elt
    if len(shapes) > 2 and base not in ("cudnn_convolution", "cudnn_convolution_transpose"):
        moved += numel(shapes[2]) * elt
    return conv_flop_count(x, w, out, transposed), moved


def convolution_backward(shapes: list[Shape], args: dict[str, Any], elt: int) -> tuple[int | None, int | None]:
    """``aten::convolution_backward(grad_output, input, weight, ...)``: the shapes give the
    output; without the ``transposed`` argument, the channel counts decide where only one
    layout fits them, and anything ambiguous is unknown. Without ``output_mask``, both the
    input and the weight gradients are counted."""
    go, x, w = shapes[0], shapes[1], shapes[2]
    _need(len(go) == len(x) == len(w) >= 3, "convolution_backward needs (N, C, ...) tensors")
    mask = tuple(args.get("output_mask", (True, True, False)))[:2]
    if "transposed" in args:
        transposed = bool(args["transposed"])
    else:
        plain = go[1] == w[0] and x[1] % w[1] == 0
        trans = x[1] == w[0] and go[1] % w[1] == 0
        _need(plain or trans, "convolution_backward channels fit no layout")
        if plain and trans:
            a = conv_backward_flops(go, x, w, False, (mask[0], mask[1]))
            _need(a == conv_backward_flops(go, x, w, True, (mask[0], mask[1])), "conv layout ambiguous")
        transposed = not plain
    flops = conv_backward_flops(go, x, w, transposed, (bool(mask[0]), bool(mask[1])))
    # Reads grad_output, input and weight; writes grad_input and grad_weight.
    return flops, (prod(go) + 2 * prod(x) + 2 * prod(w)) * elt


def sdpa(q: Shape, k: Shape, v: Shape) -> int:
    """torch's sdpa_flop_count (grouped-query heads too)."""
    _need(len(q) == len(k) == len(v) == 4, "attention needs (b, h, s, d) tensors")
    b, h_q, s_q, d_q = q
    _need(
        k[0] == v[0] == b and k[1] == v[1] and h_q % k[1] == 0 and k[3] == d_q and k[2] == v[2],
        "attention shapes disagree",
    )
    return bmm((b * h_q, s_q, d_q), (b * h_q, d_q, k[2])) + bmm((b * h_q, s_q, k[2]), (b * h_q, k[2], v[3]))


def sdpa_backward(go: Shape, q: Shape, k: Shape, v: Shape) -> int:
    """torch's sdpa_backward_flop_count: the scores recomputed, then four gradient matmuls."""
    sdpa(q, k, v)  # checks the shapes
    _need(
        len(go) == 4 and go[0] == q[0] and go[1] == q[1] and go[2] == q[2] and go[3] == v[3],
        "attention grad_out shape disagrees",
    )
    b, h, s_q, d_q = q
    s_k, d_v = k[2], v[3]
    n = b * h
    return (
        bmm((n, s_q, d_q), (n, d_q, s_k))
        + bmm((n, s_q, d_v), (n, d_v, s_k))
        + bmm((n, s_k, s_q), (n, s_q, d_v))
        + bmm((n, s_q, s_k), (n, s_k, d_q))
        + bmm((n, d_q, s_q), (n, s_q, s_k))
    )


def _fold(shape: Shape) -> Shape:
    """A (..., s, d) attention tensor as (1, heads, s, d) when it is not 4-D."""
    return shape if len(shape) == 4 else (1, prod(shape[:-2]), *shape[-2:])


def attention(base: str, shapes: list[Shape], backward: bool, elt: int) -> tuple[int | None, int | None]:
    """Attention forward (FLOPs of a backward node from its forward shapes); nested (jagged)
    batches, whose lengths only the tensors hold, are unknown."""
    nested_at = {"_flash_attention_forward": 3, "_efficient_attention_forward": 4}.get(base)
    _need(nested_at is None or len(shapes) <= nested_at or not shapes[nested_at], "nested attention")
    q, k, v = (_fold(s) for s in shapes[:3])
    out = (q[0], q[1], q[2], v[3])
    if backward:
        return sdpa_backward(out, q, k, v), (prod(out) + 2 * (prod(q) + prod(k) + prod(v))) * elt
    return sdpa(q, k, v), (prod(q) + prod(k) + prod(v) + prod(out)) * elt


def attention_backward(base: str, shapes: list[Shape], elt: int) -> tuple[int | None, int | None]:
    """The attention backward ops; each names grad_out, q, k, v at its own positions."""
    if base == "flex_attention_backward":
        q, k, v, go = shapes[0], shapes[1], shapes[2], shapes[5]
    else:
        go, q, k, v = shapes[0], shapes[1], shapes[2], shapes[3]
        nested_at = {"_flash_attention_backward": 6, "_efficient_attention_backward": 6}.get(base)
        _need(nested_at is None or len(shapes) <= nested_at or not shapes[nested_at], "nested attention")
    return sdpa_backward(go, q, k, v), (prod(go) + 2 * (prod(q) + prod(k) + prod(v))) * elt


def embedding(shapes: list[Shape], sizes: list[int]) -> tuple[int | None, int | None]:
    """``embedding(weight, indices)``: reads the indices and one weight row each, writes them."""
    weight, indices = shapes[0], shapes[1]
    _need(len(weight) == 2, "embedding needs a 2-D weight")
    rows = prod(indices) * weight[1] * sizes[0]
    return 0, prod(indices) * sizes[1] + 2 * rows


def _einsum_labels(term: str, shape: Shape, ellipsis: int) -> list[tuple[str, int]]:
    """(label, size) per dimension of one operand; ``...`` takes its dimensions right-aligned as
    labels "0", "1", ... (``ellipsis`` of them in the widest operand), as torch broadcasts them."""
    if "..." not in term:
        _need(len(term) == len(shape) and term.isalpha(), "einsum labels do not fit the shape")
        return list(zip(term, shape))
    head, tail = term.split("...", 1)
    dims = len(shape) - len(head) - len(tail)
    _need(dims >= 0 and (head + tail).isalpha(), "einsum labels do not fit the shape")
    middle = [str(i) for i in range(ellipsis - dims, ellipsis)]
    return list(zip([*head, *middle, *tail], shape))


def einsum(equation: str, shapes: list[Shape], sizes: list[int], elt: int) -> tuple[int | None, int | None]:
    """Two-operand ``einsum`` as torch computes it (aten's einsum -> sumproduct_pair -> bmm): a
    label not in the output that only one operand has above size 1 is summed first (not counted);
    the bmm multiplies batch (in both and the output), left-only, right-only and contracted
    labels: 2 * their sizes' product, what FlopCounterMode counts. Without a contracted label
    torch multiplies elementwise (``mul``), which FlopCounterMode does not count: unknown here, as
    are one or three and more operands (torch may reorder those) and repeated labels (diagonals)."""
    tensors = [(s, b) for s, b in zip(shapes, sizes) if s]
    text = equation.replace(" ", "")
    inputs, arrow, output = text.partition("->")
    terms = inputs.split(",")
    _need(len(terms) == 2 == len(tensors), "einsum of other than two operands")
    ellipsis = (
        max(len(s) - len(t.replace("...", "")) for t, (s, _) in zip(terms, tensors) if "..." in t)
        if ("..." in inputs)
        else 0
    )
    a, b = (dict(_einsum_labels(t, s, ellipsis)) for t, (s, _) in zip(terms, tensors))
    for term, labels in zip(terms, (a, b)):
        _need(len(labels) == len(term.replace("...", "")) + sum(k.isdigit() for k in labels), "einsum diagonal")
    if arrow:
        out = [*output.replace("...", "".join(str(i) for i in range(ellipsis)))]
    else:  # implicit: the broadcast dimensions, then labels seen once, alphabetically
        once = [k for k in {**a, **b} if not k.isdigit() and (k in a) != (k in b)]
        out = [str(i) for i in range(ellipsis)] + sorted(once)
    out = [k for k in out if k in a or k in b]
    multiplied, contracted = 1, False
    for label in {**a, **b}:
        left, right = a.get(label, 1), b.get(label, 1)
        _need(left == right or left == 1 or right == 1, "einsum sizes do not broadcast")
        if label in out:
            multiplied *= max(left, right)
        elif left > 1 and right > 1:
            multiplied *= left
            contracted = True
    _need(contracted, "einsum without a contracted label: torch multiplies elementwise")
    result = prod(max(a.get(k, 1), b.get(k, 1)) for k in out)
    return 2 * multiplied, sum(prod(s) * n for s, n in tensors) + result * elt
