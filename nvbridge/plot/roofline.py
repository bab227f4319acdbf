"""The roofline picture: each op (name and input shapes) as a point at its arithmetic intensity
and achieved TFLOP/s, sized by its GPU time, under the GPU's compute and bandwidth roofs.

Points are grouped like ``summary --group-by shape`` rows: FLOPs, bytes and total GPU time
summed over the calls with a known cost (docs/flops.md has the formulas).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from nvbridge.analysis import throughput
from nvbridge.analysis.averages import key_averages
from nvbridge.analysis.op_table import Grouping, add_up, finish
from nvbridge.analysis.streamed import PENDING_PARTS
from nvbridge.analysis.throughput import peaks_of
from nvbridge.columns import np_col
from nvbridge.dataset.report import DatasetTables
from nvbridge.engine.costs.flops import precision
from nvbridge.errors import ExportError
from nvbridge.gpu.peaks import Peaks, fmt
from nvbridge.output.owned import picture_metadata

COSTS = ["flops", "bytes", "compute_dtype"]  # the ops' cost columns a point sums
# Roofs drawn when the report's ops use these precisions (and the GPU has a peak for them).
_ROOF_STYLE = {"fp32": "-", "tf32": "-.", "bf16": "--", "fp16": "--", "fp8": ":"}


def points(ops: pa.Table, gpu_ops: pa.Table, peaks: Peaks | None) -> pa.Table:
    """Rows of (name, input shapes) with a known cost and GPU time, with their rates."""
    _require_costs(ops.column_names)
    return _kept(throughput.rates(ops_rows(ops, gpu_ops), peaks))


def _require_costs(columns: list[str]) -> None:
    if "flops" not in columns:
        raise ExportError(
            "this dataset has no flops column; convert the report again with this nvbridge to draw its roofline."
        )


def _kept(rows: pa.Table) -> pa.Table:
    """Rows with an arithmetic intensity and achieved TFLOP/s above 0."""
    keep = np.asarray(rows.column("intensity").is_valid().to_numpy(zero_copy_only=False))
    keep &= (
        np.nan_to_num(np.asarray(rows.column("achieved_tflops").to_numpy(zero_copy_only=False), dtype=np.float64)) > 0
    )
    return rows.filter(pa.array(keep))


def ops_rows(ops: pa.Table, gpu_ops: pa.Table) -> pa.Table:
    """key_averages rows by name and input shapes (ops of known cost only)."""
    known = ops.filter(ops.column("flops").is_valid())
    return key_averages(known, gpu_ops, group_by_input_shape=True).rows


def streamed_points(
    report: DatasetTables, peak_tflops: float | None = None, peak_gbps: float | None = None
) -> tuple[pa.Table, Peaks | None]:
    """:func:`points` and the peaks (the GPU that ran the most GPU ops, with the user's
    overrides) of a report read a part at a time (``DatasetTables.chunks``): memory holds a row group
    and the groups, whatever the report's size.

    Raises:
        ExportError: the dataset has no cost columns.
    """
    _require_costs(report.column_names("ops"))
    grouping = Grouping(input_shape=True)
    columns = [*grouping.columns, *COSTS, "self_gpu_ns", "total_gpu_ns", "start_ns", "end_ns"]
    parts = []
    for chunk in report.chunks("ops", columns):
        known = chunk.filter(chunk.column("flops").is_valid())
        parts.append(grouping.aggregate(known, np_col(known, "self_gpu_ns"), np_col(known, "total_gpu_ns")))
        if len(parts) > PENDING_PARTS:
            parts = [add_up(parts, list(grouping.keys))]
    by_device = np.zeros(0, np.int64)
    for chunk in report.chunks("gpu_ops", ["device_id", "start_ns", "end_ns"]):
        ids = np_col(chunk, "device_id", fill=-1)
        counts = np.bincount(ids[ids >= 0])
        by_device = np.pad(by_device, (0, max(0, len(counts) - len(by_device))))
        by_device[: len(counts)] += counts
    for _ in report.chunks("api_calls", ["start_ns", "end_ns"]):
        pass  # read for the check only: no API call ends before it starts
    peaks = peaks_of(report.devices, by_device.tolist(), None, peak_tflops, peak_gbps)
    return _kept(throughput.rates(finish(parts, grouping, 0, 0).rows, peaks)), peaks


def render(report: Any, output: Path, peaks: Peaks | None, label_top: int = 8) -> int:
    """Draw the roofline of ``report`` into ``output`` (.png, .svg, .pdf); returns the points drawn.

    Raises:
        ExportError: no op has both a known cost and GPU time, or the output cannot be written.
    """
    return draw(points(report.ops, report.gpu_ops, peaks), output, peaks, label_top)


def _roofs(ax: Any, rows: pa.Table, peaks: Peaks, grid: np.ndarray) -> None:
    """One roof per precision the points run at, named for the rate the GPU runs it at (a
    float32 convolution on Turing, which has no TF32, is under the fp32 roof); the bandwidth
    slope alone where no compute peak is known."""
    used = {
        precision(str(n), d) for n, d in zip(rows.column("name").to_pylist(), rows.column("compute_dtype").to_pylist())
    }
    roofs: dict[str, float] = {}
    for wanted in sorted(used, key=lambda p: list(_ROOF_STYLE).index(p) if p in _ROOF_STYLE else len(_ROOF_STYLE)):
        kind, peak = peaks.effective(wanted)
        if peak:
            roofs[kind] = peak
    bandwidth = f", {peaks.gbps:.0f} GB/s" if peaks.gbps else " (bandwidth unknown)"
    for kind, peak in roofs.items():
        slope = grid * peaks.gbps / 1e3 if peaks.gbps else np.full(len(grid), np.inf)
        style = _ROOF_STYLE.get(kind, "-")
        ax.plot(
            grid, np.minimum(peak, slope), style, color="black", label=f"{kind} roof: {fmt(peak)} TFLOP/s{bandwidth}"
        )
    if not roofs and peaks.gbps:
        ax.plot(grid, grid * peaks.gbps / 1e3, "-", color="black", label=f"memory roof: {peaks.gbps:.0f} GB/s")


def draw(rows: pa.Table, output: Path, peaks: Peaks | None, label_top: int = 8) -> int:
    """Draw :func:`points` rows into ``output``; returns the points drawn.

    Raises:
        ExportError: no rows, or the output cannot be written.
    """
    import matplotlib.pyplot as plt

    fig = figure(rows, peaks, label_top)
    try:
        fig.savefig(output, bbox_inches="tight", metadata=picture_metadata(Path(output).suffix[1:]))
    except OSError as exc:
        raise ExportError(f"cannot write {output}: {exc.strerror or exc}; choose another output path.") from exc
    finally:
        plt.close(fig)
    return int(rows.num_rows)


def figure(rows: pa.Table, peaks: Peaks | None, label_top: int = 8) -> Any:
    """The roofline of :func:`points` rows as a matplotlib Figure (the caller closes it): the
    points, a roof per precision they run at where the peaks are known, and a legend.

    Raises:
        ExportError: no rows.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows.num_rows:
        raise ExportError(
            "no op has both a known FLOP count and GPU time; record shapes "
            "(emit_nvtx(record_shapes=True)) and GPU kernels to draw a roofline."
        )
    x = np.asarray(rows.column("intensity").to_numpy(zero_copy_only=False), dtype=np.float64)
    y = np.asarray(rows.column("achieved_tflops").to_numpy(zero_copy_only=False), dtype=np.float64)
    t = np.asarray(rows.column("gpu_total_ns").to_numpy(zero_copy_only=False), dtype=np.float64)
    bound = rows.column("bound").to_pylist()
    fig, ax = plt.subplots(figsize=(10, 6.5), dpi=110)
    sizes = 20 + 800 * t / t.max()
    colors = ["tab:red" if b == "compute" else "tab:blue" if b == "memory" else "tab:gray" for b in bound]
    ax.scatter(x, y, s=sizes, c=colors, alpha=0.55, edgecolors="black", linewidths=0.4)
    lo, hi = max(x.min() / 4, 1e-3), x.max() * 4
    if peaks is not None:
        _roofs(ax, rows, peaks, np.logspace(np.log10(lo), np.log10(hi), 200))
    for color, label in (("tab:red", "compute-bound"), ("tab:blue", "memory-bound"), ("tab:gray", "bound unknown")):
        if color in colors:  # proxies: the points' legend entries
            ax.scatter([], [], s=40, c=color, alpha=0.55, edgecolors="black", linewidths=0.4, label=f"op: {label}")
    ax.legend(loc="lower right", fontsize=8)
    names = rows.column("name").to_pylist()
    for i in np.argsort(-t)[:label_top]:
        ax.annotate(str(names[i])[:40], (x[i], y[i]), fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved TFLOP/s")
    gpu = peaks.name if peaks is not None else "unknown peak: no roof (give --peak-tflops and --peak-gbps)"
    ax.set_title(f"Roofline: {rows.num_rows} ops (name, shapes), size = GPU time; {gpu}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    return fig
