"""The ``collectives`` table: every collective of a multi-rank run, one row per (collective,
rank), matched across the ranks of its communicator, on one clock (nvbridge.dataset.clocks).

Matching rules (docs/ranks.md):

- A rank's collectives (nvbridge.dataset.collectives_scan) are numbered in issue order within
  their communicator: ``seq`` 0, 1, ... NVTX does not record which process group a collective
  ran on, so the communicator is the backend (``nccl``, ``gloo``): every rank of a run issues a
  communicator's collectives in the same order (NCCL and gloo require it), so the k-th
  collective of a communicator in a step (``ProfilerStep#N``, alike on every rank) is the same
  one on every rank; matching within steps keeps one missed collective from shifting the rest.
- A collective is *matched* when every rank that used the communicator has it and all name the
  same operation. Anything else is kept with ``matched`` false, counted and explained in the
  root meta (``collectives.unmatched.<reason>``): ``missing on some ranks`` (a capture started
  or stopped mid-run on one rank), ``operation differs`` (ranks disagree: subgroups sharing a
  backend), ``point-to-point`` (send/recv pair two ranks, not the communicator).
- Per matched row: ``wait_ns`` = the last rank's arrival - own arrival; ``transfer_ns`` = own
  end - the last arrival; ``algbw_gbps`` = bytes / transfer (NCCL's "size / time", with the
  collective's size as nccl-tests counts it), ``busbw_gbps`` = algbw x 2(n-1)/n for allreduce,
  (n-1)/n for allgather, reduce_scatter and alltoall, 1 for broadcast and reduce (nccl-tests'
  PERFORMANCE.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col
from nvbridge.dataset import clocks, nccl_bytes
from nvbridge.dataset.collectives_scan import COMM_RANGE, INSTANCE, Instances
from nvbridge.dataset.schema import COLLECTIVES

POINT_TO_POINT = frozenset({"send", "recv", "sendrecv"})
_BUS = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n}
_BUS |= {"reduce_scatter": _BUS["allgather"], "alltoall": _BUS["allgather"]}
_BUS |= {"broadcast": lambda n: 1.0, "reduce": lambda n: 1.0}


@dataclass(frozen=True, slots=True)
class ReportCollectives:
    """One report's instances and what places them."""

    name: str  # the partition's report name (or the single report's)
    meta: Mapping[str, str | None]
    ranks: Mapping[int, int]  # process -> rank
    found: Instances


@dataclass(frozen=True, slots=True)
class Matched:
    """The table, the clocks it used, and the counts its meta keeps."""

    table: pa.Table
    clocks: clocks.Clocks
    unmatched: Mapping[str, int]  # reason -> rows

    def meta(self) -> dict[str, str]:
        out = self.clocks.meta()
        out["collectives.rows"] = str(self.table.num_rows)
        out["collectives.unmatched"] = str(sum(self.unmatched.values()))
        out |= {f"collectives.unmatched.{k}": str(v) for k, v in sorted(self.unmatched.items())}
        return out


def build(reports: Sequence[ReportCollectives]) -> Matched:
    """Match every report's collectives across ranks and put them on one clock.

    Args:
        reports: in rank order (the first is the clock's reference).
    """
    rows = _rows(reports)
    key, matched, reasons = _match(rows)
    clock = _clocks(reports, rows, key, matched)
    offset = np.array([clock.offsets()[r] for r in rows.column("report").to_pylist()], np.int64)
    arrival = np_col(rows, "arrival_ns") + offset
    start = np_col(rows, "start_ns") + offset
    end = np_col(rows, "end_ns") + offset
    wait, transfer = _waits(key, matched, arrival, end)
    ranks_in = _ranks_per_comm(rows)
    # NCCL's allgather and reduce_scatter payloads hold one rank's share: nccl-tests' size is n of them
    share = np.asarray(pc.fill_null(rows.column("bytes_share"), False), bool)
    size = nccl_bytes.scaled(rows.column("bytes"), share, ranks_in)
    algbw, busbw = _bandwidths(size, rows.column("op").to_pylist(), transfer, matched, ranks_in)
    out = pa.table(
        {
            "op": rows.column("op"),
            "comm": rows.column("comm"),
            "seq": _shared_seq(rows, key),
            "rank": rows.column("rank"),
            "report": rows.column("report"),
            "process_id": rows.column("process_id"),
            "step": rows.column("step"),
            "bytes": size,
            "arrival_ns": arrival,
            "start_ns": start,
            "end_ns": end,
            "wait_ns": pa.array(wait, mask=~matched),
            "transfer_ns": pa.array(transfer, mask=~matched),
            "algbw_gbps": algbw,
            "busbw_gbps": busbw,
            "op_id": rows.column("op_id"),
            "source": rows.column("source").dictionary_encode(),
            "matched": pa.array(matched),
            "bytes_source": rows.column("bytes_source").dictionary_encode(),
        },
        schema=COLLECTIVES,
    )
    return Matched(out, clock, reasons)


def _rows(reports: Sequence[ReportCollectives]) -> pa.Table:
    """Every instance with its report, rank, communicator and sequence number."""
    parts = []
    for r in reports:
        t = r.found.table
        proc = np_col(t, "process_id")
        rank = np.array([r.ranks.get(p, -1) for p in proc.tolist()], np.int64)
        comm = t.column("backend")
        seq, slot = _sequence(proc, comm.to_pylist(), t.column("step").to_pylist())
        t = t.append_column("report", pa.array([r.name] * t.num_rows, pa.string()))
        t = t.append_column("rank", pa.array(rank)).append_column("comm", comm).append_column("seq", pa.array(seq))
        t = t.append_column("slot", pa.array(slot))
        parts.append(t)
    if not parts:
        return _empty()
    rows = pa.concat_tables(parts)
    order = np.lexsort((np_col(rows, "seq"), np_col(rows, "rank"), np.array(rows.column("comm").to_pylist())))
    return rows.take(pa.array(order))


def _empty() -> pa.Table:
    t = INSTANCE.empty_table()
    return (
        t.append_column("report", pa.array([], pa.string()))
        .append_column("rank", pa.array([], pa.int64()))
        .append_column("comm", pa.array([], pa.string()))
        .append_column("seq", pa.array([], pa.int64()))
        .append_column("slot", pa.array([], pa.int64()))
    )


def _sequence(process: np.ndarray, comm: list[str], step: list[int | None]) -> tuple[np.ndarray, np.ndarray]:
    """Issue order within (process, communicator), and within (process, communicator, step):
    rows come in (process, issue) order."""
    seq = np.zeros(len(process), np.int64)
    slot = np.zeros(len(process), np.int64)
    seen: dict[tuple[int, str], int] = {}
    in_step: dict[tuple[int, str, int | None], int] = {}
    for i, (p, c, s) in enumerate(zip(process.tolist(), comm, step)):
        seq[i] = seen.get((p, c), 0)
        seen[(p, c)] = seq[i] + 1
        slot[i] = in_step.get((p, c, s), 0)
        in_step[(p, c, s)] = slot[i] + 1
    return seq, slot


def _shared_seq(rows: pa.Table, key: np.ndarray) -> np.ndarray:
    """One number per collective of a communicator, the same on every rank: its keys in issue
    order (the highest per-rank issue number among its rows: a rank that missed one collective
    numbers the later ones one lower), numbered from 0 within the communicator."""
    if not rows.num_rows:
        return np.zeros(0, np.int64)
    seq = np_col(rows, "seq")
    top = np.full(int(key.max()) + 1, -1, np.int64)
    np.maximum.at(top, key, seq)
    comm = np.array(rows.column("comm").to_pylist())
    out = np.zeros(len(seq), np.int64)
    for c in np.unique(comm).tolist():
        keys = np.unique(key[comm == c])
        order = keys[np.lexsort((keys, top[keys]))]
        position = np.empty(int(key.max()) + 1, np.int64)
        position[order] = np.arange(len(order))
        out[comm == c] = position[key[comm == c]]
    return out


def _match(rows: pa.Table) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Per row: its (comm, seq) key id, whether it is matched; and unmatched rows by reason."""
    if not rows.num_rows:
        return np.zeros(0, np.int64), np.zeros(0, bool), {}
    # Ranks number their steps alike (ProfilerStep#N), so a collective is the k-th of its
    # communicator in its step on every rank: a capture that missed collectives on one rank
    # (started or stopped mid-run) loses that step's matches, not every later one.
    comm = np.array(rows.column("comm").to_pylist())
    _, comm_id = np.unique(comm, return_inverse=True)
    step = np_col(rows, "step", fill=-1) + 1
    slot = np_col(rows, "slot")
    code = (comm_id.astype(np.int64) * (int(step.max()) + 1) + step) * (int(slot.max()) + 1) + slot
    _, key = np.unique(code, return_inverse=True)
    users = _ranks_per_comm(rows)  # ranks that used the row's communicator
    _, op_code = np.unique(np.array(rows.column("op").to_pylist()), return_inverse=True)
    lo, hi = np.full(int(key.max()) + 1, np.iinfo(np.int64).max), np.full(int(key.max()) + 1, -1)
    np.minimum.at(lo, key, op_code)
    np.maximum.at(hi, key, op_code)
    same_op = (lo == hi)[key]
    complete = np.bincount(key)[key] == users
    p2p = np.isin(np.array(rows.column("op").to_pylist()), list(POINT_TO_POINT))
    many = users > 1
    # a send/recv that every rank of the communicator issued at once is an exchange (alltoall
    # runs as grouped send/recv); one between two of several ranks pairs no communicator
    matched = complete & same_op & many
    reasons: dict[str, int] = {}
    for label, sel in (
        ("single rank", ~many),
        ("point-to-point", many & p2p & ~complete),
        ("missing on some ranks", many & ~p2p & ~complete),
        ("operation differs", many & complete & ~same_op),
    ):
        if int(sel.sum()):
            reasons[label] = int(sel.sum())
    return key.astype(np.int64), matched, reasons


def _clocks(
    reports: Sequence[ReportCollectives], rows: pa.Table, key: np.ndarray, matched: np.ndarray
) -> clocks.Clocks:
    """Offsets from session starts and matched collectives (first process of each report)."""
    report = np.array(rows.column("report").to_pylist()) if rows.num_rows else np.zeros(0, str)
    proc = np_col(rows, "process_id") if rows.num_rows else np.zeros(0, np.int64)
    end = np_col(rows, "end_ns", fill=-1) if rows.num_rows else np.zeros(0, np.int64)
    arrival = np_col(rows, "arrival_ns") if rows.num_rows else np.zeros(0, np.int64)
    events: list[dict[int, tuple[int, int]]] = []
    ref_within: list[dict[int, int]] = []
    for i, r in enumerate(reports):
        mine = (report == r.name) & matched & (end >= 0)
        procs = sorted(set(proc[mine].tolist()), key=lambda p: (r.ranks.get(p, 1 << 30), p))
        rows_of = [np.flatnonzero(mine & (proc == p)) for p in procs]
        by_proc = [{int(key[j]): (int(arrival[j]), int(end[j])) for j in sel} for sel in rows_of]
        events.append(by_proc[0] if by_proc else {})
        if i == 0:
            ref_within = [{k: v[1] for k, v in e.items()} for e in by_proc]
    bases = [clocks.wall_base(r.meta) for r in reports]
    residual = clocks.spread_within(ref_within) if len(ref_within) > 1 else 0
    return clocks.align([r.name for r in reports], bases, events, residual)


def _waits(key: np.ndarray, matched: np.ndarray, arrival: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: wait (the last arrival at its collective - own), transfer (own end - the last arrival)."""
    if not len(key):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    last = np.full(int(key.max()) + 1, np.iinfo(np.int64).min)
    np.maximum.at(last, key[matched], arrival[matched])
    per_row = last[key]
    return np.where(matched, per_row - arrival, 0), np.where(matched, end - per_row, 0)


def _ranks_per_comm(rows: pa.Table) -> np.ndarray:
    """Per row, how many ranks use its communicator."""
    if not rows.num_rows:
        return np.zeros(0, np.int64)
    comm = rows.column("comm").to_pylist()
    members = list(zip(rows.column("report").to_pylist(), np_col(rows, "process_id").tolist()))
    users: dict[str, set[tuple[str, int]]] = {}
    for c, m in zip(comm, members):
        users.setdefault(c, set()).add(m)
    return np.array([len(users[c]) for c in comm], np.int64)


def _bandwidths(
    sizes: pa.Array, ops: list[str], transfer: np.ndarray, matched: np.ndarray, n: np.ndarray
) -> tuple[pa.Array, pa.Array]:
    """algbw = size / transfer (bytes per ns = GB/s), busbw by the operation's factor."""
    size = sizes.to_pylist()
    alg: list[float | None] = []
    bus: list[float | None] = []
    for i, op in enumerate(ops):
        b = size[i]
        if not matched[i] or b is None or transfer[i] <= 0 or op not in _BUS:
            alg.append(None)
            bus.append(None)
            continue
        a = b / float(transfer[i])  # bytes: the size nccl-tests counts (payload_bytes, nccl_bytes)
        alg.append(a)
        bus.append(a * _BUS[op](int(n[i])))
    return pa.array(alg, pa.float64()), pa.array(bus, pa.float64())


def unmatched_line(meta: Mapping[str, str | None]) -> str | None:
    """One line explaining the unmatched collectives of a dataset's root meta, None: all matched."""
    total = int(meta.get("collectives.unmatched") or 0)
    if not total:
        return None
    parts = [
        f"{v} {k.rsplit('.', 1)[1]}"
        for k, v in sorted(meta.items())
        if k.startswith("collectives.unmatched.") and v is not None
    ]
    return f"{total} collective rows unmatched across ranks ({', '.join(parts)}); kept with matched=false"


def is_comm(names: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Which op names are communication ranges."""
    return np.asarray(pc.fill_null(pc.match_substring_regex(names.cast(pa.string()), COMM_RANGE), False))
