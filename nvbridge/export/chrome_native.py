"""The Chrome trace's event lines by nvbridge._native.format_lines: the same text as
:mod:`nvbridge.export.chrome_text`'s Arrow builders (tests/test_chrome_native.py holds them to
it), each byte written once instead of once per part joined (2.2 s of CPU at 2M NVTX rows).

Each builder returns the lines as one buffer, or None where the compiled formatter cannot take
the chunk (not built, text that is not UTF-8, many kinds of GPU op): the caller then uses the
Arrow builder, which also replaces invalid text.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col, one_chunk
from nvbridge.compiled import native
from nvbridge.export.chrome_names import CBID_ARG, api_names

Segment = tuple[Any, ...]
EMPTY = b'""'
# GPU op kinds as trace categories (chrome_text.gpu_lines); any other kind is its own category.
GPU_CATEGORIES = {"kernel": "kernel", "graph": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}


def _valid(values: pa.Array) -> np.ndarray | None:
    """One byte per row, 1 where valid; None without nulls."""
    if not values.null_count:
        return None
    return np.ascontiguousarray(values.is_valid().to_numpy(zero_copy_only=False), np.uint8)


def _ints(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, np.int64)


def _num(values: np.ndarray, prefix: bytes = b"") -> Segment:
    """Integers without nulls."""
    assert native is not None
    return (native.INT, _ints(values), None, prefix, None)


def _int(values: pa.Array | pa.ChunkedArray, prefix: bytes = b"", null: bytes | None = None) -> Segment:
    """An integer column; a null writes ``prefix + null``, or nothing where ``null`` is None."""
    assert native is not None
    col = one_chunk(values)
    data = (col.fill_null(0) if col.null_count else col).to_numpy(zero_copy_only=False)
    return (native.INT, _ints(data), _valid(col), prefix, null)


def _text(values: pa.Array | pa.ChunkedArray, prefix: bytes = b"", null: bytes | None = None) -> Segment:
    """A string column as JSON string literals (dictionary-encoded: its dictionary's)."""
    col = one_chunk(values)
    assert native is not None
    if pa.types.is_dictionary(col.type):
        dictionary = col.dictionary.cast(pa.string())
        offsets, data = _string_buffers(dictionary)
        indices = np.ascontiguousarray(col.indices.fill_null(0).to_numpy(zero_copy_only=False), np.int32)
        return (native.DICT, indices, _valid(col), offsets, data, prefix, null)
    col = col.cast(pa.string())
    offsets, data = _string_buffers(col)
    return (native.TEXT, offsets, data, _valid(col), prefix, null)


def _string_buffers(values: pa.Array) -> tuple[np.ndarray, Any]:
    """A string array's offsets (its own n + 1) and data buffer."""
    _, offsets, data = values.buffers()
    own = np.frombuffer(offsets, np.int32)[values.offset : values.offset + len(values) + 1] if offsets else None
    if own is None or not len(own):
        own = np.zeros(len(values) + 1, np.int32)
    return np.ascontiguousarray(own), data if data is not None else b""


def _slice(
    cat: Segment, name: Segment, pid: Segment, tid: Segment, start: np.ndarray, dur: np.ndarray
) -> list[Segment]:
    """chrome_text._slice: what every ``ph: "X"`` line begins with."""
    assert native is not None
    return [
        (native.LITERAL, b'{"ph":"X","cat":'),
        cat,
        (native.LITERAL, b',"name":'),
        name,
        (native.LITERAL, b',"pid":'),
        pid,
        (native.LITERAL, b',"tid":'),
        tid,
        (native.LITERAL, b',"ts":'),
        (native.MICROS, _ints(start), 0),
        (native.LITERAL, b',"dur":'),
        (native.MICROS, _ints(dur), 0),
    ]


def _format(n: int, segments: list[Segment]) -> memoryview | None:
    assert native is not None
    try:
        return memoryview(native.format_lines(n, segments))
    except ValueError:  # text that is not UTF-8: the Arrow builder replaces it
        return None


def op_lines(t: pa.Table, tid: np.ndarray, origin: int) -> memoryview | None:
    """chrome_text.op_lines."""
    if native is None:
        return None
    n = t.num_rows
    start = np_col(t, "start_ns")
    torch_op = pc.or_(pc.is_valid(t.column("seq")), pc.is_valid(t.column("torch_op_id")))
    cat = np.ascontiguousarray(one_chunk(torch_op).to_numpy(zero_copy_only=False), np.uint8)
    segments = _slice(
        (native.CHOICE, cat, (b'"user_annotation"', b'"cpu_op"')),
        _text(t.column("op_name"), null=EMPTY),
        _int(t.column("process_id")),
        _num(tid),
        start - origin,
        np_col(t, "end_ns") - start,
    )
    segments += [
        _int(t.column("op_id"), b',"args":{"External id":'),
        _int(t.column("seq"), b',"Sequence number":'),
        _int(t.column("fwd_tid"), b',"Fwd thread id":'),
        _text(t.column("input_shapes"), b',"Input Dims":'),
        _text(t.column("module_path"), b',"Module":'),
        _text(t.column("domain"), b',"NVTX domain":'),
        _text(t.column("name"), b',"NVTX name":', EMPTY),
        (native.LITERAL, b"}},\n"),
    ]
    return _format(n, segments)


def api_lines(t: pa.Table, origin: int) -> memoryview | None:
    """chrome_text.api_lines."""
    if native is None or t.column("kind").null_count:
        return None  # a kind-less call: the Arrow builder's null line
    kind = pc.fill_null(pc.equal(t.column("kind"), "driver"), False)
    start = np_col(t, "start_ns")
    shown, versioned = api_names(t.column("name"), t.column("kind"))
    segments = _slice(
        (
            native.CHOICE,
            np.ascontiguousarray(one_chunk(kind).to_numpy(zero_copy_only=False), np.uint8),
            (b'"cuda_runtime"', b'"cuda_driver"'),
        ),
        _text(shown, null=EMPTY),
        _int(t.column("process_id")),
        _int(t.column("thread_id")),
        start - origin,
        np_col(t, "end_ns") - start,
    )
    segments += [
        _int(t.column("correlation_id"), b',"args":{"correlation":', b"null"),
        _int(t.column("op_id"), b',"External id":'),
        *([] if versioned is None else [_text(versioned, f',"{CBID_ARG}":'.encode())]),
        (native.LITERAL, b"}},\n"),
    ]
    return _format(t.num_rows, segments)


def gpu_lines(t: pa.Table, tid: np.ndarray, origin: int, bandwidth: pa.Array) -> memoryview | None:
    """chrome_text.gpu_lines; ``bandwidth``: its ``memory bandwidth`` text (null: none)."""
    if native is None:
        return None
    kinds = one_chunk(t.column("kind")).cast(pa.string()).dictionary_encode()
    labels = [GPU_CATEGORIES.get(k, k) for k in kinds.dictionary.to_pylist()]
    if kinds.null_count or len(labels) > 8 or any(k is None or '"' in k or "\\" in k for k in labels):
        return None
    start = np_col(t, "start_ns")
    dur = np_col(t, "end_ns") - start
    device = _num(np_col(t, "device_id", fill=0))
    segments = _slice(
        (
            native.CHOICE,
            np.ascontiguousarray(kinds.indices.to_numpy(), np.uint8),
            tuple(f'"{label}"'.encode() for label in labels),
        ),
        _text(t.column("name"), null=EMPTY),
        device,
        _num(tid),
        start - origin,
        dur,
    )
    grid_cols = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
    grid = np.ones(t.num_rows, bool)
    for name in grid_cols:
        grid &= np.asarray(t.column(name).is_valid().to_numpy(zero_copy_only=False))
    has_grid = np.ascontiguousarray(grid, np.uint8)
    grid_parts = []
    for name, prefix in zip(grid_cols, (b',"grid":[', b",", b",", b'],"block":[', b",", b",")):
        grid_parts.append((native.INT, _ints(np_col(t, name, fill=0)), has_grid, prefix, None))
    segments += [
        (native.LITERAL, b',"args":{"device":'),
        device,
        _num(np_col(t, "stream_id", fill=0), b',"stream":'),
        _int(t.column("correlation_id"), b',"correlation":', b"null"),
        _int(t.column("op_id"), b',"External id":'),
        *grid_parts,
        (native.IF, has_grid, b"]"),
        _int(t.column("bytes").cast(pa.int64()), b',"bytes":'),
        (native.RAW, *_raw(bandwidth.cast(pa.string()), b',"memory bandwidth (GB/s)":')),
        (native.LITERAL, b"}},\n"),
    ]
    return _format(t.num_rows, segments)


def _raw(values: pa.Array, prefix: bytes) -> tuple[Any, ...]:
    offsets, data = _string_buffers(values)
    return offsets, data, _valid(values), prefix, None


def flow_lines(
    cat: str,
    ids: np.ndarray,
    pid_s: np.ndarray,
    tid_s: np.ndarray,
    ts_s: np.ndarray,
    pid_f: np.ndarray,
    tid_f: np.ndarray,
    ts_f: np.ndarray,
) -> memoryview | None:
    """chrome_text.flow_lines."""
    if native is None:
        return None
    head = f'{{"cat":"{cat}","name":"{cat}","id":'.encode()

    def end(phase: bytes, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray) -> list[Segment]:
        assert native is not None
        return [
            (native.LITERAL, head),
            _num(ids),
            _num(pid, phase + b',"pid":'),
            _num(tid, b',"tid":'),
            (native.LITERAL, b',"ts":'),
            (native.MICROS, _ints(ts), 0),
            (native.LITERAL, b"},\n"),
        ]

    return _format(len(ids), end(b',"ph":"s"', pid_s, tid_s, ts_s) + end(b',"ph":"f","bp":"e"', pid_f, tid_f, ts_f))


def counter_lines(names: pa.DictionaryArray, t: pa.Table, ts: np.ndarray, head: str) -> memoryview | None:
    """chrome_memory.counter_lines (``names``: the counters' names, ``ts``: from the origin)."""
    if native is None:
        return None
    segments: list[Segment] = [
        (native.LITERAL, head.encode()),
        _text(names),
        _num(np_col(t, "process_id"), b',"pid":'),
        (native.LITERAL, b',"ts":'),
        (native.MICROS, _ints(ts), 0),
        _num(np_col(t, "total_allocated"), b',"args":{"allocated":'),
        _int(t.column("total_reserved"), b',"reserved":'),
        (native.LITERAL, b"}},\n"),
    ]
    return _format(t.num_rows, segments)
