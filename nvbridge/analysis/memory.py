"""The memory header of ``summary``: per device, the peak allocated, when, in which step, op and
module path, and each step's own peak.

Read from the ``memory`` table (docs/memory.md), a row group at a time: the peak of a device is
the largest ``total_allocated`` (live bytes of that allocator after the event, torch's "Total
Allocated") over its rows, the first such row where several reach it; a step's peak is the same
over the rows whose ``step`` is that step. The op and module path are the peak row's ``op_id``'s
(the innermost op open on the allocating thread), looked up in one pass over two ops columns.
Where several processes share a device name (``cpu`` of a report of several processes), the
peak is the largest one process reached, not a sum: each allocator counts its own process's
bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col
from nvbridge.dataset.schema import ReportTables
from nvbridge.errors import DamagedDataset

MEMORY = "memory"
PEAK_COLUMNS = ["ts_ns", "process_id", "device", "total_allocated", "op_id", "step"]


@dataclass(frozen=True, slots=True)
class StepPeak:
    """The peak of one device within one step (``step`` None: the whole capture)."""

    step: int | None
    peak_allocated_bytes: int
    peak_ns: int
    op: str | None
    module_path: str | None
    op_id: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class DevicePeak:
    """A device's peak over the capture, and per step."""

    device: str
    peak: StepPeak
    steps: tuple[StepPeak, ...]

    def as_json(self) -> dict[str, object]:
        """``summary --json``'s ``memory.<device>`` object (spec: docs/memory.md)."""

        def one(p: StepPeak) -> dict[str, object]:
            return {
                "step": p.step,
                "peak_allocated_bytes": p.peak_allocated_bytes,
                "peak_ns": p.peak_ns,
                "op": p.op,
                "module_path": p.module_path,
            }

        top = one(self.peak)
        top["steps"] = [one(s) for s in self.steps]
        return top


def memory_rows(report: ReportTables) -> int:
    """Rows of the report's memory table (0 where the report has none: a dataset older than the
    table, or tables held in memory without it)."""
    try:
        return report.rows(MEMORY)
    except (KeyError, DamagedDataset):
        return 0


# A running peak: (total_allocated, ts_ns, op_id or -1, step or -1) of the row that reached it first.
Best = tuple[int, int, int, int]


def _better(best: Best | None, candidate: Best) -> Best:
    """The higher peak; on a tie the earlier one."""
    if best is None or candidate[0] > best[0] or (candidate[0] == best[0] and candidate[1] < best[1]):
        return candidate
    return best


def _chunk_peaks(chunk: pa.Table, overall: dict[str, Best], steps: dict[tuple[str, int], Best]) -> None:
    """Fold one row group into the running peaks, per device and per (device, step)."""
    devices = chunk.column("device").to_numpy(zero_copy_only=False).astype(str)
    total = np_col(chunk, "total_allocated", fill=0)
    ts = np_col(chunk, "ts_ns")
    op = np_col(chunk, "op_id", fill=-1)
    step = np_col(chunk, "step", fill=-1)
    for device in np.unique(devices):
        mine = devices == device
        for s in np.unique(step[mine]):
            rows = np.flatnonzero(mine & (step == s))
            top = total[rows].max()
            at = rows[total[rows] == top]
            i = at[np.argmin(ts[at])]
            best: Best = (int(top), int(ts[i]), int(op[i]), int(s))
            overall[str(device)] = _better(overall.get(str(device)), best)
            if s >= 0:
                steps[(str(device), int(s))] = _better(steps.get((str(device), int(s))), best)


def op_names(report: ReportTables, ids: set[int]) -> dict[int, tuple[str | None, str | None]]:
    """(op_name, module_path) of each op id in ``ids``; the module path is the op's own or, for
    an op without one (an aten op inside a backward node, an allocator call inside a module's
    op), its nearest ancestor's. Two passes over the ops: parents and which ops have a module
    path (9 bytes an op), then the names wanted."""
    if not ids:
        return {}
    n = report.rows("ops")
    parent, has = np.full(n + 1, -1, np.int64), np.zeros(n + 1, bool)
    for chunk in report.chunks("ops", ["op_id", "parent_id", "module_path"]):
        at = np_col(chunk, "op_id")
        parent[at] = np_col(chunk, "parent_id", fill=-1)
        has[at] = pc.fill_null(pc.not_equal(chunk.column("module_path").cast(pa.string()), ""), False).to_numpy(
            zero_copy_only=False
        )
    start = np.fromiter(ids, np.int64)
    owner = start.copy()
    for _ in range(n + 1):  # up the tree until an op with a module path, or the root
        climb = (owner >= 0) & ~has[np.maximum(owner, 0)]
        if not climb.any():
            break
        owner[climb] = parent[owner[climb]]
    names: dict[int, str | None] = {}
    modules: dict[int, str | None] = {}
    for chunk in report.chunks("ops", ["op_id", "op_name", "module_path"]):
        at = np_col(chunk, "op_id")
        for i in np.flatnonzero(np.isin(at, start)).tolist():
            names[int(at[i])] = chunk.column("op_name")[i].as_py()
        for i in np.flatnonzero(np.isin(at, owner)).tolist():
            modules[int(at[i])] = chunk.column("module_path")[i].as_py()
    return {int(i): (names.get(int(i)), modules.get(int(o))) for i, o in zip(start, owner)}


def memory_peaks(
    report: ReportTables, processes: set[int] | None = None, device: int | None = None
) -> list[DevicePeak]:
    """Per device (in name order) the peak allocated over the capture and per step; empty where
    the report recorded no memory events. ``processes``: only their events (summary's --rank
    and --device filters keep these); ``device``: only GPU ``device``'s (``cuda:N``) events."""
    if not memory_rows(report):
        return []
    overall: dict[str, Best] = {}
    steps: dict[tuple[str, int], Best] = {}
    for chunk in report.chunks(MEMORY, PEAK_COLUMNS):
        if processes is not None:
            chunk = chunk.filter(pa.array(np.isin(np_col(chunk, "process_id", fill=-1), sorted(processes))))
        if device is not None:
            chunk = chunk.filter(pc.equal(chunk.column("device").cast(pa.string()), f"cuda:{device}"))
        _chunk_peaks(chunk, overall, steps)
    names = op_names(report, {b[2] for b in (*overall.values(), *steps.values()) if b[2] >= 0})

    def peak(b: Best) -> StepPeak:
        op, module = names.get(b[2], (None, None))
        return StepPeak(b[3] if b[3] >= 0 else None, b[0], b[1], op, module, b[2] if b[2] >= 0 else None)

    return [
        DevicePeak(
            device,
            peak(best),
            tuple(peak(steps[k]) for k in sorted(k for k in steps if k[0] == device)),
        )
        for device, best in sorted(overall.items())
    ]
