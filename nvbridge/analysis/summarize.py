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
from nvbridge.analysis.mfu import model_flops
from nvbridge.analysis.ranks import RankFacts, StepSpread, step_spreads
from nvbridge.analysis.streamed import report_figures
from nvbridge.analysis.summary import NO_OP, SUMMARY_COLUMNS, Grouping, KeyAverages, merge_averages
from nvbridge.dataset import is_partitioned, load, report_dirs
from nvbridge.errors import OptionError
from nvbridge.gpus import Peaks


@dataclass(frozen=True, slots=True)
class Summary:
    """Grouped op rows, a GPU header per report and device, and across reports (a
    partitioned dataset) per-rank facts and per-step spreads."""

    averages: KeyAverages
    gpus: tuple[GpuHeader, ...]
    ranks: tuple[RankFacts, ...]  # empty for one report
    steps: tuple[StepSpread, ...]
    ops: int  # ops over all reports
    open_at_end: int  # ops clamped to the capture end (never closed)
    peaks: Peaks | None = None  # the GPU's (first report's device), with the user's overrides
    flops: tuple[tuple[str, dict[str, Any]], ...] = field(default=())  # (report label, throughput.mfu)

    @property
    def several(self) -> bool:
        return bool(self.ranks)

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
    path: str | os.PathLike[str],
    *,
    group_by_input_shape: bool = False,
    group_by_stack_n: int = 0,
    group_by_module: bool = False,
    top_level_events_only: bool = False,
    device: int | None = None,
    peak_tflops: float | None = None,
    peak_gbps: float | None = None,
) -> Summary:
    """Summarize a report, a dataset or a partitioned dataset (reports merged, rows adding up).

    Raises:
        NvbridgeError: a report or dataset that cannot be read.
        OptionError: ``device`` names a GPU no report has.
    """
    sources = report_dirs(path) if is_partitioned(path) else [path]
    grouping = Grouping(group_by_input_shape, group_by_stack_n, group_by_module, top_level_events_only)
    parts, facts, gpus, flops = [], [], [], []
    peaks: Peaks | None = None
    devices: set[int] = set()
    ops = open_at_end = 0
    for source in sources:
        report = load(source, SUMMARY_COLUMNS, in_order=False, streamed=True)
        figures = report_figures(report, grouping, device)
        parts.append(figures.averages)
        header = figures.gpus
        if len(sources) > 1:
            facts.append(
                RankFacts(
                    report.rank,
                    report.meta.get("source"),
                    figures.ops,
                    sum(d.kernels for d in header),
                    {d.device_id: d.busy_ns for d in header},
                    figures.steps,
                )
            )
        gpus += header
        # FLOPs figures (nvbridge.analysis.throughput): the peaks, then MFU per step of this report.
        peaks = peaks or figures.peaks(report.devices, device, peak_tflops, peak_gbps)
        flops.append(
            (
                facts[-1].label if len(sources) > 1 else "",
                model_flops(report, peaks, figures.gpus_used, sum(d.span_ns for d in header)),
            )
        )
        devices.update(d.device_id for d in header)
        ops += figures.ops
        open_at_end += figures.open_at_end
        del report
    if device is not None and device not in devices:
        have = f"GPUs {', '.join(map(str, sorted(devices)))}" if devices else "no GPU ops"
        raise OptionError(f"there is no GPU {device} in {os.fspath(path)}: it has {have}")
    averages = parts[0] if len(parts) == 1 else merge_averages(parts)
    return Summary(
        averages, tuple(gpus), tuple(facts), tuple(step_spreads(facts)), ops, open_at_end, peaks, tuple(flops)
    )
