"""Communication per operation across ranks: for each (communicator, operation) of the
collectives table, how many collectives, their size and bus bandwidth, the time ranks spent in
them transferring and waiting, and how much of it no compute hid (exposed)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col


@dataclass(frozen=True, slots=True)
class CommOp:
    """One operation on one communicator, over every rank's matched rows."""

    op: str
    comm: str
    collectives: int  # matched collectives
    ranks: int
    bytes: int | None  # summed over the collectives (each counted once); None: not recorded
    busbw_gbps: float | None  # median over rows
    time_ns: int  # summed over rows: start to end
    wait_ns: int  # summed over rows
    transfer_ns: int  # summed over rows
    exposed_ns: int  # summed over rows: the part of start-to-end no compute of that rank overlaps

    @property
    def exposed_pct(self) -> float:
        return 100.0 * self.exposed_ns / self.time_ns if self.time_ns else 0.0


def comm_ops(table: pa.Table, exposed: np.ndarray) -> tuple[CommOp, ...]:
    """Per (comm, op) of the matched rows, most exposed first."""
    if not table.num_rows:
        return ()
    matched = np.asarray(table.column("matched").to_numpy(zero_copy_only=False), bool)
    comm = np.array(table.column("comm").to_pylist())
    op = np.array(table.column("op").to_pylist())
    seq, rank = np_col(table, "seq"), np_col(table, "rank")
    dur = np_col(table, "end_ns") - np_col(table, "start_ns")
    wait, transfer = np_col(table, "wait_ns", fill=0), np_col(table, "transfer_ns", fill=0)
    size = table.column("bytes").to_pylist()
    bus = table.column("busbw_gbps").to_pylist()
    out = []
    for c, o in sorted(set(zip(comm[matched].tolist(), op[matched].tolist()))):
        rows = np.flatnonzero(matched & (comm == c) & (op == o))
        one_rank = rows[rank[rows] == rank[rows].min()]  # each collective once
        sizes = [size[i] for i in one_rank]
        known = [bus[i] for i in rows if bus[i] is not None]
        out.append(
            CommOp(
                o,
                c,
                len(np.unique(seq[rows])),
                len(np.unique(rank[rows])),
                None if any(s is None for s in sizes) else int(sum(s for s in sizes if s is not None)),
                float(np.median(known)) if known else None,
                int(dur[rows].sum()),
                int(wait[rows].sum()),
                int(transfer[rows].sum()),
                int(exposed[rows].sum()),
            )
        )
    return tuple(sorted(out, key=lambda x: -x.exposed_ns))
