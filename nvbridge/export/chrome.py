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
``(async)`` tracks, and GPU ops overlapping an earlier op of their stream (broken input) to
``(overlap)`` tracks, so every track stays properly nested for strict viewers. Extra tracks get
free thread ids below 2**32: Perfetto reads ``pid``/``tid`` as unsigned 32-bit and silently
merges anything larger into the process's main track.

The header carries what Kineto writes and Holistic Trace Analysis reads: ``schemaVersion``,
``baseTimeNanoseconds``, ``distributedInfo.rank`` (HTA maps one file to one rank; write one
trace per process with ``processes=`` and ``rank=`` for a multi-rank report) and
``deviceProperties``.
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

from nvbridge.columns import np_col
from nvbridge.engine import CROSS_THREAD, CROSSING

SUFFIXES = (".json", ".json.gz")
BATCH_ROWS = 200_000
GPU_CATEGORY = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset", "graph": "kernel"}
MAX_TID = (1 << 32) - 1  # Perfetto's JSON importer drops larger (or negative) pid/tid values


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
    """Streams events into the open file: header, batches of lines, footer.

    Lines arrive ending in ``,\\n``; each batch's final separator is held back and written
    before the next batch, so the array ends without a trailing comma and without a dummy event.
    """

    def __init__(self, fh: IO[bytes], head: dict[str, Any]) -> None:
        self.fh = fh
        self.pending = False
        text = json.dumps(head)  # default separators: HTA finds the rank with r'"rank":\s+(\d+)'
        fh.write(text[:-1].encode() + b', "traceEvents": [\n')

    def lines(self, lines: pa.Array | pa.ChunkedArray) -> None:
        """Write events; each line already ends with ',\\n'."""
        if len(lines) == 0:
            return
        arr = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
        offsets = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset: arr.offset + len(arr) + 1]
        data = memoryview(arr.buffers()[2])[int(offsets[0]):int(offsets[-1])]
        if self.pending:
            self.fh.write(b",\n")
        self.fh.write(data[:-2])
        self.pending = True

    def close(self) -> None:
        self.fh.write(b"\n]}\n")


def _meta_event(kind: str, pid: int, tid: int | None, args: dict[str, Any]) -> str:
    """A ``ph: "M"`` event: process_name, process_sort_index, thread_name, thread_sort_index."""
    event: dict[str, Any] = {"ph": "M", "name": kind, "pid": pid}
    if tid is not None:
        event["tid"] = tid
    event["args"] = args
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
          processes: set[int] | None = None, rank: int = 0, world_size: int = 1) -> TraceStats:
    """Write ``report``'s tables as a Chrome trace (``.json`` or ``.json.gz``).

    Args:
        report: an ``nvbridge.Report`` (or anything with its table attributes and ``meta``).
        dest: output path; a ``.gz`` suffix compresses while streaming.
        start_ns, end_ns: keep only what overlaps this window (report time base).
        processes: keep only these host process ids (and GPU work they launched).
        rank, world_size: ``distributedInfo`` for Holistic Trace Analysis, which reads one
            file per rank (rank 0 of 1 for a single-process trace).
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
    tracks = _tracks(report, keep_ops, keep_api, keep_gpu)
    stats = TraceStats(path)
    stats.overlapping_gpu_ops = int((tracks.gpu_lane > 0).sum())
    meta = {k: v for k, v in report.meta.items()
            if k.startswith(("source", "kind", "producer", "schema", "time_base", "nvbridge", "dataset"))}
    devices = [{"id": int(d), "name": n or f"GPU {d}"} for d, n in zip(
        np_col(report.devices, "device_id", fill=-1).tolist(), report.devices.column("name").to_pylist()) if d >= 0]
    head = {"schemaVersion": 1, "displayTimeUnit": "ms", "baseTimeNanoseconds": base_ns,
            "distributedInfo": {"rank": rank, "world_size": world_size},
            "deviceProperties": devices, "traceName": meta.get("source"), "nvbridge": meta}
    tmp = path.with_name(path.name + ".partial")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(tmp, "wb") as raw:
            fh = io.BufferedWriter(raw, buffer_size=1 << 20)
            writer = _Writer(fh, head)
            writer.lines(pa.array(tracks.metadata, pa.string()))
            _ops(writer, ops, keep_ops, tracks.op_tid, origin, stats)
            _api(writer, api, keep_api, origin, stats)
            _gpu(writer, gpu, keep_gpu, tracks.gpu_tid, origin, stats)
            _flows(writer, ops, api, gpu, keep_ops, keep_api, keep_gpu, tracks, origin, stats)
            writer.close()
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


def lanes(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane per interval (0 = the track itself) such that intervals sharing (key, lane) never
    overlap: one starting before an earlier interval of its key ends moves a lane down, round
    after round. Each round is vectorized; rounds = the deepest pile-up (one or two in practice).
    """
    lane = np.zeros(len(key), np.int64)
    todo = np.arange(len(key))
    level = 0
    while len(todo) > 1:
        k, s, e = key[todo], start[todo], end[todo]
        order = np.lexsort((s, k))
        k, s, e = k[order], s[order], e[order]
        group = np.zeros(len(k), np.int64)
        group[1:] = np.cumsum(k[1:] != k[:-1])
        lo = int(min(s.min(), e.min()))
        shift = group * (int(max(s.max(), e.max())) - lo + 1)  # groups never reach into each other
        reach = np.maximum.accumulate(e - lo + shift)
        moved = np.zeros(len(k), bool)
        moved[1:] = (s[1:] - lo + shift[1:]) < reach[:-1]
        todo = todo[order[moved]]
        level += 1
        lane[todo] = level
    return lane


def gpu_tracks(gpu: pa.Table, keep: np.ndarray) -> np.ndarray:
    """Lane per kept GPU op: 0 on its stream's track, >0 when it overlaps an earlier op of its stream."""
    key = (np_col(gpu, "device_id", fill=0)[keep] << 32) | np_col(gpu, "stream_id", fill=0)[keep]
    return lanes(key, np_col(gpu, "start_ns")[keep], np_col(gpu, "end_ns")[keep])


@dataclass
class _Tracks:
    """Thread id of every kept slice, and the metadata events naming each track."""

    op_tid: np.ndarray
    gpu_tid: np.ndarray
    gpu_lane: np.ndarray
    metadata: list[str]


def _tracks(report: Any, keep_ops: np.ndarray, keep_api: np.ndarray, keep_gpu: np.ndarray) -> _Tracks:
    """Kineto's tracks (pid = OS pid, tid = OS tid; pid = device, tid = stream) plus extra tracks
    for ranges that cannot nest on their thread and GPU ops overlapping on their stream."""
    ops, api, gpu = report.ops, report.api_calls, report.gpu_ops
    o_pid, o_tid = np_col(ops, "process_id")[keep_ops], np_col(ops, "thread_id", fill=0)[keep_ops]
    a_pid, a_tid = np_col(api, "process_id")[keep_api], np_col(api, "thread_id")[keep_api]
    g_dev, g_stream = np_col(gpu, "device_id", fill=0)[keep_gpu], np_col(gpu, "stream_id", fill=0)[keep_gpu]
    unnested = (np_col(ops, "flags")[keep_ops] & (CROSS_THREAD | CROSSING)) != 0
    o_lane = np.zeros(len(keep_ops), np.int64)
    o_lane[unnested] = 1 + lanes((o_pid[unnested] << 32) | o_tid[unnested],
                                 np_col(ops, "start_ns")[keep_ops][unnested], np_col(ops, "end_ns")[keep_ops][unnested])
    g_lane = gpu_tracks(gpu, keep_gpu)

    host = {(int(p), int(t)) for p, t in zip(o_pid[~unnested].tolist(), o_tid[~unnested].tolist())}
    host |= set(zip(a_pid.tolist(), a_tid.tolist()))
    extra_host = sorted(set(zip(o_pid[unnested].tolist(), o_tid[unnested].tolist(), o_lane[unnested].tolist())))
    streams = set(zip(g_dev[g_lane == 0].tolist(), g_stream[g_lane == 0].tolist()))
    extra_gpu = sorted(set(zip(g_dev[g_lane > 0].tolist(), g_stream[g_lane > 0].tolist(), g_lane[g_lane > 0].tolist())))
    used = np.array(sorted({t for _, t in host} | {s for _, s in streams}), np.int64)
    need = len(extra_host) + len(extra_gpu)
    free = MAX_TID - np.arange(need + len(used), dtype=np.int64)
    free = free[~np.isin(free, used)][:need].tolist()
    host_extra_tid = dict(zip(extra_host, free[:len(extra_host)]))
    gpu_extra_tid = dict(zip(extra_gpu, free[len(extra_host):]))

    op_tid = o_tid.copy()
    if unnested.any():
        op_tid[unnested] = [host_extra_tid[k] for k in zip(o_pid[unnested].tolist(), o_tid[unnested].tolist(),
                                                            o_lane[unnested].tolist())]
    gpu_tid = g_stream.copy()
    if (g_lane > 0).any():
        moved = g_lane > 0
        gpu_tid[moved] = [gpu_extra_tid[k] for k in zip(g_dev[moved].tolist(), g_stream[moved].tolist(),
                                                         g_lane[moved].tolist())]
    return _Tracks(op_tid, gpu_tid, g_lane, _track_names(report, host, extra_host, host_extra_tid,
                                                         streams, extra_gpu, gpu_extra_tid))


def _track_names(report: Any, host: set[tuple[int, int]], extra_host: list[tuple[int, int, int]],
                 host_extra_tid: dict[tuple[int, int, int], int], streams: set[tuple[int, int]],
                 extra_gpu: list[tuple[int, int, int]], gpu_extra_tid: dict[tuple[int, int, int], int]) -> list[str]:
    """process/thread names and sort indices: host processes first, then GPUs; extra tracks
    right under the thread or stream they belong to."""
    threads = report.threads.to_pylist()
    names = {(t["process_id"], t["thread_id"]): t.get("thread_name") for t in threads}
    procs = {t["process_id"]: t.get("process_name") for t in threads}
    out = []
    pids = sorted({p for p, _ in host} | {p for p, _, _ in extra_host})
    for i, pid in enumerate(pids):
        out.append(_meta_event("process_name", pid, None, {"name": procs.get(pid) or f"process {pid}"}))
        out.append(_meta_event("process_sort_index", pid, None, {"sort_index": i}))
    thread_list = sorted(host | {(p, t) for p, t, _ in extra_host})
    for i, (pid, tid) in enumerate(thread_list):
        label = names.get((pid, tid)) or f"thread {tid}"
        if (pid, tid) in host:
            out.append(_meta_event("thread_name", pid, tid, {"name": label}))
            out.append(_meta_event("thread_sort_index", pid, tid, {"sort_index": i * 1000}))
        for p, t, lane in extra_host:
            if (p, t) == (pid, tid):
                new = host_extra_tid[(p, t, lane)]
                out.append(_meta_event("thread_name", pid, new, {"name": f"{label} (async {lane})"}))
                out.append(_meta_event("thread_sort_index", pid, new, {"sort_index": i * 1000 + lane}))
    devices = dict(zip(np_col(report.devices, "device_id", fill=-1).tolist(),
                       report.devices.column("name").to_pylist()))
    all_streams = sorted(streams | {(d, s) for d, s, _ in extra_gpu})
    for dev in sorted({d for d, _ in all_streams}):
        label = f"GPU {dev}" + (f" ({devices[dev]})" if devices.get(dev) else "")
        out.append(_meta_event("process_name", dev, None, {"name": label}))
        out.append(_meta_event("process_sort_index", dev, None, {"sort_index": 1_000_000 + dev}))
    for i, (dev, stream) in enumerate(all_streams):
        if (dev, stream) in streams:
            out.append(_meta_event("thread_name", dev, stream, {"name": f"stream {stream}"}))
            out.append(_meta_event("thread_sort_index", dev, stream, {"sort_index": i * 1000}))
        for d, s, lane in extra_gpu:
            if (d, s) == (dev, stream):
                new = gpu_extra_tid[(d, s, lane)]
                out.append(_meta_event("thread_name", dev, new, {"name": f"stream {stream} (overlap {lane})"}))
                out.append(_meta_event("thread_sort_index", dev, new, {"sort_index": i * 1000 + lane}))
    return out


def _ops(writer: _Writer, ops: pa.Table, keep: np.ndarray, op_tid: np.ndarray, origin: int,
         stats: TraceStats) -> None:
    for lo in _batches(len(keep)):
        idx = keep[lo: lo + BATCH_ROWS]
        t = _batch(ops, idx)
        s, e = np_col(t, "start_ns") - origin, np_col(t, "end_ns") - np_col(t, "start_ns")
        torch_op = pc.or_(pc.is_valid(t.column("seq")), pc.is_valid(t.column("torch_op_id")))
        cat = pc.if_else(torch_op, pa.scalar('"cpu_op"'), pa.scalar('"user_annotation"'))
        lines = _join(
            '{"ph":"X","cat":', cat, ',"name":', _escape(t.column("op_name").fill_null("")),
            ',"pid":', _num(np_col(t, "process_id")), ',"tid":', _num(op_tid[lo: lo + BATCH_ROWS]),
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


def _gpu(writer: _Writer, gpu: pa.Table, keep: np.ndarray, tracks: np.ndarray, origin: int,
         stats: TraceStats) -> None:
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
           keep_api: np.ndarray, keep_gpu: np.ndarray, track: _Tracks, origin: int, stats: TraceStats) -> None:
    """ac2g ids are gpu_op_id + 1; fwdbwd ids follow after all GPU ops: no collisions."""
    tracks = track.gpu_tid
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
    tid = np.zeros(ops.num_rows, np.int64)
    tid[keep_ops] = track.op_tid
    pid, start = np_col(ops, "process_id"), np_col(ops, "start_ns")
    writer.lines(_flow_lines("fwdbwd", gpu.num_rows + 1 + bwd, pid[f], tid[f], start[f] - origin,
                             pid[bwd], tid[bwd], start[bwd] - origin))
    stats.flows["fwdbwd"] = len(bwd)
