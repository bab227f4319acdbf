"""nvbridge.engine.costs.flops' bytes against tensors built here (inputs read plus output
written), the ops it does not know, and the costs a backward node inherits from its forward op
through the engine. tests/test_flops.py checks the FLOPs against FlopCounterMode."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from nvbridge.engine.costs.flops import op_cost  # noqa: E402
from tests.torch_counts import counted, shapes_of  # noqa: E402


def dtype_name(x: Any) -> str:
    return str(x.dtype).removeprefix("torch.")


def tensor_bytes(*tensors: Any) -> int:
    return sum(x.numel() * x.element_size() for x in tensors)


ELEMENTWISE = [
    ("aten::add", lambda a, b: torch.add(a, b), 2),
    ("aten::mul_", lambda a, b: a.mul_(b), 2),
    ("aten::relu", torch.relu, 1),
    ("aten::sigmoid", torch.sigmoid, 1),
    ("aten::clone", torch.clone, 1),
    ("aten::gt", lambda a, b: torch.gt(a, b), 2),
    ("Tensor.__iadd__", lambda a, b: a.__iadd__(b), 2),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("name", "fn", "arity"), ELEMENTWISE, ids=[e[0] for e in ELEMENTWISE])
def test_elementwise_bytes_are_inputs_plus_output(name: str, fn: Any, arity: int, dtype: Any) -> None:
    for shapes in (((4, 5), (4, 5)), ((3, 1, 6), (6,)), ((8,), (8,))):
        inputs = [torch.randn(*s).to(dtype) for s in shapes[:arity]]
        expected_in = tensor_bytes(*inputs)
        out = fn(*inputs)
        cost = op_cost(name, shapes_of(*inputs), [dtype_name(x) for x in inputs])
        assert cost.bytes == expected_in + tensor_bytes(out)
        assert cost.flops == (0 if name == "aten::clone" else out.numel())
        assert cost.dtype == dtype_name(inputs[0]) and not cost.dtype_assumed


def test_copy_bytes_are_source_read_plus_destination_written() -> None:
    dst, src = torch.empty(16, 8, dtype=torch.float16), torch.randn(16, 8)
    cost = op_cost("aten::copy_", shapes_of(dst, src), [dtype_name(dst), dtype_name(src)])
    assert (cost.flops, cost.bytes) == (0, tensor_bytes(dst, src))


def test_unknown_ops_are_unknown_and_missing_dtypes_are_assumed() -> None:
    assert op_cost("aten::frobnicate", [(3, 4)]).flops is None
    assert op_cost("aten::mm", [(3, 4), (5, 6)]).flops is None  # shapes that cannot multiply
    assert op_cost("aten::mm", None).bytes is None
    cost = op_cost("aten::mm", [(3, 4), (4, 5)])
    assert cost.dtype_assumed and cost.dtype == "float32" and cost.bytes == 4 * (12 + 20 + 15)
    assert op_cost("aten::view", [(3, 4), ()]).flops == 0


def test_backward_nodes_get_their_forward_ops_dtypes_and_cost() -> None:
    """Through the engine: nvbridge's grammar with dtypes; the node inherits shapes and dtypes."""
    from nvbridge.engine import correlate
    from tests.hand_built import _range, profile

    model = correlate(
        profile(
            [
                _range(
                    10,
                    20,
                    "aten::addmm, seq = 9, op_id = 1, sizes = [[4], [2, 3], [3, 4], [], []], "
                    "dtypes = [bf16, bf16, bf16, -, -]",
                ),
                _range(200, 210, "AddmmBackward0, stashed seq = 9, fwd_tid = 1", tid=2),
                _range(300, 310, "aten::addmm, seq = 10, op_id = 2, sizes = [[4], [2, 3], [3, 4], [], []]"),
            ],
            [],
            [],
        )
    )
    fwd, node, plain = model.ops.to_pylist()
    a, b, c = (
        torch.randn(4, dtype=torch.bfloat16),
        torch.randn(2, 3, dtype=torch.bfloat16),
        torch.randn(3, 4, dtype=torch.bfloat16),
    )
    assert fwd["flops"] == counted(lambda: torch.addmm(a, b, c)) == 48
    assert fwd["bytes"] == tensor_bytes(a, b, c, torch.addmm(a, b, c))
    assert (fwd["compute_dtype"], fwd["dtype_assumed"]) == ("bf16", False)
    assert node["input_dtypes"] == "[bf16, bf16, bf16, -, -]" and node["compute_dtype"] == "bf16"
    assert node["flops"] == 2 * fwd["flops"] and node["bytes"] == 2 * fwd["bytes"]
    assert (plain["compute_dtype"], plain["dtype_assumed"]) == ("float32", True)
    assert plain["bytes"] == 2 * fwd["bytes"]  # float32: twice bf16's bytes
