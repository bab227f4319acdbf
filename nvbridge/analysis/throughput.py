"""Achieved TFLOP/s and GB/s, arithmetic intensity, % of peak, bound, and MFU per step.

Formulas (docs/flops.md):

- achieved TFLOP/s = FLOPs / GPU time; GB/s = bytes / GPU time, over the op's total GPU time
  (the kernels it and its children launched: a PyProf ``linear`` launches through ``matmul``);
- arithmetic intensity = FLOPs / bytes; ridge = peak TFLOP/s / peak GB/s (FLOP per byte);
- bound = compute where intensity >= ridge, else memory;
- % of peak = achieved TFLOP/s / min(peak TFLOP/s, intensity x peak GB/s): the share of the
  roofline at that intensity, i.e. of peak FLOP/s when compute-bound, of bandwidth when memory-bound;
- MFU of a step = model FLOPs / (step wall time x peak TFLOP/s x GPUs that ran kernels), where
  model FLOPs are those of matmuls, convolutions and attention (FlopCounterMode's families),
  each counted once: ops nested in a counted op (``aten::mm`` inside ``aten::linear`` or
  inside ``AddmmBackward0``) are not added again.

Unknown costs stay unknown: a group's FLOPs sum the calls whose cost is known and
``unknown_calls`` says how many were not.
"""

from __future__ import annotations

import textwrap
from typing import Any

import numpy as np
import pyarrow as pa

from nvbridge.analysis.text_table import Column, fit
from nvbridge.columns import np_col
from nvbridge.engine.costs import flops as costs
from nvbridge.gpu.peaks import Peaks, device_facts, resolve

# Ops columns these figures read (beside the summary's own).
COST_COLUMNS = ["flops", "bytes", "compute_dtype", "dtype_assumed", "step"]
# key_averages aggregates these per group: summed, and the group's precision.
COST_AGGREGATES = [("flops", "sum"), ("bytes", "sum"), ("unknown_calls", "sum"), ("compute_dtype", "min")]


def cost_inputs(ops: pa.Table) -> dict[str, pa.Array | pa.ChunkedArray]:
    """Per op: flops and bytes (0 where unknown), unknown_calls (1 where unknown) and the
    compute dtype, for key_averages to aggregate; unknown everywhere for a dataset written
    before cost columns existed."""
    n = ops.num_rows
    if "flops" not in ops.column_names:
        return {
            "flops": pa.array(np.zeros(n, np.int64)),
            "bytes": pa.array(np.zeros(n, np.int64)),
            "unknown_calls": pa.array(np.ones(n, np.int64)),
            "compute_dtype": pa.nulls(n, pa.string()),
        }
    known = np.asarray(ops.column("flops").is_valid().to_numpy(zero_copy_only=False))
    return {
        "flops": pa.array(np_col(ops, "flops", fill=0)),
        "bytes": pa.array(np_col(ops, "bytes", fill=0)),
        "unknown_calls": pa.array((~known).astype(np.int64)),
        "compute_dtype": ops.column("compute_dtype").cast(pa.string()),
    }


def device_peaks(
    devices: pa.Table,
    gpu_ops: pa.Table,
    device: int | None = None,
    peak_tflops: float | None = None,
    peak_gbps: float | None = None,
) -> Peaks | None:
    """The peaks of ``device`` (default: the device that ran the most GPU ops), from its
    recorded facts and name (nvbridge.gpu.peaks) and the user's overrides."""
    ids = np_col(gpu_ops, "device_id", fill=-1)
    return peaks_of(devices, np.bincount(ids[ids >= 0]).tolist(), device, peak_tflops, peak_gbps)


def peaks_of(
    devices: pa.Table,
    gpu_ops_by_device: list[int],
    device: int | None = None,
    peak_tflops: float | None = None,
    peak_gbps: float | None = None,
) -> Peaks | None:
    """:func:`device_peaks` from the count of GPU ops on each device id (0, 1, ...)."""
    if device is None and gpu_ops_by_device:
        device = gpu_ops_by_device.index(max(gpu_ops_by_device))
    elif device is None and devices.num_rows:  # no GPU op ran: the device the report describes
        device = int(np_col(devices, "device_id")[0])
    return resolve(peak_tflops=peak_tflops, peak_gbps=peak_gbps, facts=device_facts(devices, device))


def rates(rows: pa.Table, peaks: Peaks | None) -> pa.Table:
    """``rows`` (key_averages rows with COST_AGGREGATES) plus achieved_tflops, achieved_gbps,
    intensity, pct_of_peak and bound; null where FLOPs, bytes, GPU time or peaks are missing."""
    f = np_col(rows, "flops", fill=0).astype(np.float64)
    b = np_col(rows, "bytes", fill=0).astype(np.float64)
    t = np_col(rows, "gpu_total_ns", fill=0).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        tflops = np.where(t > 0, f / t / 1e3, np.nan)
        gbps = np.where(t > 0, b / t, np.nan)
        intensity = np.where(b > 0, f / b, np.nan)
    unknown = np_col(rows, "unknown_calls", fill=0) >= np_col(rows, "calls", fill=0)
    for column in (tflops, gbps, intensity):
        column[unknown] = np.nan
    pct = np.full(len(f), np.nan)
    bound = np.full(len(f), None, dtype=object)
    if peaks is not None:
        kinds = zip(rows.column("name").to_pylist(), rows.column("compute_dtype").to_pylist())
        peak_f = np.array([peaks.tflops(costs.precision(str(n), d)) or np.nan for n, d in kinds])
        ridge = peak_f * 1e3 / peaks.gbps if peaks.gbps else np.full(len(f), np.nan)
        with np.errstate(invalid="ignore"):
            # no bandwidth known (--peak-tflops alone): the share of the compute peak
            roof = np.minimum(peak_f, intensity * peaks.gbps / 1e3) if peaks.gbps else peak_f
            pct = 100 * tflops / roof
            ok = ~np.isnan(intensity) & ~np.isnan(ridge)
        bound[ok] = np.where(intensity[ok] >= ridge[ok], "compute", "memory")
    for name, values in (
        ("achieved_tflops", tflops),
        ("achieved_gbps", gbps),
        ("intensity", intensity),
        ("pct_of_peak", pct),
    ):
        rows = rows.append_column(name, pa.array(values, pa.float64(), from_pandas=True))
    return rows.append_column("bound", pa.array(bound.tolist(), pa.string()))


def si(value: float | None, unit: str) -> str:
    """1.23 GFLOP-style text; empty for a missing value."""
    if value is None or value != value:
        return ""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def cost_table(rows: pa.Table, keys: tuple[str, ...], width: int | None = None) -> str:
    """The cost columns of ``rates`` rows, one line per row in their order (beside the torch
    table), fitted to ``width`` columns (``text_table.fit``)."""
    extra = [k for k in keys if k != "name"]
    columns = [
        Column("Name", left=True, cap=60, narrows=True),
        Column("FLOPs", cap=60),
        Column("Bytes", cap=60, drop=3),
        Column("Unknown calls", cap=60, drop=2),
        Column("TFLOP/s", cap=60),
        Column("GB/s", cap=60, drop=4),
        Column("FLOP/B", cap=60, drop=1),
        Column("% of peak", cap=60),
        Column("Bound", left=True, cap=60),
        Column("Dtype", left=True, cap=60, drop=5),
        *(Column(k, left=True, cap=60, narrows=True) for k in extra),
    ]
    body = []
    for r in rows.to_pylist():
        some = r["unknown_calls"] < r["calls"]
        body.append(
            [
                r["name"],
                si(r["flops"], "FLOP") if some else "",
                si(r["bytes"], "B") if some else "",
                str(r["unknown_calls"] or ""),
                "" if r["achieved_tflops"] is None else f"{r['achieved_tflops']:.3f}",
                "" if r["achieved_gbps"] is None else f"{r['achieved_gbps']:.1f}",
                "" if r["intensity"] is None else f"{r['intensity']:.2f}",
                "" if r["pct_of_peak"] is None else f"{r['pct_of_peak']:.1f}%",
                r["bound"] or "",
                r["compute_dtype"] or "",
            ]
            + [str(r[k] or "") for k in extra]
        )
    fitted = fit(columns, body, width)
    note = fitted.note(width)
    return "\n".join(fitted.lines + ([note] if note else [])) + "\n"


def _runs_at(peaks: Peaks | None, precision: str | None) -> str:
    """The precision the model FLOPs run at on this GPU (fp32 for TF32 on a Turing card)."""
    if precision is None:
        return "no known"
    return peaks.effective(precision)[0] if peaks is not None else precision


def header_lines(peaks: Peaks | None, figures: list[tuple[str, dict[str, Any]]], width: int = 100) -> list[str]:
    """The summary's FLOPs header: the peaks used (wrapped to ``width``), then model FLOPs and
    MFU per step per report."""
    lines = []
    if peaks is None:
        lines.append("Peaks: unknown GPU; give --peak-tflops and --peak-gbps for % of peak and MFU")
    else:
        source = f" TFLOP/s: {peaks.flops_source}." if peaks.rates() else ""  # (else text() says why)
        lines += textwrap.wrap(f"Peaks ({peaks.name}): {peaks.text()}.{source}", width, subsequent_indent="  ")
    for label, fig in figures:
        where = f"{label}: " if label else ""
        if fig["flops"] is None:
            lines.append(f"{where}model FLOPs unknown: {fig['unknown']}")
            continue
        assumed = (
            f"; {fig['assumed_dtype_ops']:,} ops without recorded dtypes assume {costs.ASSUMED_DTYPE}"
            if fig["assumed_dtype_ops"]
            else ""
        )
        whole = "" if fig.get("mfu_pct") is None else f", MFU {fig['mfu_pct']:.3g}% over the GPU timeline"
        lines.append(
            f"{where}model FLOPs {si(fig['flops'], 'FLOP')} ({_runs_at(peaks, fig['precision'])} precision, "
            f"{fig['gpus']} GPU){whole}{assumed}"
        )
        if peaks is None:
            continue  # the peaks line says what MFU needs: not once per step
        if fig["steps"] and all(st["mfu_pct"] is None for st in fig["steps"]):
            lines.append(f"{where}  MFU unknown peak ({peaks.name} gives no {fig['precision']} TFLOP/s)")
            continue
        for st in fig["steps"]:
            value = "unknown peak" if st["mfu_pct"] is None else f"{st['mfu_pct']:.3g}%"
            lines.append(
                f"{where}  step {st['step']}: MFU {value} ({si(st['flops'], 'FLOP')} in {st['wall_ns'] / 1e6:.3f} ms)"
            )
    # a line longer than the terminal (a rank's label, a long dtype note) continues indented
    return [
        part
        for line in lines
        for part in (
            [line]
            if len(line) <= width
            else textwrap.wrap(line, width, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False)
        )
    ]
