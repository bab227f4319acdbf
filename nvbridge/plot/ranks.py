"""The figures of ``nvbridge plot`` on a dataset of many reports: per ProfilerStep and rank, the
step's time split into compute, communication, copies and idle, and the straggler of each step.

Each rank's step N runs from the first start to the last end of its ``ProfilerStep#N`` ranges (a
report of several processes: over them all; a report whose processes marked several ranks, one
nsys session per node or over the launcher: each process its own, nvbridge.dataset.process_ranks).
Inside it, time is given to one category, in order, as advise's time categories do
(nvbridge.analysis.dominant):

- ``compute``: a GPU op computing (a kernel but NCCL's, a memset, a graph launch);
- ``communication``: an NCCL kernel, and no compute; on a rank without GPU work (gloo), the
  rank's collectives (``arrival_ns`` to ``end_ns`` in the dataset's ``collectives`` table), or
  else its ``c10d::``/``gloo:``/``nccl:`` ranges;
- ``copies``: a memcpy, and neither of the above; on a rank without GPU work, ``compute`` is its
  ranges (but ProfilerStep's) and no communication;
- ``idle``: the rest. The four add up to the step's length exactly.

Each category is the union of its intervals (overlapping streams count once), cut to each step
(:func:`nvbridge.analysis.spans.clip_per_window`), read a row group at a time.

The straggler of a step: the rank the others waited for most in the step's collectives
(:func:`summary_stragglers`: nvbridge.analysis.stragglers, what ``summary``'s ``ranks.steps``
names) where the dataset has matched collectives in it, else the rank whose step is longest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.analysis import spans
from nvbridge.analysis.stragglers import OpTimes
from nvbridge.analysis.stragglers import stragglers as stragglers_of
from nvbridge.columns import np_col
from nvbridge.dataset.collectives_read import read_collectives, root_meta
from nvbridge.dataset.process_ranks import dataset_ranks
from nvbridge.dataset.report import DatasetTables, load
from nvbridge.dataset.timeline import step_spans

CATEGORIES = ("compute", "communication", "copies", "idle")
COMM_PREFIXES = ("c10d::", "gloo:", "nccl:", "record_param_comms")


@dataclass
class RankSteps:
    """One rank's steps: numbers, windows (its own clock) and ns per category per step."""

    rank: int
    report: str
    steps: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    ns: dict[str, np.ndarray] = field(default_factory=dict)
    process: int | None = None  # the rank's process, in a report of several ranks (None: the whole report)

    def of(self, step: int) -> dict[str, int] | None:
        """Category -> ns of step ``step`` (None: the rank did not run it)."""
        at = np.flatnonzero(self.steps == step)
        return None if not len(at) else {c: int(self.ns[c][at[0]]) for c in CATEGORIES}

    def length(self, step: int) -> int | None:
        at = np.flatnonzero(self.steps == step)
        return None if not len(at) else int(self.end_ns[at[0]] - self.start_ns[at[0]])


def _chunks(report: DatasetTables, table: str, columns: list[str], process: int | None) -> Iterator[pa.Table]:
    """The table a row group at a time, only ``process``'s rows where given."""
    for chunk in report.chunks(table, [*columns, "process_id"] if process is not None else columns):
        yield chunk if process is None else chunk.filter(pa.array(np_col(chunk, "process_id", fill=-1) == process))


def _windows(report: DatasetTables, process: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N, start, end) per step, over the report's processes (or one), in start order."""
    parts = [step_spans(c) for c in _chunks(report, "ops", ["op_name", "start_ns", "end_ns"], process)]
    n, s, e = (np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, np.int64) for i in range(3))
    steps = np.unique(n)
    lo = np.array([s[n == k].min() for k in steps], np.int64)
    hi = np.array([e[n == k].max() for k in steps], np.int64)
    order = np.argsort(lo, kind="stable")
    return steps[order], lo[order], hi[order]


def _gpu_sets(report: DatasetTables, process: int | None) -> dict[str, spans.Spans]:
    """The union of each GPU category's intervals."""
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {c: [] for c in CATEGORIES[:3]}
    for chunk in _chunks(report, "gpu_ops", ["kind", "name", "start_ns", "end_ns"], process):
        kind = pc.cast(chunk.column("kind"), pa.string())
        nccl = np.asarray(
            pc.fill_null(pc.match_substring(pc.utf8_lower(pc.cast(chunk.column("name"), pa.string())), "nccl"), False)
        )
        copy = np.asarray(pc.fill_null(pc.equal(kind, "memcpy"), False))
        s, e = np_col(chunk, "start_ns"), np_col(chunk, "end_ns")
        for c, m in (("compute", ~copy & ~nccl), ("communication", nccl & ~copy), ("copies", copy)):
            parts[c].append((s[m], e[m]))
    return {c: spans.union(*(np.concatenate(x) for x in zip(*p))) if p else spans.empty() for c, p in parts.items()}


def _host_sets(
    report: DatasetTables, collectives: tuple[np.ndarray, np.ndarray] | None, process: int | None
) -> dict[str, spans.Spans]:
    """A rank without GPU work: its ranges compute, its collectives (or comm ranges) communicate."""
    work, comm = [], []
    for chunk in _chunks(report, "ops", ["op_name", "start_ns", "end_ns"], process):
        name = pc.fill_null(pc.cast(chunk.column("op_name"), pa.string()), "")
        step = np.asarray(pc.starts_with(name, "ProfilerStep#"))
        is_comm = np.zeros(chunk.num_rows, bool)
        for prefix in COMM_PREFIXES:
            is_comm |= np.asarray(pc.starts_with(name, prefix))
        s, e = np_col(chunk, "start_ns"), np_col(chunk, "end_ns")
        work.append((s[~step & ~is_comm], e[~step & ~is_comm]))
        comm.append((s[is_comm], e[is_comm]))
    c = collectives if collectives is not None else tuple(np.concatenate(x) for x in zip(*comm)) if comm else None
    both = spans.union(*(np.concatenate(x) for x in zip(*work))) if work else spans.empty()
    communication = spans.union(*c) if c is not None else spans.empty()
    # a collective is communication though the ranges around it (the training loop's) hold it
    return {"compute": spans.minus(both, communication), "communication": communication, "copies": spans.empty()}


def rank_steps(
    report: DatasetTables,
    rank: int,
    name: str,
    collectives: tuple[np.ndarray, np.ndarray] | None,
    process: int | None = None,
) -> RankSteps:
    """The figures of one rank's report, or of its process ``process`` (``collectives``: its
    (arrival, end) on its own clock)."""
    n, lo, hi = _windows(report, process)
    sets = _gpu_sets(report, process) if report.rows("gpu_ops") else _host_sets(report, collectives, process)
    compute = sets["compute"]
    comm = spans.minus(sets["communication"], compute)
    copies = spans.minus(spans.minus(sets["copies"], compute), comm)
    out = RankSteps(rank, name, n, lo, hi, process=process)
    for c, s in (("compute", compute), ("communication", comm), ("copies", copies)):
        out.ns[c] = spans.clip_per_window(s, lo, hi) if len(n) else np.zeros(0, np.int64)
    out.ns["idle"] = (hi - lo) - out.ns["compute"] - out.ns["communication"] - out.ns["copies"]
    return out


def dataset_steps(root: Path) -> list[RankSteps]:
    """Every rank's figures, in rank order (nvbridge.dataset.process_ranks: a report's rank,
    recorded, else its position; in a report whose processes marked several ranks, each one's)."""
    table = _collectives(root)
    out = []
    for rep in dataset_ranks(root):
        report = load(rep.directory, streamed=True)
        if not rep.several:
            out.append(rank_steps(report, rep.rank, rep.name, _own(table, rep.name, rep.rank, root)))
            continue
        for pid, rank in sorted(rep.of.items(), key=lambda kv: kv[1]):
            out.append(rank_steps(report, rank, rep.name, _own(table, rep.name, rank, root, pid), pid))
    return sorted(out, key=lambda f: f.rank) if any(f.process is not None for f in out) else out


def _collectives(root: Path) -> pa.Table | None:
    table = read_collectives(root)
    if table is None:
        return None
    wanted = ("report", "rank", "process_id", "arrival_ns", "end_ns")
    return table.select([c for c in wanted if c in table.column_names])


def _own(
    table: pa.Table | None, name: str, rank: int, root: Path, process: int | None = None
) -> tuple[np.ndarray, np.ndarray] | None:
    """This rank's collectives (its report's; of a report of several ranks, its process's), back
    on its report's own clock (the table's are aligned)."""
    if table is None:
        return None
    mine = np.asarray(pc.fill_null(pc.equal(table.column("report"), name), False))
    if process is not None and "process_id" in table.column_names:
        mine &= np_col(table, "process_id", fill=-1) == process
    if not mine.any():
        mine = np_col(table, "rank", fill=-1) == rank
    if not mine.any():
        return None
    offset = int(root_meta(root).get(f"clock.{name}.offset_ns") or 0)
    t = table.filter(pa.array(mine))
    return np_col(t, "arrival_ns") - offset, np_col(t, "end_ns") - offset


def summary_stragglers(root: Path, figures: list[RankSteps]) -> dict[int, int]:
    """Step -> the rank the others waited for most (nvbridge.analysis.stragglers, the summary's
    ``ranks.steps[].slowest_rank``), by report (and process, in a report of several ranks),
    where the dataset has matched collectives."""
    table = read_collectives(root)
    if table is None or not table.num_rows:
        return {}
    procs = table.column("process_id").to_pylist() if "process_id" in table.column_names else [None] * table.num_rows
    where = dict(zip(table.column("rank").to_pylist(), zip(table.column("report").to_pylist(), procs)))
    mine = {(f.report, f.process): f.rank for f in figures}
    found = {}
    for s in stragglers_of(table, OpTimes()):
        report, process = where.get(s.slowest_rank, (None, None))
        found[s.step] = mine.get((str(report), process), mine.get((str(report), None)))
    return {step: rank for step, rank in found.items() if rank is not None}


def longest_step(figures: list[RankSteps], step: int) -> int | None:
    """The rank whose step ``step`` is longest (ties: the lowest rank); None if no rank ran it."""
    lengths = [(f.length(step), -f.rank) for f in figures if f.length(step) is not None]
    return -max(lengths)[1] if lengths else None


def stragglers(
    figures: list[RankSteps], named: Mapping[int, int] | None = None, fallback: Callable[..., int | None] = longest_step
) -> dict[int, int]:
    """Step -> straggler rank: ``named`` (the cross-rank summary's slowest rank per step) where it
    names one, else ``fallback`` (the longest step)."""
    steps = sorted(set().union(*(f.steps.tolist() for f in figures))) if figures else []
    out = {}
    for n in steps:
        rank = (named or {}).get(n)
        rank = rank if rank is not None else fallback(figures, n)
        if rank is not None:
            out[int(n)] = int(rank)
    return out
