"""The compiled trace formatter writes the Arrow builders' lines byte for byte (the Arrow path is
the reference: tests/test_chrome.py checks it against raw SQL and Holistic Trace Analysis)."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest

import nvbridge
from nvbridge.export import chrome_native, chrome_text
from tests.conftest import REAL_DB, SAMPLE_DB, require_native


@pytest.fixture(autouse=True)
def _native_built() -> None:
    require_native()


INPUTS = [
    REAL_DB / "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite",  # two ranks, kernels, copies, sets, flows
    REAL_DB / "nvprof-2020-pytorch14-pyprof-lm.sqlite",  # shapes, PyProf markers, fwdbwd flows
    REAL_DB / "nsys-2024.6-nvfuser-cpp-nvtx.sqlite",
    SAMPLE_DB / "nvtx_domains.sqlite",  # named domains (a dictionary column)
    SAMPLE_DB / "transformer_shapes_cpu.sqlite",  # input shapes, modules
    SAMPLE_DB / "observer_dp_threads_cpu.sqlite",  # fwd_tid, backward links
]


@pytest.mark.parametrize("source", INPUTS, ids=lambda p: p.name)
def test_compiled_lines_equal_the_arrow_lines(source: Path, tmp_path: Path) -> None:
    if not source.is_file():
        pytest.skip(f"{source} not found")
    nvbridge.convert(source, tmp_path / "ds")
    nvbridge.export_chrome_trace(tmp_path / "ds", tmp_path / "native.json")
    with mock.patch.object(chrome_native, "native", None):
        nvbridge.export_chrome_trace(tmp_path / "ds", tmp_path / "arrow.json")
    assert (tmp_path / "native.json").read_bytes() == (tmp_path / "arrow.json").read_bytes()


def test_text_to_escape_and_text_that_is_not_utf8() -> None:
    """Quotes, backslashes and control characters are escaped as the Arrow path escapes them;
    text that is not UTF-8 is left to the Arrow path (which replaces it)."""
    names = pa.array(['a"b', "c\\d", "e\x01f\x7f", None, "日本"])
    ops = pa.table(
        {
            "op_id": pa.array(np.arange(5)),
            "op_name": names,
            "name": names,
            "domain": pa.nulls(5, pa.string()).dictionary_encode(),
            "process_id": pa.array([1] * 5),
            "thread_id": pa.array([2] * 5),
            "start_ns": pa.array([10, 20, 1030, 2000, 5000]),
            "end_ns": pa.array([11, 999, 2031, 2000, 9999]),
            "flags": pa.array([0] * 5),
            "seq": pa.array([None, 3, None, None, 7]),
            "torch_op_id": pa.array([None] * 5, pa.int64()),
            "fwd_tid": pa.array([None, None, 9, None, None]),
            "fwd_op_id": pa.array([None] * 5, pa.int64()),
            "input_shapes": pa.array(["[[1, 2]]", None, None, None, "[]"]),
            "module_path": pa.array([None, "m.0", None, None, None]),
        }
    )
    tid = np.array([2] * 5)
    fast = chrome_native.op_lines(ops, tid, 10)
    with mock.patch.object(chrome_native, "native", None):
        slow = chrome_text.op_lines(ops, tid, 10)
    assert fast is not None and not isinstance(slow, memoryview)
    assert bytes(fast) == b"".join(s.encode() for s in slow.to_pylist())
    offsets = pa.py_buffer(np.array([0, 2], np.int32))
    bad = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(b"\xff\xfe")])
    assert chrome_native.op_lines(ops.slice(0, 1).set_column(1, "op_name", bad), tid[:1], 10) is None
