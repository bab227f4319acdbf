"""One report's collectives, per process, before they are matched across ranks
(nvbridge.dataset.collectives): every communication range torch or NCCL recorded, and every
NCCL kernel, folded into one *instance* per collective a process issued.

Sources, by stable names (never by ids or versions):

- torch's ranges: ``c10d::allreduce_`` (the dispatcher op), ``record_param_comms``, and the
  backend's own ``nccl:all_reduce`` / ``gloo:all_reduce`` inside it;
- NCCL's own NVTX ranges (``-t nccl``: ``ncclAllReduce``, ``ncclSend``, ...);
- NCCL kernels: ``ncclKernel_AllReduce_RING_LL_Sum_float`` (NCCL 2.x), ``ncclDevKernel_SendRecv``
  (2.19+): the collective's name is the token after ``Kernel_``.

Ranges of one collective nest on the issuing thread, so the outermost communication range is
the instance, and the ranges and kernels inside it (kernels through their launching range) are
parts of it. A kernel launched outside any communication range is an instance of its own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col
from nvbridge.dataset import nccl_bytes

OPS_COLUMNS = ["op_id", "op_name", "process_id", "thread_id", "start_ns", "end_ns", "step"]
OPS_DETAIL = ["input_shapes", "input_dtypes"]
GPU_COLUMNS = ["op_id", "kind", "name", "process_id", "device_id", "start_ns", "end_ns"]

# A communication range: torch's dispatcher op, its profiler wrapper, a backend's own range, or
# one of NCCL's API ranges (its domain's registered strings: ncclAllReduce, and ncclGroupEnd,
# inside which grouped calls launch their kernels).
COMM_RANGE = r"^(c10d::\w+|record_param_comms|(nccl|gloo|ucc|mpi):\w+|nccl[A-Z]\w*)$"
_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")

# words (lower case, without separators) -> the table's op name
_OPS = {
    "allreduce": "allreduce",
    "allgather": "allgather",
    "allgatherintotensor": "allgather",
    "reducescatter": "reduce_scatter",
    "reducescattertensor": "reduce_scatter",
    "broadcast": "broadcast",
    "bcast": "broadcast",
    "reduce": "reduce",
    "alltoall": "alltoall",
    "alltoallbase": "alltoall",
    "barrier": "barrier",
    "monitoredbarrier": "barrier",
    "send": "send",
    "recv": "recv",
    "recvanysource": "recv",
    "sendrecv": "sendrecv",
    "gather": "gather",
    "scatter": "scatter",
}
_WORKER_BACKENDS = frozenset({"gloo", "ucc", "mpi"})
_DROP = re.compile(r"(base|coalesced|tensor|into|_)")

# bytes per element of torch's dtype words as nvbridge's names record them (and torch's own)
_DTYPE_BYTES = {
    "f64": 8, "double": 8, "float64": 8, "i64": 8, "long": 8, "int64": 8, "c64": 8,
    "f32": 4, "float": 4, "float32": 4, "i32": 4, "int": 4, "int32": 4, "tf32": 4,
    "f16": 2, "half": 2, "float16": 2, "bf16": 2, "bfloat16": 2, "i16": 2, "short": 2, "int16": 2,
    "u8": 1, "i8": 1, "bool": 1, "byte": 1, "char": 1, "uint8": 1, "int8": 1, "fp8": 1,
}  # fmt: skip


def op_of_name(name: str) -> str | None:
    """The collective a range name or kernel name names (``None``: not one, or only the
    ``record_param_comms`` wrapper)."""
    m = _KERNEL.match(name)
    if m:
        word = m.group(1).lower()
    elif name.startswith("nccl") and ":" not in name:
        word = name[4:].lower()
    elif "::" in name or ":" in name:
        word = name.rsplit(":", 1)[1].lower()
    else:
        return None
    return _OPS.get(word) or _OPS.get(_DROP.sub("", word))


def backend_of_name(name: str) -> str:
    if name.startswith(("gloo:", "ucc:", "mpi:")):
        return name.split(":", 1)[0]
    return "nccl" if name.startswith("nccl") else ""


def payload_bytes(name: str, shapes: str | None, dtypes: str | None) -> int | None:
    """A collective's size as nccl-tests counts it, from torch's dispatcher op (``c10d::...``:
    its recorded ``sizes`` and nvbridge's ``dtypes``): the buffer for allreduce, broadcast,
    reduce and alltoall, the gathered output for allgather (its first argument), the whole input
    for reduce_scatter (its second: the first is one rank's share). None where not recorded, or
    for any other range (the backends' own ranges record one rank's share only)."""
    if not name.startswith("c10d::") or not shapes or not dtypes:
        return None
    try:
        sizes = json.loads(shapes)
    except ValueError:
        return None
    words = [w.strip() for w in dtypes.strip("[] ").split(",")]
    arg = 1 if op_of_name(name) == "reduce_scatter" else 0
    if not isinstance(sizes, list) or len(sizes) <= arg or len(words) <= arg or words[arg] not in _DTYPE_BYTES:
        return None
    numel = _numel(sizes[arg])
    return None if numel is None else numel * _DTYPE_BYTES[words[arg]]


def _numel(shape: object) -> int | None:
    """Elements of one tensor's shape ([2, 3]) or of a list of them ([[2, 3], [4]])."""
    if isinstance(shape, list) and all(isinstance(d, int) for d in shape):
        return int(np.prod(shape, dtype=np.int64)) if shape else 1
    if isinstance(shape, list) and shape and all(isinstance(s, list) for s in shape):
        parts = [_numel(s) for s in shape]
        return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)
    return None


@dataclass(frozen=True, slots=True)
class Instances:
    """One report's collectives (one entry per collective a process issued), as columns."""

    table: pa.Table  # INSTANCE columns, in (process, issue) order
    kernels: int  # NCCL kernels read
    ranges: int  # communication ranges read


INSTANCE = pa.schema(
    [
        *(("process_id", pa.int64()), ("op", pa.string()), ("backend", pa.string()), ("issue_ns", pa.int64())),
        *(("arrival_ns", pa.int64()), ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("bytes", pa.int64())),
        *(("step", pa.int64()), ("op_id", pa.int64()), ("source", pa.string()), ("kernels", pa.int64())),
        # where bytes came from (nccl_payload, shapes); bytes_share: one rank's share (NCCL's
        # allgather and reduce_scatter payloads), to be multiplied by the communicator's ranks
        *(("bytes_source", pa.string()), ("bytes_share", pa.bool_())),
    ]
)


def comm_rows(ops: pa.Table) -> pa.Table:
    """The communication ranges of a part of the ops."""
    hit = pc.fill_null(pc.match_substring_regex(ops.column("op_name").cast(pa.string()), COMM_RANGE), False)
    return ops.filter(hit)


def nccl_kernels(gpu_ops: pa.Table) -> pa.Table:
    """The NCCL kernels of a part of the GPU ops."""
    names = gpu_ops.column("name").cast(pa.string())
    hit = pc.and_(pc.equal(gpu_ops.column("kind").cast(pa.string()), "kernel"), pc.starts_with(names, "nccl"))
    return gpu_ops.filter(pc.fill_null(hit, False))


def instances(ranges: pa.Table, kernels: pa.Table, payloads: pa.Table | None = None) -> Instances:
    """Fold a report's communication ranges and NCCL kernels into instances.

    Args:
        ranges: :func:`comm_rows` of all its ops (OPS_COLUMNS + OPS_DETAIL where recorded).
        kernels: :func:`nccl_kernels` of all its GPU ops.
        payloads: the decoded NCCL payloads of its ranges (nccl_bytes.link), None: none.
    """
    groups, group_of_op = _range_groups(nccl_bytes.with_bytes(ranges, payloads))
    groups, group_of_op = _pair_workers(*_fold_nccl_groups(groups, group_of_op))
    k_op = np_col(kernels, "op_id", fill=-1)
    k_start, k_end = np_col(kernels, "start_ns"), np_col(kernels, "end_ns")
    k_proc = np_col(kernels, "process_id", fill=-1)
    k_names = kernels.column("name").cast(pa.string()).to_pylist()
    for i, op in enumerate(k_op.tolist()):
        g = group_of_op.get(op)
        if g is None:  # launched outside any communication range: a collective of its own
            g = len(groups)
            groups.append(_Group(int(k_proc[i]), int(k_start[i]), None, None, op if op >= 0 else None, "nccl_kernel"))
        groups[g].add_kernel(int(k_start[i]), int(k_end[i]), k_names[i])
    # NCCL's API ranges that are no collective (ncclCommInitRank, a lone ncclGroupStart) go
    kept = [g for g in groups if g.kernel_count or g.worker or g.op() != "unknown"]
    kept.sort(key=lambda g: (g.process, g.issue, g.first_kernel or 0))
    rows = [g.row() for g in kept]
    table = pa.Table.from_pylist(rows, schema=INSTANCE) if rows else INSTANCE.empty_table()
    return Instances(table, len(k_op), ranges.num_rows)


def _pair_workers(groups: list[_Group], group_of_op: dict[int, int]) -> tuple[list[_Group], dict[int, int]]:
    """gloo (and ucc, mpi) run a collective on a worker thread: its ``gloo:all_reduce`` range is
    no child of the ``c10d::allreduce_`` that issued it. Per process, the k-th such worker range
    is the k-th issuing range without a backend range inside it (the backend runs them in issue
    order); the pair is one collective."""
    issuers: dict[int, list[int]] = {}
    workers: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        torch = any(n.startswith("c10d::") for n in g.names)
        backend = any(n.split(":", 1)[0] in _WORKER_BACKENDS for n in g.names)
        if torch and not backend:
            issuers.setdefault(g.process, []).append(i)
        elif backend and not torch:
            workers.setdefault(g.process, []).append(i)
    merged: dict[int, int] = {}  # worker group -> issuer group
    for proc, ws in workers.items():
        ordered = sorted(issuers.get(proc, []), key=lambda j: groups[j].issue)
        for w, i in zip(sorted(ws, key=lambda j: groups[j].issue), ordered):
            if groups[w].issue >= groups[i].issue:
                groups[i].worker = (groups[w].issue, groups[w].range_end or groups[w].issue)
                groups[i].names += groups[w].names
                groups[i].backend = groups[w].backend
                merged[w] = i
    keep = [i for i in range(len(groups)) if i not in merged]
    new_index = {old: new for new, old in enumerate(keep)}
    ops = {op: new_index[merged.get(g, g)] for op, g in group_of_op.items()}
    return [groups[i] for i in keep], ops


def _fold_nccl_groups(groups: list[_Group], group_of_op: dict[int, int]) -> tuple[list[_Group], dict[int, int]]:
    """A program calling NCCL itself (no torch range around the calls) issues ``ncclGroupStart``,
    ``ncclSend``, ... ``ncclGroupEnd`` as sibling ranges on its thread, and NCCL launches the
    group's kernels inside ``ncclGroupEnd``: the calls from an outermost ``ncclGroupStart`` to
    its ``ncclGroupEnd`` (groups nest) are one collective."""
    depth: dict[tuple[int, int], int] = {}
    members: dict[tuple[int, int], list[int]] = {}
    merged: dict[int, int] = {}  # folded group -> the group's ncclGroupEnd
    for j in sorted(range(len(groups)), key=lambda i: (groups[i].process, groups[i].thread, groups[i].issue)):
        g = groups[j]
        if len(g.names) != 1 or not g.names[0].startswith("nccl") or ":" in g.names[0]:
            continue
        key = (g.process, g.thread)
        depth[key] = depth.get(key, 0) + (g.names[0] == "ncclGroupStart")
        if not depth[key]:
            continue
        members.setdefault(key, []).append(j)
        if g.names[0] == "ncclGroupEnd":
            depth[key] -= 1
            if not depth[key]:
                for m in reversed(members.pop(key)[:-1]):  # earliest last: names keep issue order
                    g.absorb(groups[m])
                    merged[m] = j
    keep = [i for i in range(len(groups)) if i not in merged]
    new_index = {old: new for new, old in enumerate(keep)}
    return [groups[i] for i in keep], {op: new_index[merged.get(g, g)] for op, g in group_of_op.items()}


class _Group:
    """One collective of one process while it is being folded (a few per step: not a hot path)."""

    def __init__(self, process: int, issue: int, end: int | None, step: int | None, op_id: int | None, src: str):
        self.process = process
        self.issue = issue  # the issuing range's start (a lone kernel's start)
        self.range_end = end
        self.step = step
        self.op_id = op_id
        self.source = src
        self.names: list[str] = []
        self.thread = -1
        self.backend = ""
        self.bytes: int | None = None
        self.first_kernel: int | None = None
        self.last_kernel_end: int | None = None
        self.kernel_count = 0
        self.kernel_op: str | None = None
        self.worker: tuple[int, int] | None = None  # the backend's range on its worker thread
        self.payload = nccl_bytes.GroupBytes()  # what NCCL's payloads of its ranges say

    def absorb(self, other: _Group) -> None:
        """Take in an earlier call of the same NCCL group (its range, names and payload)."""
        if other.issue < self.issue:
            self.issue, self.op_id, self.step = other.issue, other.op_id, other.step
        self.names = other.names + self.names
        self.bytes = self.bytes if self.bytes is not None else other.bytes
        self.payload.merge(other.payload)

    def add_kernel(self, start: int, end: int, name: str) -> None:
        self.first_kernel = start if self.first_kernel is None else min(self.first_kernel, start)
        self.last_kernel_end = end if self.last_kernel_end is None else max(self.last_kernel_end, end)
        self.kernel_count += 1
        self.kernel_op = self.kernel_op or op_of_name(name)
        self.backend = self.backend or "nccl"

    def op(self) -> str:
        # torch's dispatcher name first (alltoall runs as SendRecv kernels), then the backend's
        # range, NCCL's API range, the kernel
        ranked = sorted(self.names, key=lambda n: 0 if n.startswith("c10d::") else 1 if ":" in n else 2)
        for name in ranked:
            op = op_of_name(name)
            if op:
                return op
        return self.kernel_op or "unknown"

    def row(self) -> dict[str, object]:
        # A kernel's start is when the rank's GPU joins the collective: a CPU launch is no
        # arrival, the kernel waits in its stream behind the rank's earlier GPU work.
        # A CPU backend's rank joins when it calls the collective; its worker runs it to the end.
        kernel = self.first_kernel is not None
        size, share = self.payload.size()
        source = "nccl_payload" if size is not None else "shapes" if self.bytes is not None else None
        start = self.first_kernel if kernel else self.worker[0] if self.worker else self.issue
        end = self.last_kernel_end if kernel else self.worker[1] if self.worker else self.range_end
        return {
            "process_id": self.process,
            "op": self.op(),
            "backend": self.backend or "c10d",
            "issue_ns": self.issue,
            "arrival_ns": start if kernel else self.issue,
            "start_ns": start,
            "end_ns": end,
            "bytes": size if size is not None else self.bytes,
            "step": self.step,
            "op_id": self.op_id,
            "source": "nccl_kernel" if kernel else self.source,
            "kernels": self.kernel_count,
            "bytes_source": source,
            "bytes_share": share,
        }


def _range_groups(ranges: pa.Table) -> tuple[list[_Group], dict[int, int]]:
    """The outermost communication range of each nest on a thread is one group; every range in
    it maps (by op_id) to the group."""
    if not ranges.num_rows:
        return [], {}
    proc, thread = np_col(ranges, "process_id", fill=-1), np_col(ranges, "thread_id", fill=-1)
    start, end = np_col(ranges, "start_ns"), np_col(ranges, "end_ns")
    op_id = np_col(ranges, "op_id")
    step = ranges.column("step").to_pylist()
    names = ranges.column("op_name").cast(pa.string()).to_pylist()
    has_detail = all(c in ranges.column_names for c in OPS_DETAIL)
    shapes = ranges.column("input_shapes").to_pylist() if has_detail else [None] * ranges.num_rows
    dtypes = ranges.column("input_dtypes").to_pylist() if has_detail else [None] * ranges.num_rows
    sizes = ranges.column(nccl_bytes.COLUMN).to_pylist()
    order = np.lexsort((-end, start, thread, proc))
    groups: list[_Group] = []
    group_of_op: dict[int, int] = {}
    key: tuple[int, int] | None = None
    reach = -1
    for i in order.tolist():
        if (int(proc[i]), int(thread[i])) != key or start[i] >= reach:
            key, reach = (int(proc[i]), int(thread[i])), int(end[i])
            groups.append(_Group(int(proc[i]), int(start[i]), int(end[i]), step[i], int(op_id[i]), "c10d_op"))
        g = groups[-1]
        g.thread = int(thread[i])
        g.names.append(names[i])
        g.backend = g.backend or backend_of_name(names[i])
        if names[i].startswith("nccl") and ":" not in names[i] and g.source == "c10d_op" and len(g.names) == 1:
            g.source = "nccl_nvtx"
        if g.bytes is None:
            g.bytes = payload_bytes(names[i], shapes[i], dtypes[i])
        g.payload.add(op_of_name(names[i]) if names[i].startswith("nccl") else None, sizes[i])
        group_of_op[int(op_id[i])] = len(groups) - 1
    return groups, group_of_op
