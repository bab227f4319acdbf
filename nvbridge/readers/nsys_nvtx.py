"""An Nsight Systems export's NVTX rows read in parts for a streamed conversion.

Parts of ``window_rows`` rows in rowid order, or, ``by_start``, slabs of about half as many rows
in start order (:mod:`nvbridge.readers.slabs`: for exports whose ranges are out of start order,
which rowid windows cannot stream). Each part is read one ahead of the consumer on the
database's reader threads, normalized there; marks, thread names and domain names come out of the
same parts (no second scan of NVTX_EVENTS).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from nvbridge.columns import DICT_STR, np_col, set_column
from nvbridge.readers._db import Database
from nvbridge.readers._pages import RowFilter
from nvbridge.readers.memory_marks import DOMAIN, PREFIX, MemoryQueue, split_memory
from nvbridge.readers.nsys_ranges import domain_names, normalize_ranges, nvtx_others
from nvbridge.readers.nsys_tables import (
    NVTX,
    NVTX_DOMAIN_CREATE,
    NVTX_MARK,
    NVTX_THREAD_NAME,
    RANGE_TYPES,
)
from nvbridge.readers.raw import Restart
from nvbridge.readers.slabs import Slab, plan

# Slabs hold window_rows / SLAB_SHARE rows. API calls and GPU ops: a window takes about that many
# of each (the FSDP export: 26,000 calls and 18,000 GPU ops per 65,536 NVTX rows), and a larger
# slab is held, read ahead, for nothing (-60 MB at 10M NVTX rows). NVTX slabs of starts: a slab's
# rows are estimated from its chunks' spans, and a wrong estimate (rows stored out of order spread
# over chunks) held 80 MB more at 10M with slabs of a whole window.
SLAB_SHARE = 2
# Candidate allocator marks parsed to tell whether a report has memory events.
HAS_MEMORY_PROBE = 64
# NVTX rows (the first, in rowid order) the probe reads for them: a recording makes its first
# allocation as it starts, so they are among the first rows; marks found later restart the
# conversion expecting them (a Restart with ``marks``), and no report pays a whole scan of
# NVTX_EVENTS to learn it has none (0.4 s warm, 3.4 s cold at 10M rows).
PROBE_ROWS = 1 << 16
# A condition no row meets: a read of it gives the table's columns, typed, without rows.
NO_ROWS = "1 = 0"


def marks_among_first_rows(db: Database, rows: int | None = None) -> bool:
    """Whether one of the first ``rows`` (:data:`PROBE_ROWS`) rows of NVTX_EVENTS, in rowid
    order, is an allocator mark, the candidates parsed as the windows will parse them (a
    malformed one is no event)."""
    if not {"domainId", "text"} <= set(db.columns("NVTX_EVENTS")):
        return False  # marks outside every domain, or none with text: none of ours
    first = f"SELECT eventType, domainId, text FROM NVTX_EVENTS ORDER BY rowid LIMIT {rows or PROBE_ROWS}"
    found = db.scalar_rows(
        f"SELECT text FROM ({first}) WHERE eventType = {NVTX_MARK} AND domainId != 0 "
        f"AND substr(text, 1, {len(PREFIX)}) = '{PREFIX}' LIMIT {HAS_MEMORY_PROBE}"
    )
    texts = [str(text) for (text,) in found]
    probe = pa.table(
        {
            "ts_ns": pa.array([0] * len(texts), pa.int64()),
            "name": pa.array(texts, pa.string()),
            "domain": pa.array([DOMAIN] * len(texts), pa.string()),
            "process_id": pa.array([0] * len(texts), pa.int64()),
            "thread_id": pa.array([0] * len(texts), pa.int64()),
        }
    )
    return bool(split_memory(probe)[1].num_rows)


@dataclass(frozen=True, slots=True)
class _Part:
    rows: int  # NVTX rows read, ranges or not
    others: pa.Table | None  # marks, thread names, domain creations
    ranges: pa.Table
    thread_keys: np.ndarray
    stop: int | None = None  # rowid windows: the first rowid after the window


class NvtxParts:
    """NVTX_EVENTS read in parts (see the module doc); reads start on construction."""

    AHEAD = 1  # parts read ahead of the one the consumer works on

    def __init__(self, db: Database, window_rows: int, strings: Future[pa.Table], by_start: bool) -> None:
        self.db = db
        self.window_rows = window_rows
        self._strings = strings
        # Rowids still to read (none without NVTX_EVENTS); None while a part's read is finding
        # where the next one starts.
        self._next: int | None = 0
        self._first = 0
        self._last = -1
        self._pending: list[Future[_Part]] = []
        self._slabs: list[Slab] | None = None  # by_start: the slabs still to read
        self._domains: dict[tuple[int, int], str] = {}
        self._unnamed: set[tuple[int, int]] = set()
        self.latest_range: int | None = None  # by_start: the latest range start, from the scan
        self.first_start: int | None = None  # the earliest range start, once the first part is out
        self.rows_read = 0
        self._marks: list[pa.Table] = []
        self._thread_names: list[pa.Table] = []
        self._thread_keys: list[np.ndarray] = []
        # nvbridge's allocator marks, split from the marks as parts come, taken by the windows.
        self.memory = MemoryQueue()
        self.marks_expected = False  # has_memory found allocator marks, or was told of them
        self.marks_seen = False  # the parts read hold allocator marks
        self.present = db.has("NVTX_EVENTS")
        if self.present:
            db.require("NVTX_EVENTS", NVTX)  # a required column missing: MissingTable, before any query
            wanted = RANGE_TYPES + (NVTX_MARK, NVTX_THREAD_NAME, NVTX_DOMAIN_CREATE)
            self._types = ("eventType", wanted, True)  # NULL types: read, to be refused
            # Two subqueries: SQLite answers a lone min() or max() of rowid from the b-tree's ends,
            # but scans every row for both in one SELECT (0.16 s at 2M rows).
            ((first, last),) = db.scalar_rows(
                "SELECT (SELECT min(rowid) FROM NVTX_EVENTS), (SELECT max(rowid) FROM NVTX_EVENTS)"
            )
            self._next = self._first = int(first or 0)
            self._last = int(last or -1)
            if by_start:
                self._plan_slabs()
            for _ in range(self.AHEAD):
                self._submit()

    def last_range_start(self) -> int | None:
        """The start of the last range row (rowid windows: the latest start, when the export is in
        start order, which the windows check), or the latest start (slabs)."""
        if self._slabs is not None:
            return self.latest_range
        if not self.present:
            return None
        last = self.db.scalar_rows(
            f"SELECT start FROM NVTX_EVENTS WHERE eventType IN {RANGE_TYPES} ORDER BY rowid DESC LIMIT 1"
        )
        return int(last[0][0]) if last and last[0][0] is not None else None

    def has_memory(self, known: bool = False) -> bool:
        """Whether the report holds nvbridge's allocator marks, before the first window (the
        ops' memory columns are null without): ``known``, or :func:`marks_among_first_rows`.
        Marks in a later part make :meth:`parts` yield a Restart."""
        self.marks_expected = known or (self.present and marks_among_first_rows(self.db))
        return self.marks_expected

    def _plan_slabs(self) -> None:
        """Slabs in start order from one grouped scan; domain names first, as a slab may hold
        ranges of a domain whose creation row comes in a later slab."""
        latest = ("start", ("eventType", RANGE_TYPES))  # the latest range start
        stats = self.db.chunk_spans("NVTX_EVENTS", RowFilter(member=self._types), latest, self._first, self._last)
        bounds = plan([stats], self.window_rows // SLAB_SHARE)
        if stats is None:  # a start that is not an integer: the one slab's read names it
            self._slabs = [Slab(None, None, None, False)]
            return
        self._slabs = [stats.slab(lo, hi, k == 0) for k, (lo, hi) in enumerate(bounds)]
        self.latest_range = stats.latest
        named = self.db.read_table("NVTX_EVENTS", NVTX, f'"eventType" = {NVTX_DOMAIN_CREATE}')
        self._domains.update(nvtx_others(named, self._strings.result())[2])

    def _submit(self) -> None:
        if self._slabs is not None:
            if self._slabs:
                where = self._slabs.pop(0).rows(self._types)
                self._pending.append(self.db.submit("NVTX_EVENTS", NVTX, where, then=self._split))
            return
        if self._next is None or self._next > self._last:
            return
        first, self._next = self._next, None  # the part's read finds where the next starts
        self._pending.append(self.db.run(functools.partial(self._read_window, first)))

    def _read_window(self, first: int) -> _Part:
        """On a reader thread: the next window_rows rows from rowid ``first``.

        A part is the next window_rows rows, not a span of rowids: a row moved to rowid 2^62
        would otherwise cost 2^45 empty parts, and windows (hence the dataset) would depend on
        rowid gaps. Dense rowids give the same parts as arithmetic would. The page reader finds
        the part's end as it reads it; through SQLite, an OFFSET walk finds it first.
        """
        ev, end = self.db.read_window("NVTX_EVENTS", NVTX, first, self.window_rows, self._types)
        stop = end if end is not None else self._last + 1
        return dataclasses.replace(self._split(ev), stop=stop)

    def _split(self, ev: pa.Table) -> _Part:
        """On a reader thread: a part's ranges, normalized, with domain names left to
        :meth:`parts` (they depend on earlier parts); the other rows apart."""
        etype = np_col(ev, "event_type", fill=-1)  # NULL types go with the others, which refuse them
        is_range = np.isin(etype, RANGE_TYPES)
        others = None
        if not is_range.all():
            others = ev.filter(pa.array(~is_range))
            ev = ev.filter(pa.array(is_range))
        ranges = normalize_ranges(ev, self._strings.result(), {})
        return _Part(len(etype), others, ranges, np.unique(np_col(ranges, "thread_key")))

    def cancel(self) -> None:
        """Drop the reads not started (the report is read another way)."""
        for future in self._pending:
            future.cancel()
        self._pending = []

    def parts(self) -> Iterator[pa.Table | Restart]:
        """The ranges, a part at a time, in export order (slabs: in start order); a Restart
        where a domain is named only after ranges of it went out unnamed."""
        while self._pending:
            part = self._pending.pop(0).result()
            if part.stop is not None:
                self._next = part.stop
            if len(self._pending) < self.AHEAD:
                self._submit()
            self.rows_read += part.rows
            if part.others is not None and not self._others(part.others):
                yield Restart("a domain is named after ranges of it")
                return
            if self.memory.out_of_order:
                yield Restart("memory events are not in time order across windows")
                return
            if self.marks_seen and not self.marks_expected:
                yield Restart("allocator marks after the rows the memory probe read", marks=True)
                return
            ranges = part.ranges
            domain_id = np_col(ranges, "domain_id")
            if (domain_id != 0).any():
                pid = np_col(ranges, "process_id")
                pairs = np.unique((pid[domain_id != 0] << 32) | domain_id[domain_id != 0])
                self._unnamed.update(
                    (int(p >> 32), int(p & 0xFFFFFFFF))
                    for p in pairs
                    if (int(p >> 32), int(p & 0xFFFFFFFF)) not in self._domains
                )
                ranges = set_column(ranges, "domain", domain_names(pid, domain_id, self._domains))
            self._thread_keys.append(part.thread_keys)
            if self.first_start is None and ranges.num_rows:
                self.first_start = int(np_col(ranges, "start_ns").min())
            yield ranges

    def _others(self, ev: pa.Table) -> bool:
        """Keep a part's marks, thread names and domain names; False where a domain is named
        after ranges of it went out."""
        marks, thread_names, domains = nvtx_others(ev, self._strings.result(), self._domains)
        if set(domains) & self._unnamed:
            return False
        self._domains.update(domains)
        marks, memory = split_memory(marks)
        self.marks_seen |= memory.num_rows > 0
        self.memory.put(memory)
        self._marks.append(marks)
        self._thread_names.append(thread_names)
        return True

    def marks(self) -> pa.Table:
        """The marks (once :meth:`parts` is exhausted)."""
        if not self._marks:
            self._others(self.db.read_table("NVTX_EVENTS", NVTX, NO_ROWS))  # no rows: the empty table
        # A part whose marks are all in the default domain has plain null domains, one naming
        # a domain dictionary-encoded ones: one type for all (concat refused the mix).
        return pa.concat_tables([set_column(m, "domain", m.column("domain").cast(DICT_STR)) for m in self._marks])

    def thread_names(self) -> pa.Table:
        """The names NVTX gave threads (once :meth:`parts` is exhausted)."""
        if self._thread_names:
            return pa.concat_tables(self._thread_names)
        return pa.table({"thread_key": pa.array([], pa.int64()), "thread_name": pa.array([], pa.string())})

    def thread_keys(self) -> np.ndarray:
        """The threads ranges were on (once :meth:`parts` is exhausted)."""
        return np.unique(np.concatenate(self._thread_keys)) if self._thread_keys else np.zeros(0, np.int64)
