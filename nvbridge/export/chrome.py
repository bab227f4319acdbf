"""Chrome / Perfetto trace (Trace Event Format), shaped like PyTorch profiler (Kineto) traces.

Tracks follow Kineto: a host process is ``pid`` = OS pid with one ``tid`` per thread; a GPU is
``pid`` = device index with one ``tid`` per stream. Slices are ``ph: "X"`` with categories
``cpu_op`` / ``user_annotation`` (NVTX ranges), ``cuda_runtime`` / ``cuda_driver`` (API calls),
``kernel``, ``gpu_memcpy``, ``gpu_memset``; flows ``ac2g`` (API call -> GPU op) and ``fwdbwd``
(forward op -> backward node) are ``ph: "s"`` then ``ph: "f"`` with ``bp: "e"``. Times are
microseconds with three decimals (exact nanoseconds) relative to ``baseTimeNanoseconds``.

Every event line is built column-wise by Arrow string kernels and written straight from the
Arrow buffer, in batches, into a (gzip) stream: no Python object per event, bounded memory.
Ranges that cannot nest on their thread (ended on another thread, or crossing a sibling) go to
a separate ``(async)`` track so every track stays properly nested for strict viewers.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.correlate import CROSS_THREAD, CROSSING
from nvbridge.readers._arrow import np_col

SUFFIXES = (".json", ".json.gz")
BATCH_ROWS = 200_000
# Tracks for ranges that cannot nest on their own thread: tid + this offset.
ASYNC_TID_OFFSET = 1 << 40
GPU_CATEGORY = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset", "graph": "kernel"}


@dataclass
class TraceStats:
    """What was written: counts per kind, flows, and problems found (never silently fixed)."""

    path: Path
    slices: dict[str, int] = field(default_factory=dict)
    flows: dict[str, int] = field(default_factory=dict)
    overlapping_gpu_ops: int = 0
    gpu_ns_by_device: dict[int, int] = field(default_factory=dict)


def _escape(values: pa.Array) -> pa.Array:
    """Strings as JSON string literals (quotes included), valid for strict parsers; null stays null."""
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


def _num(values: np.ndarray) -> pa.Array:
    return pa.array(values).cast(pa.string())


def _us(ns: np.ndarray) -> pa.Array:
    """Non-negative ns -> microseconds text with exactly three decimals."""
    q, r = np.divmod(ns, 1000)
    return pc.binary_join_element_wise(_num(q), pc.utf8_lpad(_num(r), 3, "0"), ".")


def _join(*parts: pa.Array | str) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


def _opt(label: str, values: pa.Array, quote: bool = False) -> pa.Array:
    """``,"label":value`` or '' where the value is null."""
    text = _escape(values) if quote else values.cast(pa.string())
    return pc.fill_null(_join(f',"{label}":', text), "")


class _Writer:
    """Streams events into the open file: header, batches of lines, footer."""

    def __init__(self, fh: IO[bytes], base_ns: int, meta: dict[str, Any]) -> None:
        self.fh = fh
        head = {"schemaVersion": 1, "displayTimeUnit": "ms", "baseTimeNanoseconds": base_ns,
                "traceName": meta.get("source"), "nvbridge": meta}
        text = json.dumps(head)
        fh.write(text[:-1].encode() + b', "traceEvents": [\n')

    def lines(self, lines: pa.Array) -> None:
        """Write events; each line already ends with ',\\n'."""
        if len(lines) == 0:
            return
        arr = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
        offsets = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset: arr.offset + len(arr) + 1]
        data = arr.buffers()[2]
        self.fh.write(memoryview(data)[int(offsets[0]):int(offsets[-1])])

    def close(self, last: dict[str, Any]) -> None:
        self.fh.write(json.dumps(last).encode() + b"\n]}\n")


def _meta_event(kind: str, pid: int | str, tid: int | None, name: str, sort: int | None = None) -> str:
    event: dict[str, Any] = {"ph": "M", "name": kind, "pid": pid, "args": {"name": name}}
    if tid is not None:
        event["tid"] = tid
    if sort is not None:
        event = {"ph": "M", "name": kind.replace("_name", "_sort_index"), "pid": pid, "args": {"sort_index": sort}}
        if tid is not None:
            event["tid"] = tid
    return json.dumps(event) + ",\n"


def _batches(n: int) -> range:
    return range(0, n, BATCH_ROWS)


def _batch(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """Rows of a table, with dictionary-encoded names decoded (string kernels want strings)."""
    t = table.take(pa.array(rows))
    schema = pa.schema([pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f
                        for f in t.schema])
    return t.cast(schema)


def write(report: Any, dest: str | os.PathLike[str], *, start_ns: int | None = None, end_ns: int | None = None,
          processes: set[int] | None = None) -> TraceStats:
    """Write ``report``'s tables as a Chrome trace (``.json`` or ``.json.gz``).

    Args:
        report: an ``nvbridge.Report`` (or anything with its table attributes and ``meta``).
        dest: output path; a ``.gz`` suffix compresses while streaming.
        start_ns, end_ns: keep only what overlaps this window (report time base).
        processes: keep only these host process ids (and GPU work they launched).
    """
    path = Path(dest)
    ops, api, gpu = report.ops, report.api_calls, report.gpu_ops
    keep_ops = _window(ops, start_ns, end_ns, processes)
    keep_api = _window(api, start_ns, end_ns, processes)
    keep_gpu = _window(gpu, start_ns, end_ns, processes)
    starts = [np_col(t, "start_ns")[k] for t, k in ((ops, keep_ops), (api, keep_api), (gpu, keep_gpu))]
    origin = int(min((int(s.min()) for s in starts if len(s)), default=0))
    epoch = report.meta.get("session_start_utc_ns") if report.meta.get("time_base") == "session" else None
    base_ns = origin + (int(epoch) if epoch else 0)
    stats = TraceStats(path)
    tmp = path.with_name(path.name + ".partial")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(tmp, "wb") as raw:  # type: ignore[operator]
            fh = io.BufferedWriter(raw, buffer_size=1 << 20)  # type: ignore[arg-type]
            writer = _Writer(fh, base_ns, {k: v for k, v in report.meta.items() if k.startswith(
                ("source", "kind", "producer", "schema", "time_base", "nvbridge", "dataset"))})
            _metadata(writer, report, keep_ops, keep_api, keep_gpu)
            _ops(writer, ops, keep_ops, origin, stats)
            _api(writer, api, keep_api, origin, stats)
            _gpu(writer, gpu, keep_gpu, origin, stats)
            _flows(writer, ops, api, gpu, keep_ops, keep_api, keep_gpu, origin, stats)
            writer.close({"ph": "M", "name": "process_name", "pid": -1, "args": {"name": "nvbridge"}})
            fh.flush()
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return stats


def step_window(ops: pa.Table, first: int, last: int) -> tuple[int, int]:
    """[start, end] of ProfilerStep#first .. ProfilerStep#last (nvbridge.annotate / torch.profiler).

    Raises:
        ValueError: the report has no such steps.
    """
    names = ops.column("op_name")
    steps = pc.extract_regex(names, r"^ProfilerStep#(?P<n>\d+)$")
    valid = np.asarray(pc.is_valid(steps).to_numpy(zero_copy_only=False))
    if not valid.any():
        raise ValueError("the report has no ProfilerStep#N ranges; record with nvbridge.emit_nvtx(...).step()")
    n = np.asarray(pc.struct_field(steps, "n").cast(pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False))
    sel = valid & (n >= first) & (n <= last)
    if not sel.any():
        have = sorted(set(n[valid].tolist()))
        raise ValueError(f"no steps {first}..{last} in the report (it has steps {have[0]}..{have[-1]})")
    return int(np_col(ops, "start_ns")[sel].min()), int(np_col(ops, "end_ns")[sel].max())


def _window(table: pa.Table, start_ns: int | None, end_ns: int | None, processes: set[int] | None) -> np.ndarray:
    """Row indices overlapping [start_ns, end_ns] of the given processes."""
    keep = np.ones(table.num_rows, bool)
    if start_ns is not None:
        keep &= np_col(table, "end_ns") >= start_ns
    if end_ns is not None:
        keep &= np_col(table, "start_ns") <= end_ns
    if processes is not None:
        keep &= np.isin(np_col(table, "process_id", fill=-1), list(processes))
    return np.flatnonzero(keep)


def _metadata(writer: _Writer, report: Any, keep_ops: np.ndarray, keep_api: np.ndarray,
              keep_gpu: np.ndarray) -> None:
    threads = report.threads.to_pylist()
    names = {(t["process_id"], t["thread_id"]): t.get("thread_name") for t in threads}
    procs = {t["process_id"]: t.get("process_name") for t in threads}
    used = set(zip(np_col(report.ops, "process_id")[keep_ops].tolist(),
                   np_col(report.ops, "thread_id", fill=0)[keep_ops].tolist()))
    used |= set(zip(np_col(report.api_calls, "process_id")[keep_api].tolist(),
                    np_col(report.api_calls, "thread_id")[keep_api].tolist()))
    out = []
    for pid in sorted({p for p, _ in used}):
        out.append(_meta_event("process_name", pid, None, procs.get(pid) or f"process {pid}"))
        out.append(_meta_event("process_name", pid, None, "", sort=pid))
    for pid, tid in sorted(used):
        out.append(_meta_event("thread_name", pid, tid, names.get((pid, tid)) or f"thread {tid}"))
    devices = dict(zip(np_col(report.devices, "device_id", fill=-1).tolist(), report.devices.column("name").to_pylist()))
    g = report.gpu_ops
    streams = set(zip(np_col(g, "device_id", fill=0)[keep_gpu].tolist(), np_col(g, "stream_id", fill=0)[keep_gpu].tolist()))
    for dev in sorted({d for d, _ in streams}):
        label = f"GPU {dev}" + (f" ({devices[dev]})" if devices.get(dev) else "")
        out.append(_meta_event("process_name", dev, None, label))
        out.append(_meta_event("process_name", dev, None, "", sort=-1000 + dev))
    for dev, stream in sorted(streams):
        out.append(_meta_event("thread_name", dev, stream, f"stream {stream}"))
    writer.lines(pa.array(out, pa.string()))


def _ops(writer: _Writer, ops: pa.Table, keep: np.ndarray, origin: int, stats: TraceStats) -> None:
    flags = np_col(ops, "flags")
    for lo in _batches(len(keep)):
        idx = keep[lo: lo + BATCH_ROWS]
        t = _batch(ops, idx)
        s, e = np_col(t, "start_ns") - origin, np_col(t, "end_ns") - np_col(t, "start_ns")
        torch_op = pc.or_(pc.is_valid(t.column("seq")), pc.is_valid(t.column("torch_op_id")))
        cat = pc.if_else(torch_op, pa.scalar('"cpu_op"'), pa.scalar('"user_annotation"'))
        unnested = (flags[idx] & (CROSS_THREAD | CROSSING)) != 0
        tid = np_col(t, "thread_id", fill=0) + np.where(unnested, ASYNC_TID_OFFSET, 0)
        lines = _join(
            '{"ph":"X","cat":', cat, ',"name":', _escape(t.column("op_name").fill_null("")),
            ',"pid":', _num(np_col(t, "process_id")), ',"tid":', _num(tid),
            ',"ts":', _us(s), ',"dur":', _us(e),
            ',"args":{"External id":', _num(np_col(t, "op_id")),
            _opt("Sequence number", t.column("seq")), _opt("Fwd thread id", t.column("fwd_tid")),
            _opt("Input Dims", t.column("input_shapes"), quote=True),
            _opt("Module", t.column("module_path"), quote=True),
            _opt("NVTX domain", t.column("domain"), quote=True),
            ',"NVTX name":', _escape(t.column("name").fill_null("")), "}},\n")
        writer.lines(lines)
        stats.slices["ops"] = stats.slices.get("ops", 0) + len(idx)


def _api(writer: _Writer, api: pa.Table, keep: np.ndarray, origin: int, stats: TraceStats) -> None:
    for lo in _batches(len(keep)):
        t = _batch(api, keep[lo: lo + BATCH_ROWS])
        s = np_col(t, "start_ns") - origin
        d = np_col(t, "end_ns") - np_col(t, "start_ns")
        cat = pc.if_else(pc.equal(t.column("kind"), "driver"), pa.scalar('"cuda_driver"'), pa.scalar('"cuda_runtime"'))
        lines = _join(
            '{"ph":"X","cat":', cat, ',"name":', _escape(t.column("name").fill_null("")),
            ',"pid":', _num(np_col(t, "process_id")), ',"tid":', _num(np_col(t, "thread_id")),
            ',"ts":', _us(s), ',"dur":', _us(d),
            ',"args":{"correlation":', t.column("correlation_id").cast(pa.string()).fill_null("null"),
            _opt("External id", t.column("op_id")), "}},\n")
        writer.lines(lines)
        stats.slices["api_calls"] = stats.slices.get("api_calls", 0) + t.num_rows


def gpu_tracks(gpu: pa.Table, keep: np.ndarray) -> np.ndarray:
    """Stream id per kept GPU op, moving ops that overlap an earlier op of their stream to
    an ``overlap`` track (stream + 2**32): one track must hold nested or disjoint slices."""
    dev = np_col(gpu, "device_id", fill=0)[keep]
    stream = np_col(gpu, "stream_id", fill=0)[keep]
    s, e = np_col(gpu, "start_ns")[keep], np_col(gpu, "end_ns")[keep]
    order = np.lexsort((s, stream, dev))
    s_o, e_o = s[order], e[order]
    new_track = np.ones(len(order), bool)
    new_track[1:] = (dev[order][1:] != dev[order][:-1]) | (stream[order][1:] != stream[order][:-1])
    bounds = list(np.flatnonzero(new_track)) + [len(order)]
    overlap = np.zeros(len(order), bool)
    for a, b in zip(bounds[:-1], bounds[1:]):  # one step per (device, stream): a few dozen
        seen = np.maximum.accumulate(e_o[a:b])
        overlap[order[a + 1:b]] = s_o[a + 1:b] < seen[:-1]
    return np.where(overlap, stream + (1 << 32), stream)


def _gpu(writer: _Writer, gpu: pa.Table, keep: np.ndarray, origin: int, stats: TraceStats) -> None:
    tracks = gpu_tracks(gpu, keep)
    stats.overlapping_gpu_ops = int((tracks >= (1 << 32)).sum())
    dev_all = np_col(gpu, "device_id", fill=0)[keep]
    dur_all = (np_col(gpu, "end_ns") - np_col(gpu, "start_ns"))[keep]
    for d in np.unique(dev_all):
        stats.gpu_ns_by_device[int(d)] = int(dur_all[dev_all == d].sum())
    for lo in _batches(len(keep)):
        t = _batch(gpu, keep[lo: lo + BATCH_ROWS])
        s = np_col(t, "start_ns") - origin
        d = np_col(t, "end_ns") - np_col(t, "start_ns")
        kind = t.column("kind")
        cat = pc.binary_join_element_wise('"', pc.replace_substring_regex(
            pc.replace_substring_regex(pc.replace_substring_regex(kind, "^kernel$|^graph$", "kernel"),
                                       "^memcpy$", "gpu_memcpy"), "^memset$", "gpu_memset"), '"', "")
        grid = pc.fill_null(_join(',"grid":[', t.column("grid_x").cast(pa.string()), ",",
                                  t.column("grid_y").cast(pa.string()), ",", t.column("grid_z").cast(pa.string()),
                                  '],"block":[', t.column("block_x").cast(pa.string()), ",",
                                  t.column("block_y").cast(pa.string()), ",", t.column("block_z").cast(pa.string()),
                                  "]"), "")
        nbytes = t.column("bytes").cast(pa.int64())
        bandwidth = pc.divide(nbytes.cast(pa.float64()), pa.array(np.maximum(d, 1).astype(np.float64)))
        bw_text = pc.fill_null(_join(',"memory bandwidth (GB/s)":', pc.round(bandwidth, 3).cast(pa.string())), "")
        lines = _join(
            '{"ph":"X","cat":', cat, ',"name":', _escape(t.column("name").fill_null("")),
            ',"pid":', _num(np_col(t, "device_id", fill=0)), ',"tid":', _num(tracks[lo: lo + BATCH_ROWS]),
            ',"ts":', _us(s), ',"dur":', _us(d),
            ',"args":{"device":', _num(np_col(t, "device_id", fill=0)),
            ',"stream":', _num(np_col(t, "stream_id", fill=0)),
            ',"correlation":', t.column("correlation_id").cast(pa.string()).fill_null("null"),
            _opt("External id", t.column("op_id")), grid, _opt("bytes", nbytes), bw_text, "}},\n")
        writer.lines(lines)
        for k, c in zip(*np.unique(np.asarray(kind.to_numpy(zero_copy_only=False)), return_counts=True)):
            stats.slices[str(k)] = stats.slices.get(str(k), 0) + int(c)


def _flow_lines(cat: str, ids: np.ndarray, pid_s: np.ndarray, tid_s: np.ndarray, ts_s: np.ndarray,
                pid_f: np.ndarray, tid_f: np.ndarray, ts_f: np.ndarray) -> pa.Array:
    head = f'{{"cat":"{cat}","name":"{cat}","id":'
    start = _join(head, _num(ids), ',"ph":"s","pid":', _num(pid_s), ',"tid":', _num(tid_s), ',"ts":', _us(ts_s),
                  "},\n")
    finish = _join(head, _num(ids), ',"ph":"f","bp":"e","pid":', _num(pid_f), ',"tid":', _num(tid_f),
                   ',"ts":', _us(ts_f), "},\n")
    return pc.binary_join_element_wise(start, finish, "")


def _flows(writer: _Writer, ops: pa.Table, api: pa.Table, gpu: pa.Table, keep_ops: np.ndarray,
           keep_api: np.ndarray, keep_gpu: np.ndarray, origin: int, stats: TraceStats) -> None:
    """ac2g ids are gpu_op_id + 1; fwdbwd ids follow after all GPU ops: no collisions."""
    tracks = gpu_tracks(gpu, keep_gpu)
    api_of = np_col(gpu, "api_call_id", fill=-1)[keep_gpu]
    api_kept = np.zeros(api.num_rows, bool)
    api_kept[keep_api] = True
    has = (api_of >= 0) & api_kept[np.maximum(api_of, 0)]
    g_idx, a_idx = keep_gpu[has], api_of[has]
    a_start = np_col(api, "start_ns")
    lines = _flow_lines("ac2g", g_idx + 1, np_col(api, "process_id")[a_idx], np_col(api, "thread_id")[a_idx],
                        a_start[a_idx] - origin, np_col(gpu, "device_id", fill=0)[g_idx], tracks[has],
                        np_col(gpu, "start_ns")[g_idx] - origin)
    writer.lines(lines)
    stats.flows["ac2g"] = len(g_idx)

    fwd = np_col(ops, "fwd_op_id", fill=-1)
    kept = np.zeros(ops.num_rows, bool)
    kept[keep_ops] = True
    bwd = np.flatnonzero((fwd >= 0) & kept & kept[np.maximum(fwd, 0)])
    f = fwd[bwd]
    flags = np_col(ops, "flags")
    tid = np_col(ops, "thread_id", fill=0) + np.where((flags & (CROSS_THREAD | CROSSING)) != 0, ASYNC_TID_OFFSET, 0)
    pid, start = np_col(ops, "process_id"), np_col(ops, "start_ns")
    writer.lines(_flow_lines("fwdbwd", gpu.num_rows + 1 + bwd, pid[f], tid[f], start[f] - origin,
                             pid[bwd], tid[bwd], start[bwd] - origin))
    stats.flows["fwdbwd"] = len(bwd)
