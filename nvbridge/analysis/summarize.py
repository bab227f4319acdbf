"""``summarize``: what ``nvbridge summary`` prints, as values (the CLI only formats them).

A partitioned dataset is read one report at a time, and each report a row group at a time
(nvbridge.analysis.streamed): memory holds a row group and the per-report aggregates, however
many rows and ranks the run had.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from nvbridge.analysis.gpu import GpuHeader
from nvbridge.analysis.launches import Launches, merge_launches
from nvbridge.analysis.mfu import model_flops
from nvbridge.analysis.op_table import NO_OP, SUMMARY_COLUMNS, Grouping, KeyAverages, merge_averages
from nvbridge.analysis.rank_comm import AcrossRanks, across_ranks
from nvbridge.analysis.ranks import RankFacts, StepSpread, step_spreads
from nvbridge.analysis.streamed import ReportFigures, report_figures
from nvbridge.conversion.memory import load_tables
from nvbridge.dataset.report import DatasetTables, is_partitioned, report_dirs
from nvbridge.errors import OptionError
from nvbridge.gpu.peaks import Peaks
from nvbridge.output import rich


@dataclass(frozen=True, slots=True)
class Summary:
    """Grouped op rows, a GPU header per report and device, and across ranks (a partitioned
    dataset, or a report of several processes: nvbridge.dataset.ranks) per-rank facts and
    per-step spreads."""

    averages: KeyAverages
    gpus: tuple[GpuHeader, ...]
    ranks: tuple[RankFacts, ...]  # empty for one rank
    steps: tuple[StepSpread, ...]
    ops: int  # ops over all reports
    open_at_end: int  # ops clamped to the capture end (never closed)
    peaks: Peaks | None = None  # the GPU's (first report's device), with the user's overrides
    flops: tuple[tuple[str, dict[str, Any]], ...] = field(default=())  # (rank label, mfu.model_flops)
    launches: Launches = field(default_factory=Launches)  # who launched the [no op] row's GPU time
    across: AcrossRanks | None = None  # stragglers, exposed communication, clocks (several ranks)

    @property
    def several(self) -> bool:
        return bool(self.ranks)

    def _repr_html_(self) -> str | None:
        """The op table and GPU time by module, inline in a notebook (drawn by nvbridge/page/notebook.py)."""
        return rich.html("summary", self)

    def notes(self) -> list[str]:
        """What a reader of the table should know: why it is empty, which totals are inflated."""
        out = []
        if self.ops == 0:
            gpu = f", and all its GPU time is the row {NO_OP}" if self.averages.self_gpu_total_ns else ""
            out.append(
                f"the report has no NVTX ranges, so no op rows{gpu}; record with nvbridge.emit_nvtx() "
                "(or nsys --trace=nvtx) to see ops."
            )
        if self.open_at_end:
            out.append(
                f"{self.open_at_end:,} ranges were still open at the capture end and are cut there "
                "(ops.flags OPEN_AT_END): their CPU totals run to the end of the capture."
            )
        return out


def summarize(
    path: str | os.PathLike[str] | DatasetTables,
    *,
    group_by_input_shape: bool = False,
    group_by_stack_n: int = 0,
    group_by_module: bool = False,
    top_level_events_only: bool = False,
    device: int | None = None,
    peak_tflops: float | None = None,
    peak_gbps: float | None = None,
    rank: int | None = None,
) -> Summary:
    """Summarize a report, a dataset or a partitioned dataset (reports merged, rows adding up),
    or a :class:`nvbridge.Report` already loaded.

    ``device`` and ``rank`` keep the processes that ran GPU work on that GPU / are that rank
    (nvbridge.dataset.ranks) in every figure: ops, CPU and GPU times, the header, MFU.

    Raises:
        NvbridgeError: a report or dataset that cannot be read.
        OptionError: ``device`` names a GPU no report has, ``rank`` a rank none has.
    """
    sources: list[str | os.PathLike[str] | DatasetTables] = (
        [path] if isinstance(path, DatasetTables) else list(report_dirs(path)) if is_partitioned(path) else [path]
    )
    grouping = Grouping(group_by_input_shape, group_by_stack_n, group_by_module, top_level_events_only)
    parts, facts, gpus, flops = [], [], [], []
    peaks: Peaks | None = None
    devices: set[int] = set()
    ranks: set[int] = set()
    ops = open_at_end = 0
    launches: list[Launches] = []
    one: DatasetTables | None = None
    for source in sources:
        report = (
            source
            if isinstance(source, DatasetTables)
            else load_tables(source, SUMMARY_COLUMNS, in_order=False, streamed=True)
        )
        figures = report_figures(report, grouping, device, rank)
        devices.update(figures.ranks.device_users)
        ranks.update(figures.ranks.numbers())
        if figures.processes is not None and not figures.processes:
            continue  # the filter keeps nothing of this report
        parts.append(figures.averages)
        gpus += figures.gpus
        peaks = peaks or figures.peaks(report.devices, device, peak_tflops, peak_gbps)
        mine = _rank_facts(report, figures, several_reports=len(sources) > 1)
        facts += mine
        # FLOPs figures (nvbridge.analysis.throughput): MFU per step of each rank, of its processes
        for fact in mine:
            lanes = fact.lanes if fact.process_id is not None and figures.by_process else tuple(figures.gpus)
            keep = {fact.process_id} if fact.process_id is not None and figures.by_process else figures.processes
            figure = model_flops(report, peaks, max(len(lanes), 1), sum(d.span_ns for d in lanes), keep)
            flops.append((fact.label, figure))
        ops += figures.ops
        open_at_end += figures.open_at_end
        launches.append(figures.launches)
        one = report if len(sources) == 1 else None  # its ranks are matched below
        del report
    _check_filter(path, device, rank, devices, ranks, parts)
    averages = parts[0] if len(parts) == 1 else merge_averages(parts)
    if len(facts) <= 1:
        facts, flops = [], [("", f) for _, f in flops]
    return Summary(
        averages,
        tuple(gpus),
        tuple(facts),
        tuple(step_spreads(facts)),
        ops,
        open_at_end,
        peaks,
        tuple(flops),
        merge_launches(launches),
        (across_ranks(one) if one is not None else across_ranks(path)) if facts else None,
    )


def _rank_facts(report: DatasetTables, figures: ReportFigures, several_reports: bool) -> list[RankFacts]:
    """One report's ranks: each of several (the kept ones), or the report as one rank."""
    source = report.meta.get("source")
    if not figures.by_process:  # a report of one rank (or the one rank a filter kept)
        busy = {d.device_id: d.busy_ns for d in figures.gpus}
        return [RankFacts(report.rank, source, figures.ops, sum(d.kernels for d in figures.gpus), busy, figures.steps)]
    out = []
    for p in figures.by_process.values():
        name = f"{source} rank {p.rank}" if several_reports else None
        busy = {lane.device_id: lane.busy_ns for lane in p.lanes}
        out.append(
            RankFacts(
                p.rank,
                source,
                p.ops,
                p.kernels,
                busy,
                p.steps,
                p.process_id,
                p.self_cpu_ns,
                p.self_gpu_ns,
                p.lanes,
                name,
            )
        )
    return out


def _check_filter(
    path: str | os.PathLike[str] | DatasetTables,
    device: int | None,
    rank: int | None,
    devices: set[int],
    ranks: set[int],
    parts: list[KeyAverages],
) -> None:
    """A filter that kept nothing names what the input has."""
    where = str(path.meta.get("source")) if isinstance(path, DatasetTables) else os.fspath(path)
    if device is not None and device not in devices:
        have = f"GPUs {', '.join(map(str, sorted(devices)))}" if devices else "no GPU ops"
        raise OptionError(f"there is no GPU {device} in {where}: it has {have}")
    if rank is not None and rank not in ranks:
        have = f"ranks {', '.join(map(str, sorted(ranks)))}" if ranks else "no ranks"
        raise OptionError(f"there is no rank {rank} in {where}: it has {have}")
    if not parts:
        raise OptionError(f"rank {rank} ran no GPU work on GPU {device} in {where}; drop --device or --rank")
