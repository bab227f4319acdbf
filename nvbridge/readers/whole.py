"""A report read whole, as one window: nvprof files, SQLAlchemy URLs, and what does not stream."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col
from nvbridge.readers.memory_marks import split_memory
from nvbridge.readers.raw import RawProfile, Restart, Tail, TraceFacts, Window, capture_end


def whole_activity(api: pa.Table, gpu: pa.Table) -> tuple[pa.Table, pa.Table]:
    """A reader's whole API call and GPU op tables as one window takes them: ids in table order."""
    api = api.append_column("api_call_id", pa.array(np.arange(api.num_rows, dtype=np.int64)))
    gpu = gpu.append_column("table_index", pa.array(np.zeros(gpu.num_rows, np.int64)))
    return api, gpu.append_column("rowid", pa.array(np.arange(gpu.num_rows, dtype=np.int64)))


class OneWindow:
    """A :class:`~nvbridge.readers.raw.WindowSource` of one window holding the whole profile.
    The profile is let go once its window is out, so the engine's rows replace it."""

    def __init__(self, profile: RawProfile) -> None:
        self.info = profile.info
        self.syncs = profile.syncs
        r, api = profile.ranges, profile.api_calls
        times = [np_col(r, "start_ns"), np_col(api, "start_ns"), np_col(api, "end_ns")]
        hi = int(max((int(t.max()) for t in times if len(t)), default=0))
        self.capture_end_ns = capture_end(profile.info, hi)
        self._profile: RawProfile | None = profile
        marks, memory = (profile.marks, profile.memory) if profile.memory is not None else split_memory(profile.marks)
        self._memory: pa.Table | None = memory
        self.has_memory = bool(memory.num_rows)
        self._tail = Tail(marks, profile.threads, profile.devices)
        self.rows_read = profile.rows_read

    def windows(self) -> Iterator[Window | Restart]:
        profile, self._profile = self._profile, None
        if profile is None:
            return _Once(None)
        api, gpu = whole_activity(profile.api_calls, profile.gpu_ops)
        memory, self._memory = self._memory, None
        if memory is not None and memory.num_rows > 1:  # time order, ties as recorded
            ts = np_col(memory, "ts_ns")
            if (np.diff(ts) < 0).any():
                memory = memory.take(pa.array(np.argsort(ts, kind="stable")))
        return _Once(Window(profile.ranges, api, gpu, None, profile.rows_read, memory))

    def tail(self) -> Tail:
        return self._tail

    def trace_facts(self) -> TraceFacts | None:
        return None


class _Once:
    """An iterator of one window that holds it no longer once it is handed on (a generator's
    frame would, until the next call)."""

    def __init__(self, window: Window | None) -> None:
        self._window = window

    def __iter__(self) -> _Once:
        return self

    def __next__(self) -> Window:
        window, self._window = self._window, None
        if window is None:
            raise StopIteration
        return window
