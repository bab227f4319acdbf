"""What an op is costed by, through the engine: backward nodes that record their own sizes leave
their cost to the ops inside them; autocast's outer call computes in its inner call's dtypes;
an op's kernels name the dtype it computed in."""

from __future__ import annotations

from typing import Any

from nvbridge.engine import correlate
from tests.hand_built import _api, _kernel, _range, profile, streamed

MM = "aten::mm, op_id = {}, sizes = [[4, 6], [6, 3]], dtypes = [f32, f32]"
ADDMM = "aten::addmm, seq = 9, op_id = 1, sizes = [[3], [4, 6], [6, 3], [], []], dtypes = [f32, f32, f32, -, -]"


def ops(ranges: list[dict[str, Any]], api: list[dict[str, Any]] | None = None, gpu: Any = None) -> list[dict[str, Any]]:
    table = correlate(profile(ranges, api or [], gpu or [])).ops
    return sorted(table.to_pylist(), key=lambda r: r["op_id"])


def streamed_ops(
    ranges: list[dict[str, Any]], api: list[dict[str, Any]], gpu: list[dict[str, Any]], window: int
) -> Any:
    """The ops of a conversion in windows of ``window`` ranges (every API call and GPU op given
    with the first window: the engine holds each until its launch's window)."""
    p = profile(ranges, api, gpu)
    parts = [p.ranges.slice(i, window) for i in range(0, p.ranges.num_rows, window)]
    return streamed(p, parts, None)[0].to_pylist()


def test_backward_nodes_with_their_own_sizes_leave_the_cost_to_their_ops() -> None:
    """torch's and nvbridge's record_shapes names size a node by its outputs' gradients: the mm
    ops inside carry the exact cost (a first layer computes no input gradient), and neither the
    node nor its evaluate-function wrapper is costed from the forward op's shapes."""
    rows = ops(
        [
            _range(10, 20, ADDMM),
            _range(100, 200, "autograd::engine::evaluate_function: AddmmBackward0, op_id = 5"),
            _range(110, 190, "AddmmBackward0, seq = 9, op_id = 6, fwd_tid = 1, sizes = [[4, 3]], dtypes = [f32]"),
            _range(120, 130, MM.format(7).replace("[[4, 6], [6, 3]]", "[[6, 4], [4, 3]]")),
        ]
    )
    fwd, wrapper, node, mm = rows
    assert fwd["flops"] == 2 * 4 * 6 * 3
    assert (wrapper["fwd_op_id"], node["fwd_op_id"]) == (fwd["op_id"], fwd["op_id"])
    assert wrapper["flops"] is None and node["flops"] is None
    assert mm["flops"] == 2 * 6 * 4 * 3  # the weight gradient only


def test_backward_nodes_without_sizes_are_costed_from_their_forward_op() -> None:
    """Where a report records no sizes on nodes (shapes only on the forward op), the node's cost
    is its forward op's backward: twice a matmul's."""
    rows = ops([_range(10, 20, ADDMM), _range(100, 200, "AddmmBackward0, stashed seq = 9, fwd_tid = 1")])
    assert rows[1]["flops"] == 2 * rows[0]["flops"] > 0


def test_autocast_outer_call_computes_in_its_inner_calls_dtypes() -> None:
    outer = "aten::linear, seq = 3, op_id = 1, sizes = [[4, 6], [3, 6], [3]], dtypes = [f32, f32, f32]"
    inner = "aten::linear, op_id = 5, sizes = [[4, 6], [3, 6], [3]], dtypes = [bf16, bf16, bf16]"
    other = "aten::linear, op_id = 9, sizes = [[4, 6], [3, 6], [3]], dtypes = [f32, f32, f32]"
    rows = ops(
        [
            _range(10, 100, outer),
            _range(20, 30, "aten::_to_copy, op_id = 2, sizes = [[4, 6], [], [], [], [], [], []]"),
            _range(40, 90, inner),
            _range(200, 300, other),
            _range(210, 220, "aten::t, op_id = 10, sizes = [[3, 6]], dtypes = [f32]"),
        ]
    )
    by_id = {r["torch_op_id"]: r for r in rows}
    assert (by_id[1]["compute_dtype"], by_id[1]["dtype_assumed"]) == ("bf16", False)
    assert by_id[1]["input_dtypes"] == "[f32, f32, f32]"  # what was recorded stays
    assert by_id[1]["bytes"] == by_id[5]["bytes"] and by_id[1]["flops"] == by_id[5]["flops"]
    assert by_id[9]["compute_dtype"] == "f32"  # no inner call: its own inputs' dtype


def _launch(corr: int, start: int, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    kernel = _kernel(start + 100, start + 150, corr)
    kernel["name"] = name
    return _api(start, start + 5, corr), kernel


def test_kernels_name_the_dtype_an_op_computed_in() -> None:
    """torch's own names record no dtypes: the kernels say bfloat16. A library kernel's dtype
    wins over an elementwise kernel's; a parent takes its children's; a range without shapes
    (a user range) still gets the compute dtype; one without kernels naming a dtype stays
    assumed."""
    a1, k1 = _launch(1, 12, "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_nn")
    a2, k2 = _launch(2, 30, "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>")
    a3, k3 = _launch(3, 210, "void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<c10::Half>>")
    a4, k4 = _launch(4, 410, "void at::native::index_elementwise_kernel<128, 4>")
    rows = ops(
        [
            _range(0, 100, "my training step"),
            _range(10, 20, "aten::mm, op_id = 2, sizes = [[4, 6], [6, 3]]"),
            _range(25, 40, "aten::fill_, op_id = 3, sizes = [[4, 6], []]"),
            _range(200, 300, "aten::add, op_id = 4, sizes = [[4, 6], [4, 6], []]"),
            _range(400, 500, "aten::relu, op_id = 5, sizes = [[4, 6]]"),
        ],
        [a1, a2, a3, a4],
        [k1, k2, k3, k4],
    )
    step, mm, fill, add, relu = rows
    assert (mm["compute_dtype"], mm["dtype_inferred"], mm["dtype_assumed"]) == ("bfloat16", True, False)
    assert mm["bytes"] == 2 * (4 * 6 + 6 * 3 + 4 * 3)  # two bytes an element
    assert (fill["compute_dtype"], fill["dtype_inferred"]) == ("float32", True)
    assert (step["compute_dtype"], step["dtype_inferred"], step["flops"]) == ("bfloat16", True, None)
    assert (add["compute_dtype"], add["bytes"]) == ("float16", 2 * 3 * 4 * 6)
    assert (relu["compute_dtype"], relu["dtype_inferred"], relu["dtype_assumed"]) == ("float32", False, True)


def test_recorded_dtypes_come_first_and_kernels_fill_in_tf32() -> None:
    """An op that records its dtypes keeps them; one that records none (torch's own names) takes
    the TF32 its kernels ran (allow_tf32) and compares with TF32's peak."""
    a, k = _launch(1, 12, "ampere_tf32_s1688gemm_tf32_128x128_ldg8_f2f_nn")
    b, j = _launch(2, 212, "ampere_tf32_s1688gemm_tf32_128x128_ldg8_f2f_nn")
    recorded, bare = ops(
        [_range(10, 100, MM.format(1)), _range(210, 300, "aten::mm, op_id = 2, sizes = [[4, 6], [6, 3]]")],
        [a, b],
        [k, j],
    )
    assert (recorded["compute_dtype"], recorded["dtype_inferred"]) == ("f32", False)
    assert (bare["compute_dtype"], bare["dtype_inferred"], bare["dtype_assumed"]) == ("tf32", True, False)
    assert bare["bytes"] == recorded["bytes"] == 4 * (24 + 18 + 12)


def test_what_an_open_op_learned_survives_the_windows_it_spans() -> None:
    """An autocast call and a user range stay open across several windows of two or three
    ranges: the inner call's dtypes and a kernel launched in an earlier window still decide
    their dtype."""
    outer = "aten::linear, seq = 3, op_id = 1, sizes = [[4, 6], [3, 6], [3]], dtypes = [f32, f32, f32]"
    inner = "aten::linear, op_id = 5, sizes = [[4, 6], [3, 6], [3]], dtypes = [bf16, bf16, bf16]"
    a, k = _launch(1, 62, "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_nn")
    ranges = [
        _range(0, 1000, "my step"),
        _range(10, 900, outer),
        _range(20, 30, "aten::_to_copy, op_id = 2, sizes = [[4, 6], [], [], [], [], [], []]"),
        _range(40, 50, "aten::_to_copy, op_id = 3, sizes = [[3, 6], [], [], [], [], [], []]"),
        _range(60, 80, inner),
        _range(300, 310, "aten::relu, op_id = 6, sizes = [[4, 3]]"),
        _range(400, 410, "aten::relu, op_id = 7, sizes = [[4, 3]]"),
        _range(500, 510, "aten::relu, op_id = 8, sizes = [[4, 3]]"),
    ]
    one = ops(ranges, [a], [k])
    for window in (2, 3):
        rows = streamed_ops(ranges, [a], [k], window)
        assert [(r["name"], r["compute_dtype"], r["dtype_inferred"]) for r in rows] == [
            (r["name"], r["compute_dtype"], r["dtype_inferred"]) for r in one
        ]
    step, linear = one[0], one[1]
    assert (step["compute_dtype"], step["dtype_inferred"]) == ("bfloat16", True)  # no shapes: the kernels'
    assert (linear["compute_dtype"], linear["dtype_inferred"], linear["dtype_assumed"]) == ("bf16", False, False)
    assert streamed_ops(ranges, [], [], 2)[1]["compute_dtype"] == "bf16"  # a CPU recording: the same
