"""Collective sizes from NCCL's own NVTX payloads (nvbridge.readers.nccl_payloads), where the
export has them: which ops they belong to, the file a dataset keeps them in, and what one
collective's size is from the payloads of the NCCL ranges inside it.

A collective's NCCL ranges are the ones the folding (nvbridge.dataset.collectives_scan) puts in
its instance: on the issuing thread, inside its outermost communication range, whose kernels
launch inside it (through ``ncclGroupEnd`` for a group). NCCL's sizes (``collectives.cc``):
``ncclAllReduce``, ``ncclBroadcast``, ``ncclReduce`` record the buffer (count x type size),
``ncclAllGather`` and ``ncclReduceScatter`` one rank's share (send count, receive count), each
``ncclSend``/``ncclRecv`` the bytes to or from one peer. As nccl-tests counts a collective's
size: the buffer; the share times the communicator's ranks for allgather (the gathered output)
and reduce_scatter (the whole input); for a group of sends and receives (an alltoall, a
send/recv exchange), the bytes this rank sends (an alltoall's send buffer: one send per peer,
itself included), or, for a group that only receives, the bytes it receives. Several
collectives of one kind coalesced into one group add up.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from nvbridge.dataset.schema import NCCL_PAYLOADS
from nvbridge.errors import DamagedDataset

FILE = "nccl_payloads.parquet"
COLUMN = "nccl_bytes"  # the ranges' column of their payload's message size (null: none)

_WHOLE = frozenset({"allreduce", "broadcast", "reduce"})
_SHARE = frozenset({"allgather", "reduce_scatter"})


class GroupBytes:
    """The payload sizes of one collective's NCCL ranges, by how they count."""

    def __init__(self) -> None:
        self.whole: int | None = None
        self.share: int | None = None
        self.send: int | None = None
        self.recv: int | None = None

    def add(self, op: str | None, size: int | None) -> None:
        """One NCCL range of the collective: its operation (from its name) and payload size."""
        if size is None or op is None:
            return
        kind = "whole" if op in _WHOLE else "share" if op in _SHARE else op if op in ("send", "recv") else None
        if kind is not None:
            setattr(self, kind, (getattr(self, kind) or 0) + int(size))

    def merge(self, other: GroupBytes) -> None:
        for kind in ("whole", "share", "send", "recv"):
            mine, theirs = getattr(self, kind), getattr(other, kind)
            if theirs is not None:
                setattr(self, kind, (mine or 0) + theirs)

    def size(self) -> tuple[int | None, bool]:
        """The collective's size and whether it is one rank's share (None: no payload says it,
        or buffers and shares mixed in one group, which no single count describes)."""
        if self.whole is not None and self.share is not None:
            return None, False
        if self.whole is not None:
            return self.whole, False
        if self.share is not None:
            return self.share, True
        if self.send is not None:
            return self.send, False
        return self.recv, False


def link(ranges: pa.Table, payloads: pa.Table) -> pa.Table:
    """The payloads of a report's communication ranges (op_id, process_id, thread_id, start_ns,
    op_name) as the dataset keeps them (NCCL_PAYLOADS): a payload belongs to the NCCL range
    with its process, thread, start and name."""
    if not ranges.num_rows or not payloads.num_rows:
        return NCCL_PAYLOADS.empty_table()
    keys = ["process_id", "thread_id", "start_ns", "name"]
    left = ranges.select(["op_id", "process_id", "thread_id", "start_ns", "op_name"]).rename_columns(["op_id", *keys])
    left = left.set_column(4, "name", left.column("name").cast(pa.string()))
    joined = left.join(payloads, keys=keys, join_type="inner")
    joined = joined.sort_by("op_id")
    return joined.select(NCCL_PAYLOADS.names).cast(NCCL_PAYLOADS)


def with_bytes(ranges: pa.Table, payloads: pa.Table | None) -> pa.Table:
    """The ranges with their payload's message size (``COLUMN``; null where none)."""
    if payloads is None or not payloads.num_rows or not ranges.num_rows:
        return ranges.append_column(COLUMN, pa.nulls(ranges.num_rows, pa.int64()))
    by_op = dict(zip(payloads.column("op_id").to_pylist(), payloads.column("bytes").to_pylist()))
    op_ids = ranges.column("op_id").to_pylist()
    return ranges.append_column(COLUMN, pa.array([by_op.get(o) for o in op_ids], pa.int64()))


def scaled(size: pa.ChunkedArray | pa.Array, share: np.ndarray, ranks: np.ndarray) -> pa.Array:
    """Sizes with each rank's share times the ranks of its communicator (nccl-tests' size)."""
    values = pc.fill_null(size, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    valid = np.asarray(pc.is_valid(size))
    return pa.array(np.where(share, values * ranks, values), pa.int64(), mask=~valid)


def write(payloads: pa.Table, directory: Path) -> None:
    """The linked payloads into a report's dataset (nothing where there are none)."""
    if payloads.num_rows:
        pq.write_table(payloads, directory / FILE, compression="zstd")


def read(directory: Path | None) -> pa.Table | None:
    """A report dataset's linked payloads, None where it keeps none."""
    file = None if directory is None else directory / FILE
    if file is None or not file.is_file():
        return None
    try:
        return pq.read_table(file)
    except (OSError, pa.ArrowException) as exc:
        raise DamagedDataset(f"{file} cannot be read ({exc}); convert the report again with --force.") from exc
