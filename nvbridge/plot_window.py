"""What ``nvbridge plot`` reads of a report: its extent, then only the rows it draws.

A first pass reads the time columns of the ops, GPU ops and API calls (and the op names, for
``ProfilerStep#N`` windows), checking each part as ``dataset.load`` checks a whole table; a
second reads the drawn columns of the rows overlapping the window, skipping the row groups
whose statistics show none (``Report.chunks``). A step or a window of a report of any size is
drawn holding one row group plus the window's rows; only a whole-capture picture of a huge
report holds all of them (and would draw millions of bars).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col
from nvbridge.dataset import Report
from nvbridge.timeline import CaptureWindow, GpuBounds, in_window, step_spans

TIMED = ("ops", "gpu_ops", "api_calls")  # dataset_check's order: the first damaged table is named
DRAWN = {
    "ops": ["op_id", "process_id", "thread_id", "depth", "op_name", "start_ns", "end_ns"],
    "gpu_ops": ["device_id", "stream_id", "kind", "name", "start_ns", "end_ns"],
    "api_calls": ["process_id", "thread_id", "start_ns", "end_ns"],
}


@dataclass(frozen=True)
class Extent:
    """The report's first start and last end over ops, API calls and GPU ops (None: no rows),
    and its ``ProfilerStep#N`` ranges as (N, start_ns, end_ns) arrays."""

    first_ns: int | None
    last_ns: int | None
    steps: tuple[np.ndarray, np.ndarray, np.ndarray]
    gpus: Mapping[int, tuple[int, int]] = field(default_factory=dict)  # device -> its GPU timeline


def extent(report: Report) -> Extent:
    """The first pass: time columns only."""
    capture = CaptureWindow()  # the one timeline's capture window and GPU bounds (nvbridge.timeline)
    gpus = GpuBounds()
    spans: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for name in TIMED:
        columns = {"ops": ["op_name", "start_ns", "end_ns"], "gpu_ops": GpuBounds.COLUMNS}.get(
            name, ["start_ns", "end_ns"]
        )
        for chunk in report.chunks(name, columns):
            if name == "ops":
                spans.append(step_spans(chunk))
            elif name == "gpu_ops":
                gpus.add(chunk)
            capture = capture.add(chunk)
    steps = tuple(np.concatenate([s[i] for s in spans]) if spans else np.zeros(0, np.int64) for i in range(3))
    return Extent(capture.start_ns, capture.end_ns, (steps[0], steps[1], steps[2]), gpus.bounds)


def rows_in(report: Report, start_ns: int, end_ns: int) -> Report:
    """A report holding only the rows of ops, API calls and GPU ops overlapping [start_ns,
    end_ns] (ends included), ops in op_id order, with the drawn columns; threads, devices and
    meta as they are."""
    tables = {}
    for name in TIMED:
        parts = [
            chunk.filter(pa.array(in_window(chunk, start_ns, end_ns)))
            for chunk in report.chunks(name, DRAWN[name], (start_ns, end_ns))
        ]
        tables[name] = pa.concat_tables(parts) if parts else _empty(report, name)
    if tables["ops"].num_rows > 1:
        tables["ops"] = tables["ops"].take(pa.array(np.argsort(np_col(tables["ops"], "op_id"), kind="stable")))
    return Report(report.meta, {**tables, "threads": report.threads, "devices": report.devices})


def _empty(report: Report, name: str) -> pa.Table:
    """Table ``name`` with no rows (every row group lay outside the window)."""
    return next(iter(report.chunks(name, DRAWN[name]))).slice(0, 0)
