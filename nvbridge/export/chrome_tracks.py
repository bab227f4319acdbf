"""Tracks of the Chrome trace: lanes for slices that cannot nest, free thread ids, track names.

Kineto's tracks are pid = OS pid with tid = OS tid, and pid = device with tid = stream. Ranges
that cannot nest on their thread and GPU ops overlapping an earlier op of their stream move to
extra tracks, so every track stays properly nested for strict viewers. Extra tracks get free
thread ids below 2**32: Perfetto reads ``pid``/``tid`` as unsigned 32-bit and silently merges
anything larger into the process's main track.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col
from nvbridge.export.chrome_text import meta_event

MAX_TID = (1 << 32) - 1  # Perfetto's JSON importer drops larger (or negative) pid/tid values
Lane = tuple[int, int, int]  # (pid or device, tid or stream, lane >= 1)


def _moved(k: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """For intervals sorted by (key, start): starts before an earlier interval of its key ends."""
    group = np.zeros(len(k), np.int64)
    group[1:] = np.cumsum(k[1:] != k[:-1])
    lo = int(min(s.min(), e.min()))
    shift = group * (int(max(s.max(), e.max())) - lo + 1)  # groups never reach into each other
    reach = np.maximum.accumulate(e - lo + shift)
    moved = np.zeros(len(k), bool)
    moved[1:] = (s[1:] - lo + shift[1:]) < reach[:-1]
    return moved


def lanes(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane per interval (0 = the track itself) such that intervals sharing (key, lane) never
    overlap: one starting before an earlier interval of its key ends moves a lane down, round
    after round. Each round is vectorized; rounds = the deepest pile-up (one or two in practice).
    """
    lane = np.zeros(len(key), np.int64)
    todo = np.arange(len(key))
    level = 0
    while len(todo) > 1:
        order = np.lexsort((start[todo], key[todo]))
        todo = todo[order[_moved(key[todo][order], start[todo][order], end[todo][order])]]
        level += 1
        lane[todo] = level
    return lane


class StreamLanes:
    """The first round of :func:`lanes` over GPU ops arriving in chunks in start order: an op is
    moved off its stream's track when it starts before an earlier op of its stream ends (the
    reach of each stream is carried from chunk to chunk). Moved ops get their lanes at the end."""

    def __init__(self) -> None:
        self._keys = np.zeros(0, np.int64)  # sorted stream keys (device << 32 | stream)
        self._reach = np.zeros(0, np.int64)  # latest end so far per key
        self._last = np.zeros(0, np.int64)  # latest start so far per key: an op out of order moves too

    def moved(self, key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Mask of the ops (one chunk) that leave their stream's track."""
        if not len(key):
            return np.zeros(0, bool)
        order = np.lexsort((start, key))
        k, s, e = key[order], start[order], end[order]
        moved = _moved(k, s, e)
        if len(self._keys):
            pos = np.minimum(np.searchsorted(self._keys, k), len(self._keys) - 1)
            known = self._keys[pos] == k
            moved |= known & ((s < self._reach[pos]) | (s < self._last[pos]))
        uniq, first = np.unique(k, return_index=True)
        merged, inverse = np.unique(np.concatenate([self._keys, uniq]), return_inverse=True)
        reach = np.full(len(merged), np.iinfo(np.int64).min, np.int64)
        last = reach.copy()
        np.maximum.at(reach, inverse, np.concatenate([self._reach, np.maximum.reduceat(e, first)]))
        np.maximum.at(last, inverse, np.concatenate([self._last, np.maximum.reduceat(s, first)]))
        self._keys, self._reach, self._last = merged, reach, last
        out = np.zeros(len(key), bool)
        out[order] = moved
        return out


def extra_tids(
    used: set[int], extra_host: list[Lane], extra_gpu: list[Lane]
) -> tuple[dict[Lane, int], dict[Lane, int]]:
    """Thread ids for the extra tracks: the largest ids below 2**32 that no real track uses."""
    taken = np.array(sorted(used), np.int64)
    need = len(extra_host) + len(extra_gpu)
    free = MAX_TID - np.arange(need + len(taken), dtype=np.int64)
    ids = free[~np.isin(free, taken)][:need].tolist()
    return dict(zip(extra_host, ids[: len(extra_host)])), dict(zip(extra_gpu, ids[len(extra_host) :]))


@dataclass(frozen=True)
class TrackSet:
    """Every track that holds a slice: real threads and streams, and the extra ones by lane."""

    host: set[tuple[int, int]]
    streams: set[tuple[int, int]]
    extra_host: dict[Lane, int]
    extra_gpu: dict[Lane, int]
    counters: set[int] = field(default_factory=set)  # processes with memory counters (their names)


def track_names(tracks: TrackSet, threads: pa.Table, devices: pa.Table) -> list[str]:
    """process/thread names and sort indices: host processes first, then GPUs; extra tracks
    right under the thread or stream they belong to."""
    out = _host_names(tracks, threads)
    names = dict(zip(np_col(devices, "device_id", fill=-1).tolist(), devices.column("name").to_pylist()))
    all_streams = sorted(tracks.streams | {(d, s) for d, s, _ in tracks.extra_gpu})
    for dev in sorted({d for d, _ in all_streams}):
        label = f"GPU {dev}" + (f" ({names[dev]})" if names.get(dev) else "")
        out.append(meta_event("process_name", dev, None, {"name": label}))
        out.append(meta_event("process_sort_index", dev, None, {"sort_index": 1_000_000 + dev}))
    lanes_of = _by_track(tracks.extra_gpu)
    for i, (dev, stream) in enumerate(all_streams):
        if (dev, stream) in tracks.streams:
            out.append(meta_event("thread_name", dev, stream, {"name": f"stream {stream}"}))
            out.append(meta_event("thread_sort_index", dev, stream, {"sort_index": i * 1000}))
        for lane, new in lanes_of.get((dev, stream), []):
            out.append(meta_event("thread_name", dev, new, {"name": f"stream {stream} (overlap {lane})"}))
            out.append(meta_event("thread_sort_index", dev, new, {"sort_index": i * 1000 + lane}))
    return out


def _by_track(extra: dict[Lane, int]) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """(lane, new tid) of the extra tracks of each real track, by lane."""
    out: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for (p, t, lane), new in sorted(extra.items()):
        out.setdefault((p, t), []).append((lane, new))
    return out


def _host_names(tracks: TrackSet, threads: pa.Table) -> list[str]:
    rows = threads.select(
        [c for c in ("process_id", "thread_id", "thread_name", "process_name") if c in threads.column_names]
    ).to_pylist()
    names = {(t["process_id"], t["thread_id"]): t.get("thread_name") for t in rows}
    procs = {t["process_id"]: t.get("process_name") for t in rows}
    out = []
    pids = sorted({p for p, _ in tracks.host} | {p for p, _, _ in tracks.extra_host} | tracks.counters)
    for i, pid in enumerate(pids):
        out.append(meta_event("process_name", pid, None, {"name": procs.get(pid) or f"process {pid}"}))
        out.append(meta_event("process_sort_index", pid, None, {"sort_index": i}))
    lanes_of = _by_track(tracks.extra_host)
    for i, (pid, tid) in enumerate(sorted(tracks.host | {(p, t) for p, t, _ in tracks.extra_host})):
        label = names.get((pid, tid)) or f"thread {tid}"
        if (pid, tid) in tracks.host:
            out.append(meta_event("thread_name", pid, tid, {"name": label}))
            out.append(meta_event("thread_sort_index", pid, tid, {"sort_index": i * 1000}))
        for lane, new in lanes_of.get((pid, tid), []):
            out.append(meta_event("thread_name", pid, new, {"name": f"{label} (async {lane})"}))
            out.append(meta_event("thread_sort_index", pid, new, {"sort_index": i * 1000 + lane}))
    return out
