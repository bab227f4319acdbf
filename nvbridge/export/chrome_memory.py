"""Memory counter tracks of the Chrome trace: one ``ph: "C"`` event per ``memory`` row.

Each allocator event (docs/memory.md) becomes a counter event in the host process of the row,
named ``Memory <device>`` (``Memory cpu``, ``Memory cuda:0``), with ``args`` ``{"allocated":
total_allocated, "reserved": total_reserved}``, at the row's ``ts_ns`` on the ops' clock.
Perfetto draws one counter track per process, name and key (``Memory cuda:0 allocated``);
chrome://tracing stacks the keys of one name. A line is at most :func:`line_bound` bytes.

A trace cut to a window (``--start``, ``--steps``), or a report whose first allocator event
precedes its first range, call or GPU op (the trace's time 0), starts each (process, device)
track with the value live at the cut: the last row before it, drawn at the cut (unless a row of
that track lies exactly there). Rows are fed a chunk at a time in time order, as the dataset
holds them; only one row per track is kept between chunks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col, one_chunk
from nvbridge.dataset.schema import pick
from nvbridge.export import chrome_native
from nvbridge.export.chrome_text import Lines, escape, join, num, us

MEMORY_COLUMNS = tuple(pick("memory", ["ts_ns", "process_id", "device", "total_allocated", "total_reserved"]))
NAME_PREFIX = "Memory "
HEAD = '{"ph":"C","cat":"memory","name":'
# The bytes of a line but for the device text and the numbers: HEAD, the name's quotes and prefix,
# the keys, the ts's point, the closing braces and the separator.
FIXED_BYTES = len(HEAD) + 2 + len(NAME_PREFIX) + len(',"pid":,"ts":.,"args":{"allocated":,"reserved":}},\n')
Track = tuple[int, str]  # (process id, device text)


def line_bound(device: str, ts_us_digits: int = 16) -> int:
    """Bytes of a counter line at most: the fixed text, the device, a pid below 2**32 (10 digits),
    ``ts_us_digits`` digits of whole µs (16: 317 years of nanoseconds), three decimals and two
    signed 64-bit integers (20 characters each)."""
    return FIXED_BYTES + len(device.encode()) + 10 + ts_us_digits + 3 + 2 * 20


def counter_names(device: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray:
    """``Memory <device>`` per row, dictionary-encoded (the prefix joined once per device)."""
    col = one_chunk(device)
    if not pa.types.is_dictionary(col.type):
        col = col.cast(pa.string()).dictionary_encode()
    names = pc.binary_join_element_wise(NAME_PREFIX, col.dictionary.cast(pa.string()), "")
    return pa.DictionaryArray.from_arrays(col.indices, names)


def counter_lines(t: pa.Table, origin: int) -> Lines:
    """The rows' counter events (rows with a time, process, device and allocated total)."""
    names = counter_names(t.column("device"))
    ts = np_col(t, "ts_ns") - origin
    fast = chrome_native.counter_lines(names, t, ts, HEAD)
    if fast is not None:
        return fast
    reserved = t.column("total_reserved")
    return join(
        HEAD,
        escape(names),
        ',"pid":',
        num(np_col(t, "process_id")),
        ',"ts":',
        us(ts),
        ',"args":{"allocated":',
        num(np_col(t, "total_allocated")),
        pc.fill_null(join(',"reserved":', reserved.cast(pa.string())), ""),
        "}},\n",
    )


def _usable(table: pa.Table) -> pa.Table:
    """Rows a counter can be drawn from (every column but the reserved total set)."""
    cols = ("ts_ns", "process_id", "device", "total_allocated")
    if any(table.column(c).null_count for c in cols):
        valid = np.ones(table.num_rows, bool)
        for c in cols:
            valid &= np.asarray(table.column(c).is_valid().to_numpy(zero_copy_only=False))
        table = table.filter(pa.array(valid))
    return table


def _last_per_track(t: pa.Table) -> dict[Track, tuple[int, int, int | None]]:
    """Per (process, device), the row latest in time (ties: the later row): (ts, allocated, reserved)."""
    dev = one_chunk(t.column("device"))
    dev = dev if pa.types.is_dictionary(dev.type) else dev.cast(pa.string()).dictionary_encode()
    labels = dev.dictionary.cast(pa.string()).to_pylist()
    code = np.asarray(dev.indices.to_numpy(zero_copy_only=False), np.int64)
    key = np_col(t, "process_id") * max(len(labels), 1) + code
    order = np.lexsort((np.arange(len(key)), np_col(t, "ts_ns"), key))
    last = order[np.r_[key[order][1:] != key[order][:-1], True]]  # each key's final row
    pid, ts, alloc = np_col(t, "process_id")[last], np_col(t, "ts_ns")[last], np_col(t, "total_allocated")[last]
    reserved = t.column("total_reserved").take(pa.array(last)).to_pylist()
    return {
        (int(p), labels[int(c)]): (int(s), int(a), None if r is None else int(r))
        for p, c, s, a, r in zip(pid.tolist(), code[last].tolist(), ts.tolist(), alloc.tolist(), reserved)
    }


class MemoryCounters:
    """The counter events of one trace (see the module doc).

    Args:
        origin_ns: the trace's time 0; start_ns, end_ns: its window (report time); processes:
            only rows of these host processes.
    """

    def __init__(
        self, origin_ns: int, start_ns: int | None, end_ns: int | None, processes: Sequence[int] | None
    ) -> None:
        self.origin, self.start, self.end = origin_ns, start_ns, end_ns
        self.processes = None if processes is None else np.asarray(sorted(processes), np.int64)
        self.rows = 0  # counter events written
        self.pids: set[int] = set()  # processes with a counter track
        self._carried: dict[tuple[int, Track], tuple[int, int, int | None]] = {}  # (floor, track) -> last before
        self._at_floor: set[tuple[int, Track]] = set()  # tracks with a row exactly at their cut

    def floor(self) -> int:
        """Where the trace's counters start: the window's start, or time 0 if later."""
        return self.origin if self.start is None else max(self.start, self.origin)

    def lines(self, table: pa.Table, floor_ns: int | None = None) -> Lines | None:
        """A chunk of ``memory`` rows (time order) -> its counter lines; rows before the cut
        (``floor_ns``, default :meth:`floor`) are held as the value live at it."""
        floor = self.floor() if floor_ns is None else floor_ns
        t = _usable(table.select(list(MEMORY_COLUMNS)))
        if self.processes is not None and t.num_rows:
            t = t.filter(pa.array(np.isin(np_col(t, "process_id"), self.processes)))
        if not t.num_rows:
            return None
        ts = np_col(t, "ts_ns")
        before = ts < floor
        if before.any():
            for track, row in _last_per_track(t.filter(pa.array(before))).items():
                held = self._carried.get((floor, track))
                if held is None or row[0] >= held[0]:
                    self._carried[(floor, track)] = row
        kept = ~before if self.end is None else ~before & (ts <= self.end)
        if not kept.any():
            return None
        t = t.filter(pa.array(kept)) if not kept.all() else t
        at_floor = np_col(t, "ts_ns") == floor
        if at_floor.any():
            self._at_floor.update((floor, track) for track in _last_per_track(t.filter(pa.array(at_floor))))
        self.rows += t.num_rows
        self.pids.update(np.unique(np_col(t, "process_id")).tolist())
        return counter_lines(t, self.origin)

    def carried(self) -> Lines | None:
        """The value live at the cut of each track with rows before it and none exactly at it."""
        due = sorted((k, v) for k, v in self._carried.items() if k not in self._at_floor)
        self._carried, self._at_floor = {}, set()
        if not due:
            return None
        t = pa.table(
            {
                "ts_ns": pa.array([floor for (floor, _), _ in due], pa.int64()),
                "process_id": pa.array([track[0] for (_, track), _ in due], pa.int64()),
                "device": pa.array([track[1] for (_, track), _ in due], pa.string()),
                "total_allocated": pa.array([row[1] for _, row in due], pa.int64()),
                "total_reserved": pa.array([row[2] for _, row in due], pa.int64()),
            }
        )
        self.rows += t.num_rows
        self.pids.update(track[0] for (_, track), _ in due)
        return counter_lines(t, self.origin)
