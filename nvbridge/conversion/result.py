"""What a conversion read and wrote: the figures of the summary ``nvbridge convert`` prints."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col
from nvbridge.output.names import plural
from nvbridge.readers.nsys_rank_marks import rank_facts
from nvbridge.readers.raw import SourceInfo


@dataclass(frozen=True, slots=True)
class ConversionResult:
    """What one conversion read and wrote, with the figures the CLI summary prints."""

    info: SourceInfo
    output: Path
    rows_read: int
    ops: int
    threads: int
    processes: int
    api_calls: int
    api_calls_outside_ranges: int
    kernels: int
    memcpys: int
    memsets: int
    graph_launches: int  # whole CUDA graphs traced as one GPU op each (nsys --cuda-graph-trace=graph)
    gpu_ops_without_api_call: int
    gpu_ops_unattributed: int
    gpu_ns_total: int
    gpu_ns_unattributed: int
    seconds: float
    traces: tuple[Path, ...] = ()  # convert --chrome: the trace files written (one per rank, or one)

    def describe(self, source: str | None = None) -> str:
        """The one-paragraph summary ``nvbridge convert`` prints; ``source`` names what was read
        where it was not the file itself (``nvbridge profile``'s recording)."""
        share = 100.0 * self.gpu_ns_unattributed / self.gpu_ns_total if self.gpu_ns_total else 0.0
        gpu_ops = self.kernels + self.memcpys + self.memsets + self.graph_launches
        # a graph launch is one GPU op whose kernels are not listed: name them, or the GPU-op
        # count below would not add up to the kernels, copies and sets above
        n = self.graph_launches
        graphs = f", {n:,} CUDA graph launch{'' if n == 1 else 'es'} (each one GPU op)"
        return (
            f"Read {source or self.info.source}: {self.info.describe()}, {plural(self.rows_read, 'row')} in "
            f"{self.seconds:.2f} s. {plural(self.ops, 'op')} (NVTX ranges) on {plural(self.threads, 'thread')} in "
            f"{plural(self.processes, 'process')}; {plural(self.api_calls, 'CUDA API call')} "
            f"({self.api_calls_outside_ranges:,} outside any range); {plural(self.kernels, 'kernel')}, "
            f"{plural(self.memcpys, 'memcpy')}, {plural(self.memsets, 'memset')}"
            f"{graphs if self.graph_launches else ''}. "
            f"{self.gpu_ops_unattributed:,} of the {plural(gpu_ops, 'GPU op')} ({share:.1f}% of GPU time) "
            f"{'is' if self.gpu_ops_unattributed == 1 else 'are'} attributed to no op, "
            f"{self.gpu_ops_without_api_call:,} of them because their launching API call is not in the capture. "
            f"Wrote {self.output}." + self._traces_note() + self._empty_note()
        )

    def _traces_note(self) -> str:
        """Traces per rank are named after the one asked for: say which."""
        if len(self.traces) < 2:
            return ""
        return f" One trace per rank: {', '.join(p.name for p in self.traces)}."

    def _empty_note(self) -> str:
        """A capture with nothing in it: say so, with what the profiler itself said about it."""
        if self.ops or self.api_calls or self.kernels or self.memcpys or self.memsets or self.graph_launches:
            return ""
        note = (
            " Nothing was recorded: no NVTX ranges and no CUDA activity (profile with nsys --trace=cuda,nvtx "
            "and annotate with nvbridge.emit_nvtx())."
        )
        if self.info.diagnostics:
            note += " The profiler reported: " + " ".join(
                line.rstrip(".") + "." for line in self.info.diagnostics.splitlines()
            )
        return note


def rank_from_name(source: str) -> int | None:
    """A rank spelled in a report's file name: ``rank3``, ``rank_3``, ``rank-3``, ``RANK3``."""
    m = re.search(r"(?:^|[^a-z])rank[_-]?(\d+)", Path(source).stem, re.IGNORECASE)
    return int(m.group(1)) if m else None


def with_rank(info: SourceInfo, source: str | os.PathLike[str]) -> SourceInfo:
    """``info`` with the rank of the file name where the capture recorded none."""
    if info.rank is None and (rank := rank_from_name(str(source))) is not None:
        return dataclasses.replace(info, rank=rank)
    return info


def with_marked_ranks(info: SourceInfo, marks: pa.Table | None) -> SourceInfo:
    """``info`` with what emit_nvtx's rank marks say (nvbridge.readers.nsys_rank_marks): each
    process's rank, the world size, and where one process marked, the report's rank (before the
    recorded RANK and the file name's)."""
    rank, world, processes = rank_facts(marks) if marks is not None else (None, None, None)
    if processes is None:
        return info
    return dataclasses.replace(
        info, rank=rank if rank is not None else info.rank, world_size=world, process_ranks=processes
    )


class OpsTally:
    """What the summary needs of the ops, counted as they are written."""

    def __init__(self) -> None:
        self.rows = 0
        self.threads: set[int] = set()

    def add(self, ops: pa.Table) -> None:
        self.rows += ops.num_rows
        keys = (np_col(ops, "process_id") << 32) | np_col(ops, "thread_id", fill=0)
        self.threads.update(np.unique(keys).tolist())


@dataclass(frozen=True, slots=True)
class Tallies:
    """A finished conversion's figures, before timing: what :func:`result` turns into a result."""

    info: SourceInfo
    ops: OpsTally
    api_calls: int
    api_calls_outside_ranges: int
    gpu: dict[str, int]
    rows_read: int

    def result(self, output: Path, seconds: float) -> ConversionResult:
        return ConversionResult(
            info=self.info,
            output=output,
            rows_read=self.rows_read,
            ops=self.ops.rows,
            threads=len(self.ops.threads),
            processes=len({key >> 32 for key in self.ops.threads}),
            api_calls=self.api_calls,
            api_calls_outside_ranges=self.api_calls_outside_ranges,
            seconds=seconds,
            kernels=self.gpu["kernels"],
            memcpys=self.gpu["memcpys"],
            memsets=self.gpu["memsets"],
            graph_launches=self.gpu["graph_launches"],
            gpu_ops_without_api_call=self.gpu["gpu_ops_without_api_call"],
            gpu_ops_unattributed=self.gpu["gpu_ops_unattributed"],
            gpu_ns_total=self.gpu["gpu_ns_total"],
            gpu_ns_unattributed=self.gpu["gpu_ns_unattributed"],
        )
