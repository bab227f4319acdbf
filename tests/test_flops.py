# ruff: noqa: B023  (each lambda runs inside counted(), before its loop moves on)
"""nvbridge.engine.costs.flops against torch.utils.flop_counter.FlopCounterMode: every op in torch's registry,
several shapes each, forward and backward; bytes against tensors built here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch.utils.flop_counter import flop_registry  # noqa: E402

from nvbridge.engine.costs.flops import op_cost  # noqa: E402
from tests.torch_counts import counted, shapes_of, t  # noqa: E402

aten = torch.ops.aten


def ours(name: str, *args: Any, params: dict[str, Any] | None = None) -> int | None:
    return op_cost(name, shapes_of(*args), None, params).flops


MATMULS = [((3, 4), (4, 5)), ((64, 128), (128, 32)), ((1, 7), (7, 1))]
BATCHED = [((2, 3, 4), (2, 4, 5)), ((8, 16, 64), (8, 64, 16))]
# (input, weight, stride, padding, dilation, transposed, output_padding, groups)
CONVS = [
    ((2, 3, 16), (8, 3, 3), [1], [0], [1], False, [0], 1),
    ((2, 4, 12, 10), (6, 2, 3, 3), [2, 1], [1, 0], [1, 2], False, [0, 0], 2),
    ((1, 3, 6, 7, 8), (4, 3, 3, 2, 3), [1, 2, 1], [1, 1, 0], [1, 1, 1], False, [0, 0, 0], 1),
    ((2, 4, 5, 5), (4, 3, 3, 3), [2, 2], [1, 1], [1, 1], True, [1, 0], 1),
    ((2, 6, 9), (6, 2, 4), [3], [2], [1], True, [1], 3),
]
# (q, k, v) as (batch, heads, seq, dim); the last has grouped key/value heads.
ATTN = [((2, 4, 8, 16), (2, 4, 10, 16), (2, 4, 10, 12)), ((1, 8, 5, 8), (1, 2, 7, 8), (1, 2, 7, 8))]


def conv_params(case: tuple[Any, ...]) -> dict[str, Any]:
    _, _, stride, padding, dilation, transposed, output_padding, groups = case
    return {
        "stride": stride,
        "padding": padding,
        "dilation": dilation,
        "transposed": transposed,
        "output_padding": output_padding,
        "groups": groups,
    }


def conv_inputs(case: tuple[Any, ...], device: str = "cpu", grad: bool = False) -> tuple[Any, Any]:
    return t(*case[0], device=device, grad=grad), t(*case[1], device=device, grad=grad)


def check_mm(name: str, op: Any, bias: bool, batched: bool) -> None:
    for a_shape, b_shape in BATCHED if batched else MATMULS:
        a, b = t(*a_shape), t(*b_shape)
        args = (t(b_shape[-1]), a, b) if bias else (a, b)
        assert ours(name, *args) == counted(lambda: op(*args)) > 0


def check_conv(name: str, op: Any) -> None:
    for case in CONVS:
        x, w = conv_inputs(case)
        p = conv_params(case)
        expected = counted(
            lambda: aten.convolution(
                x, w, None, p["stride"], p["padding"], p["dilation"], p["transposed"], p["output_padding"], p["groups"]
            )
        )
        if op in (aten.convolution, aten._convolution):
            extra = (False, False, False, False) if op is aten._convolution else ()
            args = (
                x,
                w,
                None,
                p["stride"],
                p["padding"],
                p["dilation"],
                p["transposed"],
                p["output_padding"],
                p["groups"],
                *extra,
            )
            assert counted(lambda: op(*args)) == expected
        assert ours(name, x, w, params=p) == expected > 0


def check_conv_backward(name: str, op: Any) -> None:
    for case in CONVS:
        x, w = conv_inputs(case)
        p = conv_params(case)
        out = aten.convolution(
            x, w, None, p["stride"], p["padding"], p["dilation"], p["transposed"], p["output_padding"], p["groups"]
        )
        go = torch.randn_like(out)
        for mask in ([True, True, False], [True, False, False], [False, True, True]):
            expected = counted(
                lambda: op(
                    go,
                    x,
                    w,
                    None,
                    p["stride"],
                    p["padding"],
                    p["dilation"],
                    p["transposed"],
                    p["output_padding"],
                    p["groups"],
                    mask,
                )
            )
            assert ours(name, go, x, w, params={**p, "output_mask": mask}) == expected > 0
        # Shapes alone (torch's record_shapes): the layout from the channels, both gradients.
        guess = ours(name, go, x, w)
        assert guess is None or guess == counted(
            lambda: op(
                go,
                x,
                w,
                None,
                p["stride"],
                p["padding"],
                p["dilation"],
                p["transposed"],
                p["output_padding"],
                p["groups"],
                [True, True, False],
            )
        )
        # The autograd node, from the forward op's shapes and arguments.
        xg, wg = conv_inputs(case, grad=True)
        y = aten.convolution(
            xg, wg, None, p["stride"], p["padding"], p["dilation"], p["transposed"], p["output_padding"], p["groups"]
        )
        assert ours("ConvolutionBackward0", xg, wg, params=p) == counted(lambda: y.backward(torch.ones_like(y)))


def sdpa_forward(op: Any, q: Any, k: Any, v: Any) -> Any:
    if op is aten._scaled_dot_product_efficient_attention or op is aten._scaled_dot_product_cudnn_attention:
        return op(q, k, v, None, True)
    if op is aten._flash_attention_forward:
        return op(q, k, v, None, None, q.shape[2], k.shape[2], 0.0, False, False)
    if op is aten._efficient_attention_forward:
        return op(q, k, v, None, None, None, q.shape[2], k.shape[2], 0.0, 0, False)
    return op(q, k, v)


def check_sdpa(name: str, op: Any) -> None:
    for shapes in ATTN:
        q, k, v = (t(*s, device="meta") for s in shapes)
        if q.shape[1] != k.shape[1] and op in (aten._flash_attention_forward, aten._efficient_attention_forward):
            continue  # these kernels take equal head counts
        assert ours(name, q, k, v) == counted(lambda: sdpa_forward(op, q, k, v)) > 0


def _seed() -> Any:
    return torch.empty(2, dtype=torch.int64, device="meta")


SDPA_BACKWARD = {
    aten._scaled_dot_product_efficient_attention_backward: (
        aten._scaled_dot_product_efficient_attention,
        lambda go, q, k, v, o, lse: (go, q, k, v, None, o, lse, _seed(), _seed(), 0.0, [True, True, True, False]),
    ),
    aten._scaled_dot_product_flash_attention_backward: (
        aten._scaled_dot_product_flash_attention,
        lambda go, q, k, v, o, lse: (
            go,
            q,
            k,
            v,
            o,
            lse,
            None,
            None,
            q.shape[2],
            k.shape[2],
            0.0,
            False,
            _seed(),
            _seed(),
        ),
    ),
    aten._scaled_dot_product_cudnn_attention_backward: (
        aten._scaled_dot_product_cudnn_attention,
        lambda go, q, k, v, o, lse: (
            go,
            q,
            k,
            v,
            o,
            lse,
            _seed(),
            _seed(),
            None,
            None,
            None,
            q.shape[2],
            k.shape[2],
            0.0,
            False,
        ),
    ),
    aten._flash_attention_backward: (
        None,
        lambda go, q, k, v, o, lse: (
            go,
            q,
            k,
            v,
            o,
            lse,
            None,
            None,
            q.shape[2],
            k.shape[2],
            0.0,
            False,
            _seed(),
            _seed(),
        ),
    ),
    aten._efficient_attention_backward: (
        None,
        lambda go, q, k, v, o, lse: (
            go,
            q,
            k,
            v,
            None,
            o,
            None,
            None,
            q.shape[2],
            k.shape[2],
            lse,
            0.0,
            _seed(),
            _seed(),
            0,
            False,
        ),
    ),
}
NODE = {
    aten._scaled_dot_product_efficient_attention: "ScaledDotProductEfficientAttentionBackward0",
    aten._scaled_dot_product_flash_attention: "ScaledDotProductFlashAttentionBackward0",
    aten._scaled_dot_product_cudnn_attention: "ScaledDotProductCudnnAttentionBackward0",
}


def check_sdpa_backward(name: str, op: Any) -> None:
    forward, arguments = SDPA_BACKWARD[op]
    for shapes in ATTN[:1]:
        q, k, v = (t(*s, device="meta") for s in shapes)
        o = torch.empty(q.shape[0], q.shape[1], q.shape[2], v.shape[3], device="meta")
        go = torch.randn_like(o)
        lse = torch.empty(q.shape[0], q.shape[1], q.shape[2], device="meta")
        expected = counted(lambda: op(*arguments(go, q, k, v, o, lse)))  # type: ignore[no-untyped-call]
        assert ours(name, go, q, k, v) == expected > 0
        if forward is not None:
            # The autograd node carries the forward op's shapes: (q, k, v, ...).
            assert ours(NODE[forward], q, k, v) == expected


def check_scaled_mm(name: str, op: Any) -> None:
    for m, k, n in ((16, 32, 16), (32, 64, 48)):
        a = torch.empty(m, k, device="meta", dtype=torch.float8_e4m3fn)
        b = torch.empty(n, k, device="meta", dtype=torch.float8_e4m3fn).t()
        one = torch.empty((), device="meta")
        assert ours(name, a, b, one, one) == counted(lambda: op(a, b, one, one, out_dtype=torch.bfloat16)) > 0


def check_flex(name: str, op: Any) -> None:
    # FlopCounterMode cannot run flex attention (a higher-order op) on a CPU build: torch's
    # registered formula, which the mode would call, is the reference.
    for q_shape, k_shape, v_shape in ATTN:
        q, k, v = t(*q_shape), t(*k_shape), t(*v_shape)
        if name == "flex_attention":
            expected = flop_registry[op](q, k, v)
            assert ours(name, q, k, v) == expected > 0
        else:
            out = torch.empty(*q_shape[:3], v_shape[3])
            lse = torch.empty(*q_shape[:3])
            expected = flop_registry[op](q, k, v, out, lse, torch.randn_like(out))
            assert ours(name, q, k, v, out, lse, out) == expected > 0


CHECKS: dict[str, Callable[[str, Any], None]] = {
    "mm": lambda n, op: check_mm(n, op, False, False),
    "addmm": lambda n, op: check_mm(n, op, True, False),
    "bmm": lambda n, op: check_mm(n, op, False, True),
    "baddbmm": lambda n, op: check_mm(n, op, True, True),
    "_scaled_mm": check_scaled_mm,
    "convolution_backward": check_conv_backward,
    "flex_attention": check_flex,
    "flex_attention_backward": check_flex,
}


def check_for(name: str) -> Callable[[str, Any], None]:
    base = name.split("::")[-1].split(".")[-1]
    if base in CHECKS:
        return CHECKS[base]
    if "conv" in base:
        return check_conv
    if base.endswith("_backward"):
        return check_sdpa_backward
    return check_sdpa


@pytest.mark.parametrize("op", list(flop_registry), ids=str)
def test_every_registry_op_counts_as_torch_does(op: Any) -> None:
    name = "aten::" + str(op).split(".", 1)[1] if str(op).startswith("aten.") else str(op)
    check_for(name)(name, op)


@pytest.mark.parametrize(
    ("node", "forward", "bias", "batched"),
    [
        ("MmBackward0", torch.mm, False, False),
        ("AddmmBackward0", torch.addmm, True, False),
        ("BmmBackward0", torch.bmm, False, True),
        ("BaddbmmBackward0", torch.baddbmm, True, True),
    ],
)
def test_matmul_backward_nodes_count_as_torch_does(node: str, forward: Any, bias: bool, batched: bool) -> None:
    for a_shape, b_shape in BATCHED if batched else MATMULS:
        a, b = t(*a_shape, grad=True), t(*b_shape, grad=True)
        args = (t(b_shape[-1], grad=True), a, b) if bias else (a, b)
        y = forward(*args)
        assert ours(node, *args) == counted(lambda: y.backward(torch.ones_like(y))) > 0
