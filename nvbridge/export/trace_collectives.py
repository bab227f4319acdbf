"""The ``collectives`` table of a many-rank dataset drawn into its trace: per rank and communicator
a track of collectives (``arrival_ns`` to ``end_ns`` on the aligned clock, the ``wait`` and
``transfer`` parts inside), and flows joining each collective across its ranks.

The flows of one collective (same ``comm`` and ``seq``, rows ``matched``) start at the rank that
arrived last among those in the trace (the one the others waited for) and end on every other
rank's collective at that time: ``ranks - 1`` flows per collective, category ``collective``. A
track of collectives that overlap (asynchronous ones) is split into lanes, as the writer splits
a stream's overlapping GPU ops, so slices always nest.

Lines are built column-wise (:mod:`nvbridge.export.chrome_text`), no Python object per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col
from nvbridge.dataset import collectives_read
from nvbridge.export.chrome_text import Lines, escape, flow_lines, join, meta_event, num, us
from nvbridge.export.chrome_tracks import lanes

if TYPE_CHECKING:
    from nvbridge.export.trace_many import Part

TRACK_TID = 4_000_000_000  # tracks of collectives: above any thread id a writer draws, below 2**32
LANES_PER_COMM = 64
CATEGORY = "collective"
COLUMNS = ("op", "comm", "seq", "rank", "report", "process_id", "step", "bytes", "arrival_ns", "start_ns", "end_ns")
MORE = ("wait_ns", "transfer_ns", "busbw_gbps", "matched")


@dataclass
class Drawn:
    lines: list[Lines] = field(default_factory=list)
    slices: dict[str, int] = field(default_factory=dict)
    flows: dict[str, int] = field(default_factory=dict)


def read_collectives(root: Path) -> pa.Table | None:
    """The dataset's collectives table, the columns drawn (None where it has none)."""
    table = collectives_read.read_collectives(root)
    if table is None:
        return None
    return table.select([c for c in (*COLUMNS, *MORE) if c in table.column_names])


def rows_of(table: pa.Table, parts: Sequence[Part]) -> tuple[pa.Table, np.ndarray]:
    """The rows of the parts drawn and each row's part (by ``report``: the partition's name or
    the report's file; else by ``rank``): those of the steps drawn where the part is cut by
    steps and the row has one, else those overlapping the part's window."""
    # the report names (a few) mapped to parts, each row through its dictionary code
    reports = pc.dictionary_encode(pc.fill_null(table.column("report").cast(pa.string()), "")).combine_chunks()
    of_name = {n: i for i, p in enumerate(parts) for n in _names(p)}
    lookup = np.array([of_name.get(n, -1) for n in reports.dictionary.to_pylist()] or [-1], np.int64)
    index = lookup[np.asarray(reports.indices.to_numpy(zero_copy_only=False), np.int64)]
    if (index < 0).all():
        ranks = np_col(table, "rank", fill=-1)
        for i, part in enumerate(parts):
            index[np.isin(ranks, part.ranks())] = i
    keep = index >= 0
    process = np_col(table, "process_id", fill=-1)
    for i, part in enumerate(parts):  # a report of several ranks cut to some: their rows only
        if part.only is not None:
            keep &= (index != i) | np.isin(process, list(part.only))
    arrival, end = _times(table)
    step = np_col(table, "step", fill=-1) if "step" in table.column_names else np.full(table.num_rows, -1)
    for i, part in enumerate(parts):
        mine = index == i
        if part.steps is not None:
            by_step = mine & (step >= 0)
            keep &= ~by_step | ((step >= part.steps[0]) & (step <= part.steps[1]))
            mine &= step < 0
        lo, hi = part.window
        if lo is not None:
            keep &= ~mine | (end >= lo + part.offset_ns)
        if hi is not None:
            keep &= ~mine | (arrival <= hi + part.offset_ns)
    rows = np.flatnonzero(keep)
    return table.take(pa.array(rows)), index[rows]


def _names(part: Part) -> tuple[str, ...]:
    """What the table's ``report`` may call a part: the partition, its report's file or stem (the
    name a dataset of one report gives its collectives)."""
    source = str(part.source.meta.get("source"))
    return (part.name, source, Path(source).stem)


def _times(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(arrival, end) per row: arrival, else the kernel's start; an end before it is the arrival."""
    start = np_col(table, "start_ns", fill=-1)
    arrival = np_col(table, "arrival_ns", fill=-1)
    arrival = np.where(arrival < 0, start, arrival)
    end = np.maximum(np_col(table, "end_ns", fill=-1), arrival)
    return arrival, end


@dataclass(frozen=True)
class Chosen:
    """The collectives drawn: rows, each one's part (index into the parts), arrival and end."""

    rows: pa.Table
    part_of: np.ndarray
    arrival: np.ndarray
    end: np.ndarray

    @property
    def first_ns(self) -> int | None:
        """The earliest arrival (the trace's origin may be no later)."""
        return int(self.arrival.min()) if len(self.arrival) else None


def choose(table: pa.Table | None, parts: Sequence[Part]) -> Chosen:
    """The rows of ``parts`` within their windows, with a time to draw from."""
    if table is None or not table.num_rows or not parts:
        empty = np.zeros(0, np.int64)
        return Chosen(pa.table({}), empty, empty, empty)
    rows, part_of = rows_of(table, parts)
    arrival, end = _times(rows)
    ok = arrival >= 0
    return Chosen(rows.filter(pa.array(ok)), part_of[ok], arrival[ok], end[ok])


def draw_collectives(chosen: Chosen, parts: Sequence[Part], origin: int, first_id: int) -> Drawn:
    """The slices, flows and track names of the chosen collectives."""
    drawn = Drawn()
    rows = chosen.rows
    if not rows.num_rows:
        return drawn
    # a collective a window cuts starts at the trace's origin (a trace holds no negative time)
    arrival = np.maximum(chosen.arrival, origin)
    end = np.maximum(chosen.end, arrival)
    pid = _pids(rows, chosen.part_of, parts)
    comm = pc.dictionary_encode(pc.fill_null(rows.column("comm").cast(pa.string()), "")).combine_chunks()
    code = np.asarray(comm.indices.to_numpy(zero_copy_only=False), np.int64)
    lane = np.minimum(lanes((pid << 32) | code, arrival, end), LANES_PER_COMM - 1)
    tid = TRACK_TID + code * LANES_PER_COMM + lane
    drawn.lines.append(_slices(rows, pid, tid, arrival, end, origin))
    drawn.lines.extend(_parts(rows, pid, tid, arrival, end, origin))
    drawn.slices["collectives"] = rows.num_rows
    flows = _flows(rows, code, pid, tid, arrival, end, origin, first_id)
    if flows is not None:
        drawn.lines.append(flows[0])
        drawn.flows[CATEGORY] = flows[1]
    names = comm.dictionary.to_pylist()
    tracks = sorted(set(zip(pid.tolist(), tid.tolist())))
    drawn.lines.append(pa.array([_track_name(p, t, names) for p, t in tracks], pa.string()))
    return drawn


def _pids(rows: pa.Table, part_of: np.ndarray, parts: Sequence[Part]) -> np.ndarray:
    """The trace process of each row: its process, else its report's first process."""
    base = np.array([p.pid_base for p in parts], np.int64)[part_of]
    first = np.array([min(p.found.kept_processes, default=0) if p.found else 0 for p in parts], np.int64)
    own = np_col(rows, "process_id", fill=-1)
    out: np.ndarray = base + np.where(own >= 0, own, first[part_of])
    return out


def _track_name(pid: int, tid: int, comms: list[str]) -> str:
    code, lane = divmod(tid - TRACK_TID, LANES_PER_COMM)
    label = f"collectives {comms[code]}".rstrip() + (f" (overlap {lane})" if lane else "")
    return meta_event("thread_name", pid, tid, {"name": label}) + meta_event(
        "thread_sort_index", pid, tid, {"sort_index": 900_000_000 + code * LANES_PER_COMM + lane}
    )


def _text(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    return pc.fill_null(values.cast(pa.string()), "null")


def _slices(rows: pa.Table, pid: np.ndarray, tid: np.ndarray, a: np.ndarray, e: np.ndarray, origin: int) -> pa.Array:
    """One slice per row: ``<op> #<seq>``, from arrival to end, with the table's figures."""
    name = join(
        '"', pc.fill_null(rows.column("op").cast(pa.string()), "collective"), " #", _text(rows.column("seq")), '"'
    )
    more = [
        join(f',"{c}":', _text(rows.column(c)))
        for c in ("wait_ns", "transfer_ns", "busbw_gbps")
        if c in rows.column_names
    ]
    return join(
        '{"ph":"X","cat":"collective","name":',
        name,
        ',"pid":',
        num(pid),
        ',"tid":',
        num(tid),
        ',"ts":',
        us(a - origin),
        ',"dur":',
        us(e - a),
        ',"args":{"comm":',
        pc.fill_null(escape(rows.column("comm").cast(pa.string())), '""'),
        ',"seq":',
        _text(rows.column("seq")),
        ',"rank":',
        _text(rows.column("rank")),
        ',"bytes":',
        _text(rows.column("bytes")),
        *more,
        "}},\n",
    )


def _parts(
    rows: pa.Table, pid: np.ndarray, tid: np.ndarray, a: np.ndarray, e: np.ndarray, origin: int
) -> list[pa.Array]:
    """``wait`` (arrival to the last rank's arrival) and ``transfer`` (to the end) inside each
    collective, where the table has them and they last."""
    out: list[pa.Array] = []
    if "wait_ns" not in rows.column_names or "transfer_ns" not in rows.column_names:
        return out
    wait = np.clip(np_col(rows, "wait_ns", fill=0), 0, None)
    w_end = np.minimum(a + wait, e)
    t_start = np.maximum(e - np.clip(np_col(rows, "transfer_ns", fill=0), 0, None), w_end)
    for label, lo, hi in (("wait", a, w_end), ("transfer", t_start, e)):
        m = hi > lo
        if m.any():
            out.append(
                join(
                    f'{{"ph":"X","cat":"collective","name":"{label}","pid":',
                    num(pid[m]),
                    ',"tid":',
                    num(tid[m]),
                    ',"ts":',
                    us(lo[m] - origin),
                    ',"dur":',
                    us(hi[m] - lo[m]),
                    "},\n",
                )
            )
    return out


def _flows(
    rows: pa.Table,
    code: np.ndarray,
    pid: np.ndarray,
    tid: np.ndarray,
    a: np.ndarray,
    e: np.ndarray,
    origin: int,
    first_id: int,
) -> tuple[Lines, int] | None:
    """From the last arrival of each matched collective to each other rank's, at that time."""
    matched = np.asarray(pc.fill_null(rows.column("matched"), False)) if "matched" in rows.column_names else None
    seq = np_col(rows, "seq", fill=-1)
    ok = (seq >= 0) if matched is None else (seq >= 0) & matched.astype(bool)
    idx = np.flatnonzero(ok)
    if len(idx) < 2:
        return None
    order = idx[np.lexsort((a[idx], seq[idx], code[idx]))]  # by collective, the last arrival last
    key = (code[order] << 32) | seq[order]
    last_of_group = np.r_[key[1:] != key[:-1], True]
    group = np.cumsum(np.r_[True, key[1:] != key[:-1]]) - 1
    src = order[last_of_group][group]  # each row's collective's last arrival
    dst = order[~last_of_group]
    src = src[~last_of_group]
    if not len(dst):
        return None
    ids = first_id + np.arange(len(dst), dtype=np.int64)
    at = np.minimum(a[src], e[dst])  # the other rank's slice still runs then (aligned clocks)
    lines = flow_lines(CATEGORY, ids, pid[src], tid[src], a[src] - origin, pid[dst], tid[dst], at - origin)
    return lines, len(dst)
