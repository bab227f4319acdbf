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
from nvbridge.errors import ExportError
from nvbridge.flops import precision
from nvbridge.gpus import Peaks

# Roofs drawn when the report's ops use these precisions (and the GPU has a peak for them).
_ROOF_STYLE = {"fp32": "-", "tf32": "-.", "bf16": "--", "fp16": "--", "fp8": ":"}


def points(ops: pa.Table, gpu_ops: pa.Table, peaks: Peaks | None) -> pa.Table:
    """Rows of (name, input shapes) with a known cost and GPU time, with their rates."""
    if "flops" not in ops.column_names:
        raise ExportError(
            "this dataset has no flops column; convert the report again with this nvbridge to draw its roofline."
        )
    rows = throughput.rates(ops_rows(ops, gpu_ops), peaks)
    keep = np.asarray(rows.column("intensity").is_valid().to_numpy(zero_copy_only=False))
    keep &= (
        np.nan_to_num(np.asarray(rows.column("achieved_tflops").to_numpy(zero_copy_only=False), dtype=np.float64)) > 0
    )
    return rows.filter(pa.array(keep))


def ops_rows(ops: pa.Table, gpu_ops: pa.Table) -> pa.Table:
    """key_averages rows by name and input shapes (ops of known cost only)."""
    from nvbridge.analysis import key_averages

    known = ops.filter(ops.column("flops").is_valid())
    return key_averages(known, gpu_ops, group_by_input_shape=True).rows


def render(report: Any, output: Path, peaks: Peaks | None, label_top: int = 8) -> int:
    """Draw the roofline of ``report`` into ``output`` (.png, .svg, .pdf); returns the points drawn.

    Raises:
        ExportError: no op has both a known cost and GPU time, or the output cannot be written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = points(report.ops, report.gpu_ops, peaks)
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
    if peaks is not None and peaks.gbps:
        used = {
            precision(str(n), d)
            for n, d in zip(rows.column("name").to_pylist(), rows.column("compute_dtype").to_pylist())
        }
        grid = np.logspace(np.log10(lo), np.log10(hi), 200)
        for kind, style in _ROOF_STYLE.items():
            peak = peaks.tflops(kind)
            if kind in used and peak:
                ax.plot(
                    grid,
                    np.minimum(peak, grid * peaks.gbps / 1e3),
                    style,
                    color="black",
                    label=f"{kind} roof: {peak:g} TFLOP/s, {peaks.gbps:.0f} GB/s",
                )
        ax.legend(loc="lower right", fontsize=8)
    names = rows.column("name").to_pylist()
    for i in np.argsort(-t)[:label_top]:
        ax.annotate(str(names[i])[:40], (x[i], y[i]), fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved TFLOP/s")
    gpu = peaks.name if peaks is not None else "unknown GPU (give --peak-tflops/--peak-gbps for roofs)"
    ax.set_title(
        f"Roofline: {rows.num_rows} ops (name, shapes), size = GPU time; {gpu}\nred: compute-bound, blue: memory-bound",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    try:
        fig.savefig(output, bbox_inches="tight")
    except OSError as exc:
        raise ExportError(f"cannot write {output}: {exc.strerror or exc}; choose another output path.") from exc
    finally:
        plt.close(fig)
    return int(rows.num_rows)
