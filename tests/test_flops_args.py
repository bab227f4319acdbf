# ruff: noqa: B023  (each lambda runs inside counted(), before its loop moves on)
"""FLOPs from recorded argument values (emit_nvtx's ``values = [...]``, nvbridge.engine.costs.args):
every convolution kernel torch dispatches to, read in its own schema's order, the backward's
output mask, einsum, baddbmm's beta, and the CPU flash-attention kernels, against
FlopCounterMode (or torch's own registered formula where its registry lacks the op)."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

torch = pytest.importorskip("torch")
from torch.utils import flop_counter  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from nvbridge.engine.costs.args import PARAMETERS  # noqa: E402
from nvbridge.engine.costs.flops import _cost_of_text, op_cost  # noqa: E402
from nvbridge.engine.costs.tables import SDPA_BWD, SDPA_FWD  # noqa: E402
from tests.torch_counts import counted, t  # noqa: E402

aten = torch.ops.aten


# (input, weight, stride, padding, dilation, transposed, output_padding, groups)
CASES = [
    ((2, 4, 12, 10), (6, 2, 3, 3), [2, 1], [1, 0], [1, 2], False, [0, 0], 2),
    ((2, 3, 9, 9), (5, 3, 3, 3), [2, 2], [1, 1], [1, 1], False, [0, 0], 1),
    ((2, 6, 9, 9), (6, 1, 3, 3), [1, 2], [1, 1], [2, 1], False, [0, 0], 6),  # depthwise
    ((1, 3, 6, 7, 8), (4, 3, 3, 2, 3), [1, 2, 1], [1, 1, 0], [1, 1, 1], False, [0, 0, 0], 1),
    ((2, 4, 5, 5), (4, 3, 3, 3), [2, 2], [1, 1], [1, 1], True, [1, 0], 1),
    ((2, 6, 5, 6), (6, 2, 3, 2), [2, 1], [1, 0], [1, 2], True, [1, 0], 3),
    ((1, 4, 3, 4, 4), (4, 2, 2, 3, 3), [1, 2, 2], [0, 1, 1], [1, 1, 1], True, [0, 1, 0], 1),
]


def _schema_values(op: str, case: tuple[Any, ...]) -> tuple[list[list[int]], list[Any]] | None:
    """The sizes and values entries emit_nvtx records for ``aten::op`` on ``case``, built from
    torch's own schema of the op (argument names), None where the op cannot take the case."""
    x, w, stride, padding, dilation, transposed, output_padding, groups = case
    schema = getattr(aten, op).overloads()
    args = getattr(getattr(aten, op), "default" if "default" in schema else schema[0])._schema.arguments
    names = [a.name for a in args if a.name != "out"]
    if ("transpose" in op) != transposed and "transposed" not in names:
        return None
    if "groups" not in names and groups != 1 and not ("depthwise" in op and groups == x[1]):
        return None
    if len(x) == 5 and ("2d" in op or op in ("mkldnn_convolution",)):
        return None
    if len(x) == 4 and "3d" in op:
        return None
    known = {
        "stride": stride,
        "padding": padding,
        "dilation": dilation,
        "transposed": transposed,
        "output_padding": output_padding,
        "groups": groups,
        "kernel_size": list(w[2:]),
        "alpha": 1.0,
    }
    sizes: list[list[int]] = []
    values: list[Any] = []
    for name in names:
        if name in ("self", "input", "weight"):
            sizes.append(list(x if name != "weight" else w))
            values.append(None)
        elif name == "z":  # a fused add's other operand: the output's shape
            x_, w_ = torch.empty(x, device="meta"), torch.empty(w, device="meta")
            sizes.append(list(aten.convolution(x_, w_, None, *case[2:]).shape))
            values.append(None)
        else:
            sizes.append([])
            values.append(known.get(name, False if name in ("benchmark", "deterministic", "allow_tf32") else None))
    if "dilation" not in names and dilation != [1] * len(dilation):
        return None
    if op == "_nnpack_spatial_convolution" and stride != [1] * len(stride):
        values[names.index("stride")] = stride
    return sizes, values


CONV_OPS = sorted(op for op, (first, _) in PARAMETERS.items() if "conv" in op and op != "convolution_backward")


@pytest.mark.parametrize("op", CONV_OPS)
def test_every_convolution_reads_its_own_schema(op: str) -> None:
    """The values of each kernel, in its schema's order, give aten.convolution's FLOPs."""
    if not hasattr(aten, op):
        pytest.skip(f"this torch has no aten::{op}")
    tried = 0
    for case in CASES:
        recorded = _schema_values(op, case)
        if recorded is None:
            continue
        sizes, values = recorded
        x, w = torch.randn(case[0]), torch.randn(case[1])
        expected = counted(lambda: aten.convolution(x, w, None, *case[2:]))
        got = _cost_of_text(f"aten::{op}", json.dumps(sizes), None, json.dumps(values)).flops
        assert got == expected > 0, (op, case)
        tried += 1
    assert tried >= 1


def test_conv_padding_strings() -> None:
    """``conv2d.padding`` and ``_convolution_mode`` take "same" / "valid"."""
    x, w = torch.randn(2, 4, 9, 9), torch.randn(6, 4, 3, 3)
    for padding in ("same", "valid"):
        expected = counted(lambda: torch.nn.functional.conv2d(x, w, padding=padding))
        for op in ("aten::conv2d", "aten::_convolution_mode"):
            values = [None, None, None, [1, 1], padding, [1, 1], 1]
            sizes = [list(x.shape), list(w.shape), [], [], [], [], []]
            assert _cost_of_text(op, json.dumps(sizes), None, json.dumps(values)).flops == expected > 0


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("mask", [[True, True, False], [False, True, True], [True, False, False]], ids=str)
def test_convolution_backward_reads_its_output_mask(case: tuple[Any, ...], mask: list[bool]) -> None:
    """A first layer's backward computes no input gradient: the recorded mask says so."""
    x, w = torch.randn(case[0]), torch.randn(case[1])
    go = torch.randn_like(aten.convolution(x, w, None, *case[2:]))
    params = list(case[2:])
    expected = counted(lambda: aten.convolution_backward(go, x, w, None, *params, mask))
    sizes = [list(go.shape), list(x.shape), list(w.shape)] + [[]] * 8
    values = [None, None, None, None, *params, mask]
    assert _cost_of_text("aten::convolution_backward", json.dumps(sizes), None, json.dumps(values)).flops == expected


EQUATIONS = [
    ("bld,bmd->blm", (2, 10, 16), (2, 12, 16)),
    ("ij,jk->ik", (3, 4), (4, 5)),
    ("ij,jk", (3, 4), (4, 5)),
    ("...ij,...jk->...ik", (7, 2, 3, 4), (2, 4, 5)),
    ("...ij,...jk", (2, 3, 4), (4, 5)),
    ("bhqd,bhkd->bhqk", (2, 4, 5, 8), (2, 4, 6, 8)),
    ("ijk,jl->il", (3, 4, 5), (4, 6)),
    ("ij,ij->", (3, 4), (3, 4)),
    ("ijk,ikl->ijl", (1, 3, 4), (5, 4, 2)),
    ("b i d, b j d -> b i j", (2, 3, 4), (2, 5, 4)),
]


@pytest.mark.parametrize(("equation", "a", "b"), EQUATIONS)
def test_einsum_counts_the_bmm_torch_runs(equation: str, a: tuple[int, ...], b: tuple[int, ...]) -> None:
    x, y = torch.randn(a), torch.randn(b)
    expected = counted(lambda: torch.einsum(equation, x, y))
    cost = op_cost("aten::einsum", [(), a, b, ()], None, {"equation": equation})
    assert cost.flops == expected > 0
    assert cost.bytes == 4 * (x.numel() + y.numel() + torch.einsum(equation, x, y).numel())


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [("ij,ij->ij", [(3, 4), (3, 4)]), ("i,j->ij", [(3,), (4,)]), ("ii->i", [(3, 3)]), ("ij,jk,kl->il", [(2, 3)] * 3)],
)
def test_einsum_torch_does_not_run_as_a_matmul_is_unknown(equation: str, shapes: list[tuple[int, ...]]) -> None:
    """No contracted label (torch multiplies elementwise: FlopCounterMode counts 0), one operand,
    or several (torch may reorder them): unknown, never a guess."""
    assert op_cost("aten::einsum", [(), *shapes, ()], None, {"equation": equation}).flops is None


def test_baddbmm_with_beta_zero_reads_no_input() -> None:
    a, b, c = torch.randn(2, 3, 5), torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    sizes = json.dumps([[2, 3, 5], [2, 3, 4], [2, 4, 5], [], []])
    one = _cost_of_text("aten::baddbmm", sizes, None, json.dumps([None, None, None, 1, 1]))
    zero = _cost_of_text("aten::baddbmm", sizes, None, json.dumps([None, None, None, 0.0, 2]))
    assert one.flops == zero.flops == counted(lambda: torch.baddbmm(a, b, c, beta=0.0))
    assert one.bytes == 4 * (a.numel() + b.numel() + c.numel() + a.numel())
    assert zero.bytes == one.bytes - 4 * a.numel()


@pytest.mark.parametrize(("q", "k"), [((2, 4, 8, 16), (2, 4, 10, 16)), ((1, 8, 5, 8), (1, 2, 7, 8))])
def test_cpu_flash_attention_counts_as_torchs_flash_formula(q: tuple[int, ...], k: tuple[int, ...]) -> None:
    """FlopCounterMode's registry lacks the CPU flash kernel and its backward: torch's formulas
    for the CUDA flash kernel (same leading arguments), run on the CPU op's real calls."""
    query, key = torch.randn(q, requires_grad=True), torch.randn(k, requires_grad=True)
    value = torch.randn(k, requires_grad=True)
    mapping = {
        aten._scaled_dot_product_flash_attention_for_cpu: cast(Any, flop_counter.sdpa_flop).__wrapped__,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: cast(
            Any, flop_counter.sdpa_backward_flop
        ).__wrapped__,
    }
    with FlopCounterMode(display=False, custom_mapping=mapping) as mode:
        out = torch.nn.functional.scaled_dot_product_attention(query, key, value, enable_gqa=q[1] != k[1])
        out.sum().backward()
    counts = {str(op): n for op, n in mode.get_flop_counts()["Global"].items()}
    forward = op_cost("aten::_scaled_dot_product_flash_attention_for_cpu", [q, k, k, (), (), (), ()]).flops
    backward = op_cost(
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward", [tuple(out.shape), q, k, k, tuple(out.shape)]
    ).flops
    assert forward == counts["aten._scaled_dot_product_flash_attention_for_cpu"] > 0
    assert backward == counts["aten._scaled_dot_product_flash_attention_for_cpu_backward"] > 0
    # The composite is not counted: it holds one of the kernels (or, on the math path, bmm).
    assert op_cost("aten::scaled_dot_product_attention", [q, k, k, (), (), (), ()]).flops is None


OUTSIDE_THE_REGISTRY = sorted(
    name
    for name in SDPA_FWD | SDPA_BWD
    if not name.startswith("flex_") and getattr(aten, name, None) not in flop_counter.flop_registry
)


@pytest.mark.parametrize("name", OUTSIDE_THE_REGISTRY)
def test_attention_kernels_outside_the_registry_use_torchs_formulas(name: str) -> None:
    """Kernels FlopCounterMode's registry does not name (CPU flash, other backends' fused kernel,
    MPS's math kernel, their backward): torch's sdpa formulas on the same leading arguments
    (query, key, value; grad_out, query, key, value), grouped-query heads too."""
    q, k = (2, 4, 8, 16), (2, 2, 10, 16)
    sdpa = cast(Any, flop_counter.sdpa_flop).__wrapped__
    sdpa_backward = cast(Any, flop_counter.sdpa_backward_flop).__wrapped__
    if name in SDPA_BWD:
        assert op_cost(f"aten::{name}", [q, q, k, k]).flops == sdpa_backward(q, q, k, k, out_shape=None) > 0
    else:
        assert op_cost(f"aten::{name}", [q, k, k]).flops == sdpa(q, k, k, out_shape=None) > 0


@pytest.mark.parametrize(
    ("fn", "name", "weight", "values"),
    [
        (
            torch.nn.functional.conv2d,
            "torch.nn.functional.conv2d",
            (4, 2, 3, 3),
            [None, None, None, [2, 1], [1, 0], [1, 2], 2],
        ),
        (torch.nn.functional.conv2d, "torch.nn.functional.conv2d", (4, 4, 3, 3), [None, None]),  # stride 1, padding 0
        (
            torch.nn.functional.conv_transpose2d,
            "torch.nn.functional.conv_transpose2d",
            (4, 3, 3, 3),
            [None, None, None, {"stride": [2, 2]}, {"output_padding": 1}],
        ),
    ],
)
def test_recorded_argument_values_give_convolution_flops(
    fn: Any, name: str, weight: tuple[int, ...], values: list[Any]
) -> None:
    """PyProf records non-tensor values (nvbridge's input_values, as JSON); named ones by name."""
    import json

    from nvbridge.engine.costs.flops import _cost_of_text, call_args

    x, w = t(2, 4, 9, 10), t(*weight)
    kwargs = call_args(name, values)
    kwargs.pop("transposed", None)
    expected = counted(lambda: fn(x, w, None, **kwargs))
    shapes = json.dumps([list(x.shape), list(w.shape)] + [[] for _ in values[2:]])
    assert _cost_of_text(name, shapes, None, json.dumps(values)).flops == expected > 0
