"""advise's "below_roofline" detector: ops whose kernels run far below what the roofline allows.

An op call's roofline time is the least time its FLOPs and bytes need on the report's GPU:
``max(flops / peak FLOP/s, bytes / peak B/s)``, i.e. flops / min(peak, intensity x bandwidth)
(nvbridge.analysis.throughput's "% of peak"). Its GPU time is that of the kernels it and the ops
inside it launched. Calls are grouped by (op name, module, input shapes, dtype); a group whose
roofline time is under ``BELOW_SHARE`` of its GPU time is evidence, and the time at stake is
GPU time - roofline time, laid on each kernel as its last ``1 - share`` part (so the sharing of
time between findings in advise.py applies unchanged, and it never exceeds the kernels' time).

Only the outermost op with a known cost counts a kernel (a PyProf ``linear`` and the
``matmul`` inside it carry the same FLOPs); ops with unknown FLOPs are never reported.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from nvbridge.analysis.context import Context, codes
from nvbridge.analysis.findings import Evidence
from nvbridge.analysis.throughput import device_peaks
from nvbridge.columns import np_col
from nvbridge.dataset.report import DatasetTables
from nvbridge.engine.costs import flops as costs
from nvbridge.gpu.peaks import Peaks, fmt, resolve

BELOW_SHARE = 0.25  # roofline time under this share of the GPU time: "far below"
SMALL_CALL_NS = 10_000  # a call the roofline does in under 10 us cannot fill the GPU
KIND = "below_roofline"


def _outermost_costed(ops: pa.Table) -> np.ndarray:
    """Per op row (row == op_id), the outermost ancestor-or-self with a known cost (-1 none)."""
    n = ops.num_rows
    known = np.asarray(ops.column("flops").is_valid().to_numpy(zero_copy_only=False)) if n else np.zeros(0, bool)
    parent, depth = np_col(ops, "parent_id", fill=-1), np_col(ops, "depth")
    top = np.where(known, np.arange(n), -1)
    order = np.argsort(depth, kind="stable")
    levels = np.split(order, np.flatnonzero(np.diff(depth[order])) + 1) if n else []
    for at in levels:  # parents before children: one pass per depth
        p = parent[at]
        up = np.where(p >= 0, top[np.maximum(p, 0)], -1)
        top[at] = np.where(up >= 0, up, top[at])
    return top


def _peaks(report: DatasetTables, peak_tflops: float | None, peak_gbps: float | None) -> Peaks | None:
    """The peaks of the device that ran the most GPU ops (None: unknown GPU)."""
    if not {"device_id", "name"} <= set(report.devices.column_names):
        return resolve(None, peak_tflops, peak_gbps)
    return device_peaks(report.devices, report.gpu_ops, None, peak_tflops, peak_gbps)


def _sorted_ops(ctx: Context) -> pa.Table:
    ops = ctx.report.ops
    if not np.array_equal(np_col(ops, "op_id"), np.arange(ops.num_rows)):
        ops = ops.sort_by("op_id")
    return ops


def _none() -> Evidence:
    z = np.zeros(0, np.int64)
    figs = {k: z for k in ("flops", "bytes", "gpu_ns", "roof_ns", "compute_bound", "fp32_tensor_cores")}
    return Evidence(KIND, z, z, z, z, figs, event=z, group=z)


def _call_figures(ctx: Context, ops: pa.Table, call: np.ndarray, peaks: Peaks) -> dict[str, np.ndarray]:
    """Per op call: flops, bytes, roofline time (ns), compute-bound, fp32 on tensor-core GPU."""
    f = np_col(ops, "flops", fill=0)[call].astype(np.float64)
    b = np_col(ops, "bytes", fill=0)[call].astype(np.float64)
    dtype, dtypes = codes(ops.column("compute_dtype").cast(pa.string()))
    # the peak and tensor-core flag per distinct (name, dtype), not per call
    pairs, inverse = np.unique(np.stack([ctx.op_name[call], dtype[call]], axis=1), axis=0, return_inverse=True)
    faster = max((peaks.tflops(p) or 0.0) for p in ("tf32", "bf16", "fp16")) > (peaks.fp32 or 0.0)
    peak, fp32_tc = np.full(len(pairs), np.nan), np.zeros(len(pairs), bool)
    for i, (n, d) in enumerate(pairs.tolist()):
        name = ctx.op_names[n] or ""
        precision = costs.precision(name, dtypes[d])
        peak[i] = (peaks.tflops(precision) or np.nan) * 1e3  # FLOP per ns
        fp32_tc[i] = precision == "fp32" and faster and costs.is_model_op(name)
    inverse = inverse.ravel()
    compute_ns = np.where(f > 0, f / peak[inverse], 0.0)
    memory_ns = b / peaks.gbps if peaks.gbps else np.zeros(len(b))
    fp32_tc = fp32_tc[inverse]
    return {
        "flops": f.astype(np.int64),
        "bytes": b.astype(np.int64),
        # fmax: a call without a compute peak (unpriced, never reported) still gets an integer roof
        "roof_ns": np.ceil(np.fmax(compute_ns, memory_ns)).astype(np.int64),
        "compute_bound": (compute_ns >= memory_ns).astype(np.int64),
        "fp32_tensor_cores": fp32_tc.astype(np.int64),
        "unpriced": np.isnan(compute_ns),
    }


def below_roofline(ctx: Context, peak_tflops: float | None = None, peak_gbps: float | None = None) -> Evidence:
    """Kernels of op groups whose roofline time is under BELOW_SHARE of their GPU time; each
    kernel's last (1 - share) is at stake. Nothing without cost columns or known peaks."""
    r = ctx.report
    peaks = _peaks(r, peak_tflops, peak_gbps)
    if peaks is None or "flops" not in r.ops.column_names or not r.gpu_ops.num_rows:
        return _none()
    ops = _sorted_ops(ctx)
    g = r.gpu_ops
    op = np_col(g, "op_id", fill=-1)
    top = np.append(_outermost_costed(ops), -1)[np.where(op >= 0, op, -1)]
    kind, kinds = codes(g.column("kind"))
    keep = np.flatnonzero((top >= 0) & (kind == kinds.index("kernel") if "kernel" in kinds else False))
    if not len(keep):
        return _none()
    top = top[keep]
    start, end = np_col(g, "start_ns")[keep], np_col(g, "end_ns")[keep]
    calls, first = np.unique(top, return_index=True)
    per_call = _call_figures(ctx, ops, calls, peaks)
    shapes, _ = codes(ops.column("input_shapes").cast(pa.string()))
    dtypes, _ = codes(ops.column("compute_dtype").cast(pa.string()))
    # group of each call: (name, module, shapes, dtype) as one sortable key
    key = np.stack([ctx.op_name[calls], ctx.module[calls], shapes[calls], dtypes[calls]], axis=1)
    _, group = np.unique(key, axis=0, return_inverse=True)
    group = group.ravel()
    call_of = np.searchsorted(calls, top)  # kernel -> call index
    dur = end - start
    n_groups = int(group.max()) + 1
    gpu = np.bincount(group[call_of], weights=dur, minlength=n_groups)
    roof = np.bincount(group, weights=per_call["roof_ns"], minlength=n_groups)
    unpriced = np.bincount(group, weights=per_call.pop("unpriced"), minlength=n_groups) > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(gpu > 0, roof / gpu, 1.0)
    # an op with neither FLOPs nor bytes (a view) has no roofline to fall short of
    work = np.bincount(group, weights=per_call["flops"] + per_call["bytes"], minlength=n_groups) > 0
    below = (share < BELOW_SHARE) & ~unpriced & work
    row = below[group[call_of]]
    # the call's own figures go on its first kernel, so sums over kernels count each call once
    on_first = np.zeros(len(keep), bool)
    on_first[first] = True
    figs = {k: np.where(on_first, v[call_of], 0)[row] for k, v in per_call.items()}
    figs["gpu_ns"] = dur[row]
    cut = start + np.ceil(dur * share[group[call_of]]).astype(np.int64)
    return Evidence(
        KIND, top[row], ctx.gpu_lane[keep][row], cut[row], end[row], figs, event=top[row], group=group[call_of][row]
    )


def fix(figures: Mapping[str, int], count: int) -> str:
    """One sentence, by what keeps the op from its roofline."""
    compute = 2 * figures.get("compute_bound", 0) >= count
    if compute and figures.get("fp32_tensor_cores", 0):
        return "dtype fp32 -> bf16/fp16 (autocast) or TF32: fp32 leaves this GPU's tensor cores idle."
    if figures.get("roof_ns", 0) < SMALL_CALL_NS * count:
        return "Too little work per call to fill the GPU: batch more per call, or fuse calls (torch.compile)."
    if not compute:
        return "Memory-bound and below bandwidth: fuse it with its neighbours (torch.compile) or make it contiguous."
    return "Compute-bound but slow: pad sizes to multiples of 8, check the layout, or try torch.compile."


def describe(report: DatasetTables, peak_tflops: float | None = None, peak_gbps: float | None = None) -> str | None:
    """The peaks below_roofline compares with, as one line of at most 84 characters (None:
    unknown GPU): fp32 and the rates of the precisions the report's costed ops run at."""
    peaks = _peaks(report, peak_tflops, peak_gbps)
    if peaks is None:
        return None
    used = {"fp32"}
    if {"flops", "op_name", "compute_dtype"} <= set(report.ops.column_names):
        ops = report.ops.select(["op_name", "compute_dtype", "flops"]).filter(report.ops.column("flops").is_valid())
        pairs = pa.table(
            {"n": ops.column("op_name").cast(pa.string()), "d": ops.column("compute_dtype").cast(pa.string())}
        )
        for row in pairs.group_by(["n", "d"]).aggregate([]).to_pylist():
            used.add(peaks.effective(costs.precision(row["n"] or "", row["d"]))[0])
    rates = ", ".join(f"{p} {fmt(v)}" for p, v in peaks.rates().items() if p in used)
    memory = f"{peaks.gbps:.0f} GB/s" if peaks.gbps else "bandwidth unknown"
    name = peaks.name.removeprefix("NVIDIA ")
    text = f"{name}: {rates or 'compute peak unknown'}{' TFLOP/s' if rates else ''}, {memory}"
    return text if len(text) + len(peaks.gbps_source) + 3 > 84 else f"{text} ({peaks.gbps_source})"
