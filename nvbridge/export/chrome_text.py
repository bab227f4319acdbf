"""Chrome trace event lines built column-wise by Arrow string kernels (no Python object per event).

Each builder turns one chunk of a table into an Arrow string array of JSON lines ending in
``,\\n``; :class:`EventSink` writes such arrays straight from their Arrow buffers. Times are
microseconds with exactly three decimals (exact nanoseconds), relative to the trace's origin.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from concurrent.futures import Future
from typing import IO, Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col, one_chunk
from nvbridge.dataset.schema import pick
from nvbridge.export import chrome_native
from nvbridge.export.chrome_names import CBID_ARG, api_names
from nvbridge.workers import worker_pool

# A chunk's lines: an Arrow string array, or the compiled formatter's buffer of lines.
Lines: TypeAlias = pa.Array | pa.ChunkedArray | memoryview

EMPTY = '""'  # a null name is written as the empty string (a str: no pyarrow call at import)
ESCAPED = frozenset({"name", "op_name", "domain", "input_shapes", "module_path"})
META_PREFIXES = ("source", "kind", "producer", "schema", "time_base", "nvbridge", "dataset")
# Columns each table must have (a dataset's or a conversion's chunks), each one the dataset declares.
OP_COLUMNS = tuple(
    pick(
        "ops",
        [
            "op_id",
            "op_name",
            "name",
            "domain",
            "process_id",
            "thread_id",
            "start_ns",
            "end_ns",
            "flags",
            "seq",
            "torch_op_id",
            "fwd_tid",
            "fwd_op_id",
            "input_shapes",
            "module_path",
        ],
    )
)
API_COLUMNS = tuple(
    pick(
        "api_calls",
        [
            "api_call_id",
            "kind",
            "name",
            "process_id",
            "thread_id",
            "start_ns",
            "end_ns",
            "correlation_id",
            "op_id",
        ],
    )
)
GPU_COLUMNS = tuple(
    pick(
        "gpu_ops",
        [
            "gpu_op_id",
            "kind",
            "name",
            "process_id",
            "device_id",
            "stream_id",
            "start_ns",
            "end_ns",
            "correlation_id",
            "op_id",
            "api_call_id",
            "grid_x",
            "grid_y",
            "grid_z",
            "block_x",
            "block_y",
            "block_z",
            "bytes",
        ],
    )
)


def header(
    meta: Mapping[str, str | None], devices: pa.Table | None, origin_ns: int, distributed: Mapping[str, object]
) -> dict[str, object]:
    """Kineto's header: base time (the session's epoch added when times count from it), the
    ``distributedInfo`` given (:mod:`nvbridge.export.trace_ranks`), GPUs."""
    epoch = meta.get("session_start_utc_ns") if meta.get("time_base") == "session" else None
    kept = {k: v for k, v in meta.items() if k.startswith(META_PREFIXES)}
    props = (
        []
        if devices is None
        else [
            {"id": int(d), "name": n or f"GPU {d}"}
            for d, n in zip(np_col(devices, "device_id", fill=-1).tolist(), devices.column("name").to_pylist())
            if d >= 0
        ]
    )
    return {
        "schemaVersion": 1,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": origin_ns + int(epoch or 0),
        "distributedInfo": dict(distributed),
        "deviceProperties": props,
        "traceName": kept.get("source"),
        "nvbridge": kept,
    }


def escape(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Strings as JSON string literals (quotes included), valid for strict parsers; null stays null.
    Dictionary-encoded names (kernels, API calls) are escaped once per distinct name."""
    if isinstance(values, pa.ChunkedArray):
        parts = [escape(chunk) for chunk in values.chunks]
        return pa.concat_arrays(parts) if parts else pa.array([], pa.string())
    if pa.types.is_dictionary(values.type):
        return escape(values.dictionary).take(values.indices)
    values = values.cast(pa.string())
    try:
        values.validate(full=True)
    except pa.ArrowInvalid:  # invalid UTF-8 from the database: replace, row by row (rare)
        raw = values.cast(pa.binary()).to_pylist()
        values = pa.array([None if b is None else b.decode("utf-8", "replace") for b in raw], pa.string())
    values = pc.replace_substring(values, "\\", "\\\\")
    values = pc.replace_substring(values, '"', '\\"')
    if pc.any(pc.match_substring_regex(values, r"[\x00-\x1f\x7f]")).as_py():
        for code in list(range(32)) + [127]:
            values = pc.replace_substring(values, chr(code), f"\\u{code:04x}")
    return pc.binary_join_element_wise('"', values, '"', "")


def num(values: np.ndarray) -> pa.Array:
    return pa.array(values).cast(pa.string())


def us(ns: np.ndarray) -> pa.Array:
    """Non-negative ns -> microseconds text with exactly three decimals."""
    q, r = np.divmod(ns, 1000)
    return pc.binary_join_element_wise(num(q), pc.utf8_lpad(num(r), 3, "0"), ".")


def join(*parts: pa.Array | pa.ChunkedArray | str) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


def _slice(
    cat: pa.Array | pa.ChunkedArray, name: pa.Array, pid: pa.Array, tid: pa.Array, start: np.ndarray, dur: np.ndarray
) -> tuple[pa.Array | pa.ChunkedArray | str, ...]:
    """The parts every ``ph: "X"`` slice begins with: category, name, track, start and duration."""
    return (
        '{"ph":"X","cat":',
        cat,
        ',"name":',
        name,
        ',"pid":',
        pid,
        ',"tid":',
        tid,
        ',"ts":',
        us(start),
        ',"dur":',
        us(dur),
    )


def _opt(label: str, values: pa.Array | pa.ChunkedArray, quote: bool = False) -> pa.Array | str:
    """``,"label":value`` or '' where the value is null."""
    if values.null_count == len(values):  # NVTX-only reports: no torch fields at all
        return ""
    text = escape(values) if quote else values.cast(pa.string())
    return pc.fill_null(join(f',"{label}":', text), "")


def decoded(table: pa.Table) -> pa.Table:
    """The table with dictionary-encoded columns decoded (string kernels want strings), but for
    the names, which :func:`escape` takes encoded."""
    schema = pa.schema(
        [
            pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) and f.name not in ESCAPED else f
            for f in table.schema
        ]
    )
    return table.cast(schema)


def op_lines(t: pa.Table, tid: np.ndarray, origin: int) -> Lines:
    """NVTX ranges: ``cpu_op`` when torch annotated them (seq or op_id), else ``user_annotation``."""
    fast = chrome_native.op_lines(t, tid, origin)
    if fast is not None:
        return fast
    s, e = np_col(t, "start_ns") - origin, np_col(t, "end_ns") - np_col(t, "start_ns")
    torch_op = pc.or_(pc.is_valid(t.column("seq")), pc.is_valid(t.column("torch_op_id")))
    cat = pc.if_else(torch_op, pa.scalar('"cpu_op"'), pa.scalar('"user_annotation"'))
    return join(
        *_slice(cat, pc.fill_null(escape(t.column("op_name")), EMPTY), num(np_col(t, "process_id")), num(tid), s, e),
        ',"args":{"External id":',
        num(np_col(t, "op_id")),
        _opt("Sequence number", t.column("seq")),
        _opt("Fwd thread id", t.column("fwd_tid")),
        _opt("Input Dims", t.column("input_shapes"), quote=True),
        _opt("Module", t.column("module_path"), quote=True),
        _opt("NVTX domain", t.column("domain"), quote=True),
        ',"NVTX name":',
        pc.fill_null(escape(t.column("name")), EMPTY),
        "}},\n",
    )


def api_lines(t: pa.Table, origin: int) -> Lines:
    """CUDA API calls as ``cuda_runtime`` / ``cuda_driver`` slices, named as Kineto names them
    (:mod:`nvbridge.export.chrome_names`)."""
    fast = chrome_native.api_lines(t, origin)
    if fast is not None:
        return fast
    s = np_col(t, "start_ns") - origin
    d = np_col(t, "end_ns") - np_col(t, "start_ns")
    cat = pc.if_else(pc.equal(t.column("kind"), "driver"), pa.scalar('"cuda_driver"'), pa.scalar('"cuda_runtime"'))
    shown, versioned = api_names(t.column("name"), t.column("kind"))
    return join(
        *_slice(
            cat,
            pc.fill_null(escape(shown), EMPTY),
            num(np_col(t, "process_id")),
            num(np_col(t, "thread_id")),
            s,
            d,
        ),
        ',"args":{"correlation":',
        t.column("correlation_id").cast(pa.string()).fill_null("null"),
        _opt("External id", t.column("op_id")),
        "" if versioned is None else _opt(CBID_ARG, versioned, quote=True),
        "}},\n",
    )


def gpu_lines(t: pa.Table, tid: np.ndarray, origin: int) -> Lines:
    """Kernels (and graph launches) as ``kernel``, copies as ``gpu_memcpy``, sets as ``gpu_memset``."""
    s = np_col(t, "start_ns") - origin
    d = np_col(t, "end_ns") - np_col(t, "start_ns")
    nbytes = t.column("bytes").cast(pa.int64())
    bandwidth = pc.round(pc.divide(nbytes.cast(pa.float64()), pa.array(np.maximum(d, 1).astype(np.float64))), 3)
    fast = chrome_native.gpu_lines(t, tid, origin, one_chunk(bandwidth))
    if fast is not None:
        return fast
    kind = t.column("kind")
    cat = pc.binary_join_element_wise(
        '"',
        pc.replace_substring_regex(
            pc.replace_substring_regex(
                pc.replace_substring_regex(kind, "^kernel$|^graph$", "kernel"), "^memcpy$", "gpu_memcpy"
            ),
            "^memset$",
            "gpu_memset",
        ),
        '"',
        "",
    )
    grid = pc.fill_null(
        join(
            ',"grid":[',
            t.column("grid_x").cast(pa.string()),
            ",",
            t.column("grid_y").cast(pa.string()),
            ",",
            t.column("grid_z").cast(pa.string()),
            '],"block":[',
            t.column("block_x").cast(pa.string()),
            ",",
            t.column("block_y").cast(pa.string()),
            ",",
            t.column("block_z").cast(pa.string()),
            "]",
        ),
        "",
    )
    bw_text = pc.fill_null(join(',"memory bandwidth (GB/s)":', bandwidth.cast(pa.string())), "")
    device = num(np_col(t, "device_id", fill=0))
    return join(
        *_slice(cat, pc.fill_null(escape(t.column("name")), EMPTY), device, num(tid), s, d),
        ',"args":{"device":',
        device,
        ',"stream":',
        num(np_col(t, "stream_id", fill=0)),
        ',"correlation":',
        t.column("correlation_id").cast(pa.string()).fill_null("null"),
        _opt("External id", t.column("op_id")),
        grid,
        _opt("bytes", nbytes),
        bw_text,
        "}},\n",
    )


def flow_lines(
    cat: str,
    ids: np.ndarray,
    pid_s: np.ndarray,
    tid_s: np.ndarray,
    ts_s: np.ndarray,
    pid_f: np.ndarray,
    tid_f: np.ndarray,
    ts_f: np.ndarray,
) -> Lines:
    """Both ends of each flow: ``ph: "s"`` then ``ph: "f"`` bound to the enclosing slice (``bp: "e"``)."""
    fast = chrome_native.flow_lines(cat, ids, pid_s, tid_s, ts_s, pid_f, tid_f, ts_f)
    if fast is not None:
        return fast
    head = f'{{"cat":"{cat}","name":"{cat}","id":'
    start = join(head, num(ids), ',"ph":"s","pid":', num(pid_s), ',"tid":', num(tid_s), ',"ts":', us(ts_s), "},\n")
    finish = join(
        head, num(ids), ',"ph":"f","bp":"e","pid":', num(pid_f), ',"tid":', num(tid_f), ',"ts":', us(ts_f), "},\n"
    )
    return pc.binary_join_element_wise(start, finish, "")


def meta_event(kind: str, pid: int, tid: int | None, args: dict[str, Any]) -> str:
    """A ``ph: "M"`` event: process_name, process_sort_index, thread_name, thread_sort_index."""
    event: dict[str, Any] = {"ph": "M", "name": kind, "pid": pid}
    if tid is not None:
        event["tid"] = tid
    event["args"] = args
    return json.dumps(event) + ",\n"


class EventSink:
    """Streams events into an open file: header, arrays of lines, footer.

    Lines arrive ending in ``,\\n``; each array's final separator is held back and written
    before the next array, so the list ends without a trailing comma and without a dummy event.
    Writing (and gzip compression, which releases the GIL) runs on a thread of its own while the
    caller builds the next lines: one array in flight bounds the memory.
    """

    def __init__(self, fh: IO[bytes], head: dict[str, Any]) -> None:
        self.fh = fh
        self.pending = False
        self._pool = worker_pool(1, "nvbridge-trace")
        self._writing: Future[None] | None = None
        text = json.dumps(head)  # default separators: HTA finds the rank with r'"rank":\s+(\d+)'
        fh.write(text[:-1].encode() + b', "traceEvents": [\n')

    def lines(self, lines: Lines) -> None:
        """Write events; each line already ends with ',\\n'."""
        if len(lines) == 0:
            return
        if isinstance(lines, memoryview):  # the compiled formatter's lines, one buffer
            self._hand_over(lines[:-2])
            return
        arr = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
        if arr.type == pa.large_string():
            arr = arr.cast(pa.string())
        offsets = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset : arr.offset + len(arr) + 1]
        self._hand_over(memoryview(arr.buffers()[2])[int(offsets[0]) : int(offsets[-1]) - 2])  # keeps the buffer

    def _hand_over(self, data: memoryview) -> None:
        """Write ``data`` (lines, the last one's separator cut) after the lines before it."""
        separator = b",\n" if self.pending else b""
        self.pending = True
        self.wait()
        self._writing = self._pool.submit(self._write, separator, data)

    def _write(self, separator: bytes, data: memoryview) -> None:
        self.fh.write(separator)
        self.fh.write(data)

    def wait(self) -> None:
        """Until the lines handed over are written (raising what writing raised)."""
        if self._writing is not None:
            writing, self._writing = self._writing, None
            writing.result()

    def close(self) -> None:
        try:
            self.wait()
            self.fh.write(b"\n]}\n")
        finally:
            self._pool.shutdown()

    def stop(self) -> None:
        """Give up: let the write in flight end, write nothing more."""
        self._pool.shutdown(cancel_futures=True)
