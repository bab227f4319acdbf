"""Who launched the GPU work no op's own thread placed: the ``[no op]`` row explained by thread,
and the work attributed by time (nvbridge.engine.by_time) shown beside each op's own.

``[no op]`` keeps the thread-exact meaning (GPU ops whose launching call lies in no range of its
thread), so Self CUDA still adds up to all GPU time and equals NVIDIA's nvtxkernsum. Of it, the
work another thread of the process had a range open around is listed per op name ("Backward:
97 ms own + 668 ms launched by pt_autograd_0 while it was open"); what remains is listed per
launching thread, named from the ``threads`` table, and the GPU ops whose launch the capture
missed are counted apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col


@dataclass(frozen=True, slots=True)
class Thread:
    """A launching thread's share: its name (``threads.thread_name``, else ``thread TID``)."""

    process_id: int
    thread_id: int
    name: str
    gpu_ns: int
    gpu_ops: int


@dataclass(frozen=True, slots=True)
class ByTime:
    """One op name's GPU time: its own (Self CUDA) and what other threads launched while one of
    its ranges was the open range of their process."""

    name: str
    own_ns: int
    by_time_ns: int
    threads: tuple[Thread, ...]


@dataclass(frozen=True, slots=True)
class Launches:
    """The ``[no op]`` row's GPU time, the part attributed by time and by whom, and the rest."""

    no_op_ns: int = 0
    by_time: tuple[ByTime, ...] = ()
    left: tuple[Thread, ...] = ()  # launched with no range open in the process, by thread
    no_call_ns: int = 0  # GPU ops whose launching call is not in the capture
    no_call_ops: int = 0

    @property
    def by_time_ns(self) -> int:
        return sum(b.by_time_ns for b in self.by_time)


class LaunchTally:
    """The GPU ops no op launched, added a part at a time: by thread, or by (time op, thread)."""

    COLUMNS = ["op_id", "process_id", "thread_id", "start_ns", "end_ns"]

    def __init__(self) -> None:
        self.left: dict[tuple[int, ...], list[int]] = {}  # (pid, tid) -> [ops, ns]
        self.by_time: dict[tuple[int, ...], list[int]] = {}  # (time op, pid, tid) -> [ops, ns]
        self.no_call = [0, 0]

    def add(self, gpu_ops: pa.Table) -> None:
        """One part (COLUMNS, and ``time_op_id`` where the dataset has it), already selected."""
        outside = np_col(gpu_ops, "op_id", fill=-1) < 0
        if not outside.any():
            return
        dur = (np_col(gpu_ops, "end_ns") - np_col(gpu_ops, "start_ns"))[outside]
        pid = np_col(gpu_ops, "process_id", fill=-1)[outside]
        tid = np_col(gpu_ops, "thread_id", fill=-1)[outside]
        has_time = "time_op_id" in gpu_ops.column_names
        t_op = np_col(gpu_ops, "time_op_id", fill=-1)[outside] if has_time else np.full(len(dur), -1)
        no_call = tid < 0
        self.no_call[0] += int(no_call.sum())
        self.no_call[1] += int(dur[no_call].sum())
        for keys, target, mask in (
            ((pid, tid), self.left, (t_op < 0) & ~no_call),
            ((t_op, pid, tid), self.by_time, t_op >= 0),
        ):
            _sum_into(target, [k[mask] for k in keys], dur[mask])

    def time_ops(self) -> set[int]:
        """The ops some GPU work was attributed to by time."""
        return {k[0] for k in self.by_time}

    def result(self, names: Mapping[int, str], own_ns: Mapping[str, int], threads: pa.Table) -> Launches:
        """``names``: op id -> op name of :meth:`time_ops`; ``own_ns``: Self CUDA per op name."""
        label = _thread_names(threads)
        per_name: dict[str, dict[tuple[int, ...], list[int]]] = {}
        for (op, p, t), (n, ns) in self.by_time.items():
            cell = per_name.setdefault(names.get(op, f"op {op}"), {}).setdefault((p, t), [0, 0])
            cell[0] += n
            cell[1] += ns

        def listed(cells: Mapping[tuple[int, ...], list[int]]) -> tuple[Thread, ...]:
            out = [Thread(p, t, label.get((p, t), f"thread {t}"), ns, n) for (p, t), (n, ns) in cells.items()]
            return tuple(sorted(out, key=lambda x: (-x.gpu_ns, x.process_id, x.thread_id)))

        by_time = [ByTime(n, own_ns.get(n, 0), sum(v[1] for v in c.values()), listed(c)) for n, c in per_name.items()]
        by_time.sort(key=lambda b: (-b.by_time_ns, b.name))
        left = listed(self.left)
        total = sum(b.by_time_ns for b in by_time) + sum(x.gpu_ns for x in left) + self.no_call[1]
        return Launches(total, tuple(by_time), left, self.no_call[1], self.no_call[0])


def _sum_into(target: dict[tuple[int, ...], list[int]], keys: list[np.ndarray], dur: np.ndarray) -> None:
    """Counts and summed ``dur`` per distinct key tuple (a few threads), into ``target``."""
    if not len(dur):
        return
    uniq, at = np.unique(np.stack(keys), axis=1, return_inverse=True)
    at = at.ravel()
    counts = np.bincount(at, minlength=uniq.shape[1])
    sums = np.zeros(uniq.shape[1], np.int64)
    np.add.at(sums, at, dur)
    for i, key in enumerate(map(tuple, uniq.T.tolist())):
        cell = target.setdefault(key, [0, 0])
        cell[0] += int(counts[i])
        cell[1] += int(sums[i])


def _thread_names(threads: pa.Table) -> dict[tuple[int, int], str]:
    if not threads.num_rows or "thread_name" not in threads.column_names:
        return {}
    keys = zip(np_col(threads, "process_id", fill=-1).tolist(), np_col(threads, "thread_id", fill=-1).tolist())
    return {k: n for k, n in zip(keys, threads.column("thread_name").to_pylist()) if n}


def merge_launches(parts: list[Launches]) -> Launches:
    """The launches of several reports (a partitioned dataset): their lists side by side, the
    same op name's figures added up."""
    if len(parts) == 1:
        return parts[0]
    by_name: dict[str, list[ByTime]] = {}
    for part in parts:
        for b in part.by_time:
            by_name.setdefault(b.name, []).append(b)
    merged = [
        ByTime(n, sum(b.own_ns for b in bs), sum(b.by_time_ns for b in bs), tuple(t for b in bs for t in b.threads))
        for n, bs in by_name.items()
    ]
    merged.sort(key=lambda b: (-b.by_time_ns, b.name))
    return Launches(
        sum(p.no_op_ns for p in parts),
        tuple(merged),
        tuple(t for p in parts for t in p.left),
        sum(p.no_call_ns for p in parts),
        sum(p.no_call_ops for p in parts),
    )
