"""The NVTX name parser, on names taken from the real reports and from each grammar."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvbridge.engine.names import _backward_marks, _decorations_arrow, _decorations_native, _decorations_regex, parse
from tests.conftest import raw, real_db, require_native

native_only = pytest.mark.usefixtures("native_built")


@pytest.fixture
def native_built() -> None:
    require_native()


def one(name: str) -> dict[str, object]:
    row = parse(pa.array([name])).to_pylist()[0]
    return {k: v for k, v in row.items() if v is not None and v is not False}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # torch 1.0
        ("add, seq=3", {"op_name": "add", "seq": 3}),
        ("AddBackward, stashed seq=3", {"op_name": "AddBackward", "seq": 3, "is_backward": True}),
        # torch 0.4/1.0 C++ nodes by their typeid names (nvprof 2018 reports): demangled
        ("N5torch8autograd5CloneE", {"op_name": "torch::autograd::Clone"}),
        (
            "N5torch8autograd13CopyBackwardsE, stashed seq=3",
            {"op_name": "torch::autograd::CopyBackwards", "seq": 3, "is_backward": True},
        ),
        ("N5torch8autograd9GraphRootE", {"op_name": "torch::autograd::GraphRoot"}),
        ("N5torch8autograd14AccumulateGradE", {"op_name": "torch::autograd::AccumulateGrad"}),
        # not a nested type name (one component, bad lengths): kept as written
        ("N5CloneE", {"op_name": "N5CloneE"}),
        ("N5torch8autograd6CloneE", {"op_name": "N5torch8autograd6CloneE"}),
        ("NllLossBackward, seq = 1", {"op_name": "NllLossBackward", "seq": 1, "is_backward": True}),
        # torch 1.x (nvprof report)
        ("embedding, seq = 65", {"op_name": "embedding", "seq": 65}),
        ("NllLossBackward, seq = 128", {"op_name": "NllLossBackward", "seq": 128, "is_backward": True}),
        (
            "torch::autograd::CopyBackwards, seq = 7",
            {"op_name": "torch::autograd::CopyBackwards", "seq": 7, "is_backward": True},
        ),
        ("nll_loss_backward, seq = 0", {"op_name": "nll_loss_backward", "seq": 0}),
        # torch 2.x
        ("aten::mul, seq = 46174, op_id = 993406", {"op_name": "aten::mul", "seq": 46174, "torch_op_id": 993406}),
        ("aten::empty, op_id = 990346", {"op_name": "aten::empty", "torch_op_id": 990346}),
        (
            "aten::addmm, seq = 5, op_id = 12, sizes = [[3], [2, 4], [4, 3], [], []], input_op_ids = [(63,0), (0,-1)]",
            {
                "op_name": "aten::addmm",
                "seq": 5,
                "torch_op_id": 12,
                "input_shapes": "[[3], [2, 4], [4, 3], [], []]",
                "input_op_ids": "[(63,0), (0,-1)]",
            },
        ),
        (
            "autograd::engine::evaluate_function: AddmmBackward0, op_id = 28",
            {"op_name": "autograd::engine::evaluate_function: AddmmBackward0", "torch_op_id": 28, "is_backward": True},
        ),
        (
            "AddmmBackward0, seq = 5, op_id = 29",
            {"op_name": "AddmmBackward0", "seq": 5, "torch_op_id": 29, "is_backward": True},
        ),
        (
            "RegisterPostBackwardFunction, seq = 46241, op_id = 993694",
            {"op_name": "RegisterPostBackwardFunction", "seq": 46241, "torch_op_id": 993694},
        ),
        # nvbridge's own
        (
            "AddmmBackward0, stashed seq = 5, fwd_tid = 123",
            {"op_name": "AddmmBackward0", "seq": 5, "fwd_tid": 123, "is_backward": True},
        ),
        (
            "nn.Module: encoder.layers.0.attn (MultiheadAttention)",
            {"op_name": "nn.Module: MultiheadAttention", "module": "encoder.layers.0.attn"},
        ),
        ("ProfilerStep#3", {"op_name": "ProfilerStep#3", "step": 3}),
        (
            "aten::mm, seq = 3, op_id = 4, sizes = [[2, 3], [3, 4]], dtypes = [bf16, bf16], input_op_ids = [(1,0)]",
            {
                "op_name": "aten::mm",
                "seq": 3,
                "torch_op_id": 4,
                "input_shapes": "[[2, 3], [3, 4]]",
                "input_dtypes": "[bf16, bf16]",
                "input_op_ids": "[(1,0)]",
            },
        ),
        # PyProf dict markers
        (
            "{'mod': 'torch.nn.functional', 'op': 'embedding', 'args': [{'name': '', 'type': 'tensor', "
            "'shape': (35, 20), 'dtype': 'int64'}, {'name': '', 'type': 'float', 'value': 2.0}]}",
            {
                "op_name": "torch.nn.functional.embedding",
                "input_shapes": "[[35, 20], []]",
                "input_dtypes": "[int64, -]",
                "input_values": "[null, 2.0]",
            },
        ),
        ("{'traceMarker': ['a.py:1', 'b.py:2']}", {"op_name": "traceMarker", "stack": ["a.py:1", "b.py:2"]}),
        # pass-through: NCCL, user ranges, garbage
        ("ncclAllReduce", {"op_name": "ncclAllReduce"}),
        ("FSDP::pre_forward (blocks.0)", {"op_name": "FSDP::pre_forward (blocks.0)"}),
        ("{not a dict", {"op_name": "{not a dict"}),
        ("line one\nline two, seq = 4", {"op_name": "line one\nline two", "seq": 4}),
        ("", {"op_name": ""}),
    ],
)
def test_grammars(name: str, expected: dict[str, object]) -> None:
    assert one(name) == expected


def test_every_real_name_parses_and_keeps_its_op_name() -> None:
    """Every distinct NVTX text in the real reports: no failure, and op_name is a prefix."""
    texts: list[str] = []
    for file, sql in [
        ("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite", "SELECT DISTINCT coalesce(text, '') FROM NVTX_EVENTS"),
        ("nsys-2024.2-pyprof-markers.sqlite", "SELECT DISTINCT text FROM NVTX_EVENTS"),
        ("nsys-2024.6-nvfuser-cpp-nvtx.sqlite", "SELECT DISTINCT text FROM NVTX_EVENTS"),
        ("nvprof-2020-pytorch14-pyprof-lm.sqlite", "SELECT value FROM StringTable"),
    ]:
        texts += [str(t) for (t,) in raw(real_db(file), sql)]
    parsed = parse(pa.array(texts)).to_pylist()
    assert len(parsed) == len(texts) > 10000
    for text, row in zip(texts, parsed):
        if not text.startswith(("{", "nn.Module: ")):
            assert text.startswith(row["op_name"])
        if ", seq = " in text and not text.startswith("{"):
            assert row["seq"] is not None, text


SIMPLE_AND_NOT = [
    "a, b, seq = 3",
    "a, seq = 3, b",
    "a, seq = 3x",
    "a, seq = 3, seq = 4",
    "a, op_id = 1, seq = 2",
    "a, seq=3",
    "a, seq =3",
    "a, seq= 3",
    "a, stashed seq=3",
    "a, stashed seq= 3",
    "a, stashedseq = 3",
    "a, seq  = 3",
    "a, seq = ",
    "a, seq = -3",
    "a, seq = +3",
    "a, seq = \uff13",
    "a, seq = 3 ",
    "a, ",
    ", seq = 1",
    "a, seq = 999999999999999999",
    "a, seq = 000000000000000000001",
    ", seq = 9999999999999999990",  # 19 digits: no int64 seq (found by the random names test)
    "a, op_id = 99999999999999999999999, fwd_tid = 123456789012345678901",
    "x, stashed seq = 1, seq = 2",
    "x, seq = 2, stashed seq = 1",
    "a, fwd_tid = 5, stashed seq = 9",
    "a, sizes = [x, seq = 4], input_op_ids = [(1,0)]",
    "a, sizes = [[1]], input_op_ids = [(1,0)], sizes = [[2]]",
    "a, sizes = [[1]\n]",
    "a, op_id = 3\n",
    "a\n, seq = 3",
    "a, seq = 1\n, op_id = 2",
    "a,, seq = 1",
    "a, seq = 1, ",
    "\u65e5\u672c, op_id = 4",
    "a\x00, seq = 3",
    "",
]


def test_fast_path_matches_the_regular_expressions() -> None:
    """The split-based parse of simple names gives the regular expressions' columns, row for row."""
    names = pa.array(SIMPLE_AND_NOT)
    slow = _decorations_regex(names)
    fast = _decorations_arrow(names)
    for key in slow:
        assert fast[key].to_pylist() == slow[key].cast(fast[key].type).to_pylist(), key


@native_only
def test_compiled_splitter_matches_the_regular_expressions() -> None:
    """nvbridge._native.split_names gives the regular expressions' columns and the Arrow path's
    backward marks, row for row, on the grammar's edge cases."""
    _same_as_references(pa.array(SIMPLE_AND_NOT))


# Pieces names are made of: separators, every prefix and its near misses, digits, non-ASCII.
_PIECES = [
    ", ",
    ",",
    " ",
    "seq",
    "seq = ",
    "seq=",
    "seq =",
    "seq= ",
    "stashed seq = ",
    "stashed ",
    "op_id = ",
    "fwd_tid = ",
    "sizes = [",
    "]",
    "dtypes = [",
    "input_op_ids = [",
    "(1,0)",
    "0",
    "7",
    "123456789",
    "999999999999999999",
    "Backward",
    "Backwards",
    "Backward0",
    "aten::",
    "addmm",
    "autograd::engine::",
    "evaluate_function: ",
    "AddmmBackward0",
    "nn.Module: ",
    "ProfilerStep#",
    "\u65e5",
    "\n",
    "-",
    "x",
]


@native_only
@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_PIECES), max_size=12).map("".join), min_size=1, max_size=40))
def test_compiled_splitter_matches_on_random_names(texts: list[str]) -> None:
    _same_as_references(pa.array(texts))


def _same_as_references(names: pa.Array) -> None:
    native, node, evaluate = _decorations_native(names)
    arrow = _decorations_arrow(names)
    slow = _decorations_regex(names)
    for key in slow:
        assert native[key].to_pylist() == arrow[key].to_pylist(), key
        assert native[key].to_pylist() == slow[key].cast(native[key].type).to_pylist(), key
    ref_eval, ref_node = _backward_marks(arrow["op"])
    assert node.to_pylist() == ref_node.to_pylist()
    assert evaluate.to_pylist() == ref_eval.to_pylist()
    # And on a slice (an offset into the offsets buffer) of a longer array.
    if len(names) > 2:
        part = names.slice(1)
        assert _decorations_native(part)[0]["op"].to_pylist() == _decorations_arrow(part)["op"].to_pylist()
