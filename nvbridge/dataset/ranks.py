"""Which rank each process of a report is: the one rule summary's ``--rank``/``--device`` filters,
its per-rank lines and MFU, and the lanes advise reports (a rank's GPU) go by.

A rank is a process that ran GPU work (GPU ops launched from it); in a report without GPU work,
every process with NVTX ranges. A process with ranges but no GPU work beside ones that have it
(a DataLoader worker process, a launcher) is no rank. Numbering, per report:

0. A process that wrote emit_nvtx's rank mark (``rank <rank> <world> <local>``, domain
   ``nvbridge``; ``meta.process_ranks``) is that rank, whatever else holds: the process said so.
   Processes without one are numbered by the rules below with the numbers the marks left free.
1. A report of one such process takes the rank its capture recorded (``meta.rank``: its rank
   mark, torchrun's ``RANK`` in the captured environment, or the file name's ``rank3``), else 0.
2. Several processes (torchrun, ``mp.spawn``, an MPI job under one ``nsys``) are numbered
   0, 1, ... in order of the lowest GPU each ran work on, then of process id. A node's
   processes each own a GPU in the usual setup (``torch.cuda.set_device(local_rank)``), so this
   is the local rank whatever order the processes started in; processes sharing a GPU, or
   using none, fall back to process id order, the order torchrun and mp.spawn start them in.

GPU ops without a known process (nvprof ops whose API call is outside the capture) belong to
the process that used their device, where one did (nvbridge.dataset.timeline.owning_process).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col

# What a capture recorded of its ranks: one rank (meta.rank), or per process id (rank marks).
Recorded = int | Mapping[int, int] | None


@dataclass(frozen=True, slots=True)
class ProcessRank:
    """One rank: its process, its number, and the GPUs it ran work on."""

    process_id: int
    rank: int
    devices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Ranks:
    """The ranks of one report (:func:`rank_processes`)."""

    ranks: tuple[ProcessRank, ...] = ()  # in rank order
    others: tuple[int, ...] = ()  # processes with ranges that are no rank
    device_users: Mapping[int, tuple[int, ...]] = field(default_factory=dict)  # device -> processes

    def numbers(self) -> list[int]:
        return [r.rank for r in self.ranks]

    def processes(self, rank: int | None = None, device: int | None = None) -> set[int] | None:
        """The processes that are ``rank`` and used ``device`` (None: no filter at all)."""
        if rank is None and device is None:
            return None
        out = {r.process_id for r in self.ranks if rank is None or r.rank == rank}
        return out if device is None else out & set(self.device_users.get(device, ()))

    def rank_of(self, process: int) -> int | None:
        return next((r.rank for r in self.ranks if r.process_id == process), None)

    def owner(self, process: np.ndarray, device: np.ndarray) -> np.ndarray:
        """The process of each GPU op: its own, or (unknown, -1) its device's only user."""
        out: np.ndarray = np.array(process, np.int64)
        for d, users in self.device_users.items():
            if len(users) == 1:
                out[(out < 0) & (device == d)] = users[0]
        return out


def rank_processes(op_processes: Iterable[int], gpu_work: Mapping[int, set[int]], recorded: Recorded = None) -> Ranks:
    """The ranks of a report.

    Args:
        op_processes: processes with NVTX ranges.
        gpu_work: per device, the processes that launched GPU ops on it (-1: unknown).
        recorded: the rank the capture recorded (``meta.rank``), for a report of one rank; or
            per process id the ranks the processes recorded (``meta.process_ranks``).
    """
    users = {d: tuple(sorted(p for p in ps if p >= 0)) for d, ps in gpu_work.items()}
    lowest: dict[int, int] = {}
    for d in sorted(users):
        for p in users[d]:
            lowest.setdefault(p, d)
    procs = sorted(lowest, key=lambda p: (lowest[p], p)) if lowest else sorted(set(op_processes))
    marked = dict(recorded) if isinstance(recorded, Mapping) else {}
    marked = {p: r for p, r in marked.items() if p in set(op_processes) or p in lowest}
    if len(marked) == 1 and len(procs) == 1 and procs[0] in marked:
        marked, recorded = {}, marked[procs[0]]  # one rank: as a recorded meta.rank
    procs = sorted(marked, key=lambda p: marked[p]) + [p for p in procs if p not in marked]
    devices = {p: tuple(sorted(d for d, ps in users.items() if p in ps)) for p in procs}
    ranks: tuple[ProcessRank, ...]
    if len(procs) == 1 and isinstance(recorded, int):
        ranks = (ProcessRank(procs[0], recorded, devices[procs[0]]),)
    else:
        free = (n for n in range(len(procs) + len(marked) + 1) if n not in set(marked.values()))
        ranks = tuple(ProcessRank(p, marked[p] if p in marked else next(free), devices[p]) for p in procs)
    others = tuple(sorted(set(op_processes) - set(procs)))
    return Ranks(ranks, others, users)


def recorded_ranks(meta: Mapping[str, str | None]) -> Recorded:
    """What a report's meta recorded of its ranks: per process (``process_ranks``, from rank
    marks) where it says so for more than one process, else ``rank`` (None: nothing)."""
    text = meta.get("process_ranks")
    try:
        found = {int(p): int(r) for p, r in json.loads(text).items()} if text else {}
    except (ValueError, TypeError, AttributeError):
        found = {}
    if len(found) > 1:
        return found
    value = meta.get("rank")
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


class RankTally:
    """What :func:`rank_processes` needs, gathered a part of the ops and GPU ops at a time."""

    OPS_COLUMNS = ["process_id"]
    GPU_COLUMNS = ["process_id", "device_id"]

    def __init__(self) -> None:
        self.op_processes: set[int] = set()
        self.gpu_work: dict[int, set[int]] = {}

    def add_ops(self, ops: pa.Table) -> None:
        self.op_processes.update(np.unique(np_col(ops, "process_id", fill=-1)).tolist())

    def add_gpu(self, gpu_ops: pa.Table) -> None:
        proc = np_col(gpu_ops, "process_id", fill=-1)
        dev = np_col(gpu_ops, "device_id", fill=-1)
        if not len(proc):
            return
        # one int64 per (device, process): ids are 32-bit (pids, device ordinals; -1 none)
        pairs = np.unique((dev << 32) | (proc & 0xFFFFFFFF))
        for d, p in zip((pairs >> 32).tolist(), (pairs & 0xFFFFFFFF).tolist()):
            self.gpu_work.setdefault(d, set()).add(p if p != 0xFFFFFFFF else -1)

    def result(self, recorded: Recorded = None) -> Ranks:
        return rank_processes(self.op_processes - {-1}, self.gpu_work, recorded)


def ranks_of(ops: pa.Table, gpu_ops: pa.Table, recorded: Recorded = None) -> Ranks:
    """The ranks of whole tables (a loaded report's)."""
    tally = RankTally()
    tally.add_ops(ops)
    tally.add_gpu(gpu_ops)
    return tally.result(recorded)
