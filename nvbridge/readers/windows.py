"""Ranges read in parts (rowid windows or slabs of starts) cut into complete windows.

Each window is cut at the latest start of the ranges read: the ranges starting there wait for
the next window, so equal starts are never split (ties order by thread, which the engine sorts).
A window takes the API calls and GPU ops its cut calls for from the reader's activity
(:class:`Activity`). Where the activity between two cuts would fill more than
:data:`SLABS_PER_WINDOW` of its slabs (a report with few or no ranges and many CUDA calls), the
window is cut earlier, at slab bounds, so no window holds more than that whatever the ranges.

What the windows assume and the rows contradict is handed on as a :class:`Restart`, never
raised: ranges of a part that start before an earlier cut (the export is out of start order), or
after the capture end the stream assumed.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Protocol

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col
from nvbridge.readers.raw import RANGES_SCHEMA, Restart, Window

# Slab bounds of the API calls and GPU ops (each slab about half a window's rows) a window may
# span before it is cut at one: the FSDP export's windows span one or two, so reports with ranges
# keep their NVTX windows; a report without ranges is cut every this many slabs instead of read
# in one window (10M rows of API calls and GPU ops: 2.9 GB).
SLABS_PER_WINDOW = 4


class Activity(Protocol):
    """A reader's API calls and GPU ops, handed on as windows ask for them."""

    def take(self, cut: int | None) -> tuple[pa.Table, pa.Table]:
        """The API calls starting before ``cut`` (None: all) not handed on before, with their
        api_call_id, and the GPU ops read since, through the window's horizon."""
        ...

    def bounds(self) -> list[int]:
        """The slab bounds of the API calls and GPU ops, ascending: where a window may be cut."""
        ...


def cut_windows(
    parts: Iterable[pa.Table | Restart],
    activity: Activity,
    capture_end: int,
    rows_read: Callable[[], int],
    memory: Callable[[int | None], pa.Table | None] | None = None,
) -> Iterator[Window | Restart]:
    """``parts`` of ranges, each starting at or after every earlier part's cut, as windows; the
    last window has cut None. A Restart (from ``parts``, or found here) ends the windows.
    ``memory``: the allocator events before a cut (None: all) not taken before, read as the
    parts were (nvbridge.readers.memory_marks.MemoryQueue.take)."""
    cuts = _Cuts(activity, rows_read, memory)
    held: pa.Table | None = None
    for part in parts:
        if isinstance(part, Restart):
            yield part
            return
        if held is not None and held.num_rows:
            # Two chunks, not a copy of the window: the engine makes one chunk per column as it
            # prepends the ranges it carries, one copy for both.
            part = pa.concat_tables([held.cast(part.schema), part])
        if part.num_rows == 0:
            continue
        start = np_col(part, "start_ns")
        if cuts.last is not None and int(start.min()) < cuts.last:
            yield Restart("ranges are not in start order across windows")
            return
        if int(start.max()) > capture_end:
            yield Restart("a range starts after the capture end the stream assumed")
            return
        cut = int(start.max())
        part, start = yield from cuts.before(part, start, cut)
        later = start == cut
        tail = int(later.sum())
        if tail == len(start):
            held = part
            continue
        if later[-tail:].all():  # the usual case, sorted rows: slices, no copies
            now, held = part.slice(0, len(start) - tail), part.slice(len(start) - tail)
        else:
            now, held = part.filter(pa.array(~later)), part.filter(pa.array(later))
        yield cuts.window(now, cut)
    rest = held if held is not None else RANGES_SCHEMA.empty_table()
    rest, _ = yield from cuts.before(rest, np_col(rest, "start_ns"), None)
    yield cuts.window(rest, None)


class _Cuts:
    """The cuts made so far, and the slab bounds a window may be cut at before its own cut."""

    def __init__(
        self, activity: Activity, rows_read: Callable[[], int], memory: Callable[[int | None], pa.Table | None] | None
    ) -> None:
        self._activity = activity
        self._memory = memory
        self._rows_read = rows_read
        self._bounds: np.ndarray | None = None
        self.last: int | None = None

    def window(self, ranges: pa.Table, cut: int | None) -> Window:
        api, gpu = self._activity.take(cut)
        self.last = cut
        memory = self._memory(cut) if self._memory is not None else None
        return Window(ranges, api, gpu, cut, self._rows_read(), memory)

    def before(
        self, ranges: pa.Table, start: np.ndarray, cut: int | None
    ) -> Generator[Window, None, tuple[pa.Table, np.ndarray]]:
        """Windows cut at every SLABS_PER_WINDOW-th slab bound between the last cut and ``cut``
        (None: the end), each with the ranges of ``ranges`` that start before it; returns the
        ranges left and their starts."""
        if self._bounds is None:
            self._bounds = np.asarray(self._activity.bounds(), np.int64)
        lo = 0 if self.last is None else int(np.searchsorted(self._bounds, self.last, "right"))
        hi = len(self._bounds) if cut is None else int(np.searchsorted(self._bounds, cut, "left"))
        for bound in self._bounds[lo + SLABS_PER_WINDOW - 1 : hi : SLABS_PER_WINDOW].tolist():
            now = start < bound
            taken = ranges.filter(pa.array(now)) if now.any() else ranges.slice(0, 0)
            if now.any():
                ranges, start = ranges.filter(pa.array(~now)), start[~now]
            yield self.window(taken, bound)
        return ranges, start
