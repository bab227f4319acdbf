"""One Chrome/Perfetto trace of a dataset of many reports (``report=<name>/`` partitions): every
rank its own processes, on one aligned clock, the same collective joined across ranks by flows.

Each report is read a row group at a time, as :mod:`nvbridge.export.trace` reads one dataset,
and fed to one :class:`~nvbridge.export.chrome.TraceWriter` after three rewrites that let reports
share a file without colliding (reports of one run hold the same process ids, GPU 0 and ids from 0):

- times: ``+ offset_ns`` of the report (:func:`clock_offsets`), the aligned clock;
- processes: ``pid + PID_STRIDE * (k + 1)`` and GPUs ``device + DEVICE_STRIDE * k`` for the k-th
  report (in rank order), named ``rank R: <name> (pid P)`` and ``rank R GPU D``, R the process's
  own rank (nvbridge.dataset.process_ranks: its rank mark in a report of several ranks, one nsys
  session per node or over the launcher; else the report's);
- ids (op, API call, GPU op): offset by the ids of the reports before, so the writer's flows
  (launch -> kernel, forward -> backward) stay inside their report.

Cuts apply in each report's own time: ``ranks`` keeps those ranks' reports (of a report of
several ranks, those ranks' processes), ``steps`` each report's
``ProfilerStep#A..#B`` (each rank's steps on its own timeline), ``start_ns``/``end_ns`` a window on
the aligned clock. The collectives (:mod:`nvbridge.export.trace_collectives`) are drawn last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col
from nvbridge.dataset.check import is_partitioned, read_meta
from nvbridge.dataset.collectives_read import root_meta
from nvbridge.dataset.process_ranks import ReportRanks, dataset_ranks
from nvbridge.dataset.schema import ReportTables
from nvbridge.dataset.timeline import in_window
from nvbridge.errors import ExportError
from nvbridge.export.chrome import TraceWriter
from nvbridge.export.trace_collectives import choose, draw_collectives, read_collectives
from nvbridge.export.trace_source import COLUMNS, EVENT_TABLES, Plan, feed_memory, open_source

PID_STRIDE = 10_000_000  # above Linux's largest pid (pid_max <= 2**22)
DEVICE_STRIDE = 1_000
ID_COLUMNS = {
    "ops": ("op_id", "fwd_op_id"),
    "api_calls": ("api_call_id", "op_id"),
    "gpu_ops": ("gpu_op_id", "api_call_id", "op_id"),
}
ID_BASE = {"op_id": "ops", "fwd_op_id": "ops", "api_call_id": "api_calls", "gpu_op_id": "gpu_ops"}
ID_OF = {"ops": "op_id", "api_calls": "api_call_id", "gpu_ops": "gpu_op_id"}


@dataclass
class Part:
    """One report of the dataset: its rank, clock offset and what its rows are rewritten by."""

    name: str  # the partition's name without ``report=``
    source: ReportTables
    rank: int
    offset_ns: int
    index: int  # position in rank order
    ids: dict[str, int]  # table -> id base (the ids of the reports before)
    spans: dict[str, int]  # table -> one more than its largest id
    of: ReportRanks | None = None  # its processes' ranks
    only: frozenset[int] | None = None  # the processes kept (a report of several ranks cut by rank)
    window: tuple[int | None, int | None] = (None, None)  # in the report's own time
    steps: tuple[int, int] | None = None  # the ProfilerSteps the window is
    process_windows: dict[int, tuple[int, int]] | None = None  # cut by steps, several ranks: each process's
    found: Plan | None = None

    @property
    def several(self) -> bool:
        return self.of is not None and self.of.several

    def rank_of(self, process: int) -> int | None:
        """A process's rank: its own in a report of several ranks (None: no rank), else the report's."""
        return (self.of.of.get(process) if self.of is not None else None) if self.several else self.rank

    def ranks(self) -> list[int]:
        """The ranks this part draws."""
        if not self.several or self.of is None:
            return [self.rank]
        return sorted({r for p, r in self.of.of.items() if self.only is None or p in self.only})

    @property
    def pid_base(self) -> int:
        return PID_STRIDE * (self.index + 1)

    @property
    def device_base(self) -> int:
        return DEVICE_STRIDE * self.index


def clock_offsets(root: Path, names: Sequence[str], metas: Sequence[dict[str, str | None]]) -> dict[str, int]:
    """Per report, what to add to its times to put them on the aligned clock: the dataset's
    ``clock.<report>.offset_ns`` (nvbridge's alignment) where recorded; otherwise, for reports
    whose times count from their session's start, the session starts' differences (hosts'
    wall clocks: exact only where they agree); otherwise 0."""
    keys = root_meta(root)  # nvbridge.dataset.clocks' offsets (aligned = report time + offset)
    got = {n: keys.get(f"clock.{n}.offset_ns") for n in names}
    if all(v is not None for v in got.values()):
        return {n: int(str(v)) for n, v in got.items()}
    starts = [m.get("session_start_utc_ns") if m.get("time_base") == "session" else None for m in metas]
    if all(s is not None for s in starts) and starts:
        low = min(int(str(s)) for s in starts)
        return {n: int(str(s)) - low for n, s in zip(names, starts)}
    return dict.fromkeys(names, 0)


def open_parts(root: Path, only: set[int] | None = None) -> tuple[list[Part], int]:
    """The reports of a dataset in rank order (``only`` those ranks), each with its processes'
    ranks (nvbridge.dataset.process_ranks), clock offset and id bases; and how many ranks it has.
    A dataset of one report holding several ranks is one part. Only the reports kept are opened
    (their ids numbered among themselves).

    Raises:
        ExportError: not a dataset of many ranks; a rank of ``only`` it lacks (naming its ranks).
    """
    reports = dataset_ranks(root)
    if not is_partitioned(root) and not (len(reports) == 1 and reports[0].several):
        raise ExportError(f"{root} is not a dataset of many ranks (no report=<name>/ partitions, no rank marks).")
    metas = [read_meta(r.directory) for r in reports]
    offsets = clock_offsets(root, [r.name for r in reports], metas)
    have = sorted({n for r in reports for n in (r.of.values() if r.several else [r.rank])})
    missing = (only or set()) - set(have)
    if missing:
        raise ExportError(
            f"no rank {', '.join(str(r) for r in sorted(missing))} in the dataset (it has ranks "
            f"{', '.join(str(r) for r in have)}); pass those to --ranks."
        )
    parts: list[Part] = []
    bases = dict.fromkeys(EVENT_TABLES, 0)
    for rep in reports:
        kept = rep.processes(only) if only is not None and rep.several else None
        if only is not None and (not kept if rep.several else rep.rank not in only):
            continue
        src = open_source(rep.directory)
        spans = {table: _id_span(src, table, column) for table, column in ID_OF.items()}
        keep = None if kept is None else frozenset(kept)
        parts.append(Part(rep.name, src, rep.rank, offsets[rep.name], len(parts), dict(bases), spans, rep, keep))
        for table in EVENT_TABLES:
            bases[table] += spans[table]
    return parts, len(have)


def rank_parts(parts: Sequence[Part]) -> list[Part]:
    """One part per rank (``--split rank``): a report of several ranks cut to each one's processes."""
    out = []
    for part in parts:
        if not part.several or part.of is None:
            out.append(part)
            continue
        for rank in part.ranks():
            out.append(replace(part, rank=rank, only=frozenset(part.of.processes({rank}))))
    return out


def id_totals(parts: Sequence[Part]) -> dict[str, int]:
    """Per table, one more than the largest id of the whole trace."""
    return {t: (parts[-1].ids[t] + parts[-1].spans[t]) if parts else 0 for t in EVENT_TABLES}


def _id_span(src: ReportTables, table: str, column: str) -> int:
    """One more than the largest id of a table (its rows where ids are missing)."""
    top = -1
    for chunk in src.chunks(table, [column], (None, None)):
        if chunk.num_rows and chunk.column(column).null_count < chunk.num_rows:
            top = max(top, int(pc.max(chunk.column(column)).as_py()))
    return max(top + 1, src.rows(table))


def rewritten(chunk: pa.Table, part: Part, name: str) -> pa.Table:
    """A chunk on the aligned clock, with the report's process, GPU and id numbers."""
    shifts: dict[str, int] = {"start_ns": part.offset_ns, "end_ns": part.offset_ns, "process_id": part.pid_base}
    if name == "gpu_ops":
        shifts["device_id"] = part.device_base
    shifts.update({c: part.ids[ID_BASE[c]] for c in ID_COLUMNS[name]})
    for column, by in shifts.items():
        if by and column in chunk.column_names:
            at = chunk.column_names.index(column)
            chunk = chunk.set_column(at, column, pc.add(chunk.column(column), pa.scalar(by, pa.int64())))
    return chunk


def named_threads(part: Part) -> pa.Table:
    """The report's threads with its process ids and names: ``rank R: <name> (pid P)``, R the
    process's rank (in a report of several ranks, a process that is none: ``<report>: ...``)."""
    t = part.source.table("threads")
    pid = np_col(t, "process_id", fill=-1)
    if part.only is not None:
        t, pid = t.filter(pa.array(np.isin(pid, list(part.only)))), pid[np.isin(pid, list(part.only))]
    names = t.column("process_name").to_pylist() if "process_name" in t.column_names else [None] * t.num_rows
    ranks = {p: part.rank_of(p) for p in np.unique(pid).tolist()}
    label = [
        f"{'rank ' + str(ranks[p]) if ranks[p] is not None else part.name}: {n or 'process'} (pid {p})"
        for n, p in zip(names, pid.tolist())
    ]
    cols = {
        "process_id": pa.array(pid + part.pid_base, pa.int64()),
        "thread_id": t.column("thread_id").cast(pa.int64()),
        "thread_name": t.column("thread_name").cast(pa.string()),
        "process_name": pa.array(label, pa.string()),
    }
    return pa.table(cols)


def _device_owner(part: Part, device: int) -> str:
    """Whose GPU: the report's rank, or in a report of several ranks the rank(s) that used it."""
    if not part.several or part.of is None:
        return f"rank {part.rank}"
    ranks = sorted({part.of.of[p] for p in part.of.device_users.get(device, ()) if p in part.of.of})
    return f"rank {','.join(map(str, ranks))}" if ranks else part.name


def named_devices(part: Part) -> pa.Table:
    d = part.source.table("devices")
    dev = np_col(d, "device_id", fill=-1)
    names = d.column("name").to_pylist()
    ok = dev >= 0
    label = [
        f"{_device_owner(part, i)} GPU {i}" + (f": {n}" if n else "")
        for i, n in zip(dev[ok].tolist(), np.array(names, object)[ok])
    ]
    return pa.table(
        {"device_id": pa.array(dev[ok] + part.device_base, pa.int64()), "name": pa.array(label, pa.string())}
    )


def distributed_info(kept: Sequence[Part], world_size: int) -> dict[str, object]:
    """``distributedInfo``: one rank's file says which, as torch.profiler's do; else per process."""
    ranks = sorted({r for p in kept for r in p.ranks()})
    if len(ranks) == 1:
        return {"rank": ranks[0], "world_size": world_size}
    of = {}
    for p in kept:
        for pid in sorted(p.found.kept_processes if p.found is not None else ()):
            rank = p.rank_of(pid)
            if rank is not None:
                of[str(p.pid_base + pid)] = rank
    return {"world_size": world_size, "rank_of_process": of}


def in_process_windows(chunk: pa.Table, part: Part) -> np.ndarray:
    """Rows inside their own process's window (a report of several ranks cut by steps), else all."""
    if part.process_windows is None:
        return np.ones(chunk.num_rows, bool)
    pid, start, end = np_col(chunk, "process_id", fill=-1), np_col(chunk, "start_ns"), np_col(chunk, "end_ns")
    keep = np.zeros(chunk.num_rows, bool)
    for p, (lo, hi) in part.process_windows.items():
        keep |= (pid == p) & (end >= lo) & (start <= hi)
    return keep


def write_many(parts: list[Part], root: Path, dest: Path, world_size: int) -> TraceWriter:
    """One file of the parts (their windows and plans set: nvbridge.export.trace_cuts), closed
    under its staging name: the caller publishes it (with the others of a split) or aborts it."""
    kept = [p for p in parts if p.found is not None and p.found.kept_rows]
    chosen = choose(read_collectives(root), kept)
    firsts = [p.found.origin_ns + p.offset_ns for p in kept if p.found is not None]
    origin = min([*firsts, *([] if chosen.first_ns is None else [chosen.first_ns])], default=0)
    info = distributed_info(kept, world_size)
    meta = {**(kept[0].source.meta if kept else {}), "source": f"{root.name} ({len(kept)} reports)"}
    devices = pa.concat_tables([named_devices(p) for p in kept])
    writer = TraceWriter(dest, origin_ns=origin, meta=meta, devices=devices, distributed=info)
    try:
        for part in kept:
            for name in EVENT_TABLES:
                for chunk in part.source.chunks(name, list(COLUMNS[name]), part.window):
                    keep = in_window(chunk, *part.window, part.only) & in_process_windows(chunk, part)
                    if not keep.all():
                        chunk = chunk.filter(pa.array(keep))
                    getattr(writer, name)(rewritten(chunk, part, name))
            feed_memory(writer, part.source, part.window, part.offset_ns, part.pid_base)
        totals = id_totals(parts)
        # Flow ids above the writer's: ac2g = gpu_op_id + 1, fwdbwd = gpu rows + 1 + op_id.
        drawn = draw_collectives(chosen, kept, origin, totals["gpu_ops"] + totals["ops"] + 2)
        writer.extra(drawn.lines, drawn.slices, drawn.flows)
        writer.close(pa.concat_tables([named_threads(p) for p in kept]), gpu_rows=totals["gpu_ops"])
        return writer
    except BaseException:
        writer.abort()
        raise
