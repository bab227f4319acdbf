"""The independent side of the attribution-by-time tests: which range each GPU op launched
outside every range on its thread belongs to by time (docs/dataset.md, ``gpu_ops.time_op_id``),
worked out from the export's own rows read with Python's sqlite3 (tests/raw_gpu.py for calls and
GPU ops; NVTX ranges here, never-closed ones included), with plain loops.

A range is a push/pop or start/end range that ended on its own thread; one never closed runs to
the end of everything (nvbridge clamps it to the capture end). Ranges nest per thread; one that
overlaps the innermost open range without fitting inside it crosses and is never a parent.
"""

from __future__ import annotations

import bisect
import sqlite3
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from tests import raw_gpu

OPEN = 1 << 62  # a never-closed range's end: after every call


@dataclass(frozen=True)
class NvtxRange:
    name: str
    start: int
    end: int  # OPEN when never closed
    pid: int
    tid: int
    order: int  # the export's row order (push order)


def ranges(path: Path) -> list[NvtxRange]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "StringTable" in tables:
            strings = dict(con.execute("SELECT _id_, value FROM StringTable"))
            starts: dict[int, tuple[int, int, bytes, int]] = {}
            ends: dict[int, int] = {}
            for rowid, flags, ts, mid, obj, name in con.execute(
                "SELECT _id_, flags, timestamp, id, objectId, name FROM CUPTI_ACTIVITY_KIND_MARKER"
            ):
                if flags & 2:
                    starts[mid] = (rowid, ts, obj, name)
                elif flags & 4:
                    ends[mid] = ts
            out = []
            for mid, (rowid, ts, blob, name) in starts.items():
                pid, tid = int.from_bytes(blob[:4], "little"), int.from_bytes(blob[4:8], "little")
                out.append(NvtxRange(strings.get(name, ""), ts, ends.get(mid, OPEN), pid, tid, rowid))
            return out
        if "NVTX_EVENTS" not in tables:
            return []
        rows = con.execute(
            "SELECT coalesce(n.text, s.value), n.start, n.end, (n.globalTid >> 24) & 16777215, "
            "n.globalTid & 16777215, n.rowid FROM NVTX_EVENTS AS n LEFT JOIN StringIds AS s ON s.id = n.textId "
            "WHERE n.eventType IN (59, 60) AND n.endGlobalTid IS NULL"
        )
        return [NvtxRange(t or "", s, OPEN if e is None else max(e, s), p, th, o) for t, s, e, p, th, o in rows]
    finally:
        con.close()


def nest(all_ranges: list[NvtxRange]) -> dict[NvtxRange, NvtxRange | None]:
    """Each range that nests (crossing ones left out) -> its parent (None: a root), by a stack
    walk per thread in (start, -end, order) order."""
    by_thread: dict[tuple[int, int], list[NvtxRange]] = defaultdict(list)
    for r in all_ranges:
        by_thread[(r.pid, r.tid)].append(r)
    out: dict[NvtxRange, NvtxRange | None] = {}
    for rs in by_thread.values():
        rs.sort(key=lambda r: (r.start, -r.end, r.order))
        stack: list[NvtxRange] = []
        for r in rs:
            while stack and stack[-1].end < r.end and stack[-1].end <= r.start:
                stack.pop()
            if stack and stack[-1].end < r.end:
                continue  # crosses the innermost open range
            out[r] = stack[-1] if stack else None
            stack.append(r)
    return out


def tree_ranges(all_ranges: list[NvtxRange]) -> dict[tuple[int, int], list[NvtxRange]]:
    """Per (pid, tid), the ranges that nest (crossing ones dropped), by (start, -end, order)."""
    out: dict[tuple[int, int], list[NvtxRange]] = defaultdict(list)
    for r in nest(all_ranges):
        out[(r.pid, r.tid)].append(r)
    for rs in out.values():
        rs.sort(key=lambda r: (r.start, -r.end, r.order))
    return dict(out)


def innermost(rs: list[NvtxRange], starts: list[int], s: int, e: int) -> NvtxRange | None:
    """The innermost of ``rs`` (one thread's, sorted) containing [s, e]: the last one started by
    ``s`` that reaches ``e``."""
    for i in range(bisect.bisect_right(starts, s) - 1, -1, -1):
        if rs[i].end >= e:
            return rs[i]
    return None


def by_time(path: Path) -> dict[tuple[int, int], NvtxRange]:
    """(pid, correlation id) of each GPU op attributed by time -> its range."""
    raw = raw_gpu.read(path)
    trees = tree_ranges(ranges(path))
    starts = {k: [r.start for r in v] for k, v in trees.items()}
    threads_of: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for pid, tid in sorted(trees):
        threads_of[pid].append((pid, tid))
    calls = raw.call_of()
    out = {}
    for g in raw.gpu:
        call = calls.get((g.pid, g.corr)) if g.known_pid else None
        if call is None:
            continue
        e = max(call.end, call.start)
        own = (call.pid, call.tid)
        if own in trees and innermost(trees[own], starts[own], call.start, e) is not None:
            continue  # the thread-exact rule places it
        best: tuple[tuple[int, int, int, int], NvtxRange] | None = None
        for key in threads_of[call.pid]:
            if key == own:
                continue
            r = innermost(trees[key], starts[key], call.start, e)
            if r is None:
                continue
            # main thread first, then the latest start, the shorter, the lower thread id
            rank = (0 if r.tid == r.pid else 1, -r.start, r.end, r.tid)
            if best is None or rank < best[0]:
                best = (rank, r)
        if best is not None:
            out[(g.pid, g.corr)] = best[1]
    return out
