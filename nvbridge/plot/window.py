"""What ``nvbridge plot`` reads of a report first: its extent.

A first pass reads the time columns of the ops, GPU ops and API calls (and the op names, for
``ProfilerStep#N`` windows), checking each part as ``dataset.load`` checks a whole table; a
second (``plot_pixels.decimate``) reads the drawn columns of the rows overlapping the window,
skipping the row groups whose statistics show none (``DatasetTables.chunks``), and reduces them to the
pixel columns a row group at a time: a picture of a report of any size, whole capture
included, holds one row group plus a count per row and pixel column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from nvbridge.dataset.report import DatasetTables
from nvbridge.dataset.timeline import CaptureWindow, GpuBounds, step_spans

TIMED = ("ops", "gpu_ops", "api_calls")  # dataset_check's order: the first damaged table is named


@dataclass(frozen=True)
class Extent:
    """The report's first start and last end over ops, API calls and GPU ops (None: no rows),
    and its ``ProfilerStep#N`` ranges as (N, start_ns, end_ns) arrays."""

    first_ns: int | None
    last_ns: int | None
    steps: tuple[np.ndarray, np.ndarray, np.ndarray]
    gpus: Mapping[int, tuple[int, int]] = field(default_factory=dict)  # device -> its GPU timeline


def extent(report: DatasetTables) -> Extent:
    """The first pass: time columns only."""
    capture = CaptureWindow()  # the one timeline's capture window and GPU bounds (nvbridge.dataset.timeline)
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
