"""torch-style key_averages tables and the GPU-side header, from a report's tables.

Column names and time formatting mirror ``torch.autograd.profiler_util.EventList.table`` so a
PyTorch user reads them without a legend. GPU times come from ``gpu_ops`` (optionally of one
device): an op's self CUDA time is the GPU time it launched directly, so summed self CUDA
equals the GPU time attributed to ops; nothing is counted twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.analysis.throughput import COST_AGGREGATES, COST_COLUMNS, cost_inputs
from nvbridge.columns import np_col, sum_by

GroupBy = Literal["name", "shape", "module", "stack"]
SORT_KEYS = {
    # torch's sort_by names, and the column each sorts on
    "self_cpu_time_total": "self_cpu_ns", "cpu_time_total": "cpu_total_ns", "cpu_time": "cpu_avg_ns",
    "self_cuda_time_total": "self_gpu_ns", "cuda_time_total": "gpu_total_ns", "cuda_time": "gpu_avg_ns",
    "self_device_time_total": "self_gpu_ns", "device_time_total": "gpu_total_ns", "count": "calls",
}
TIME_UNITS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


# What the summary tables (key_averages, gpu_header, rank_facts) read of a dataset: a third of
# the ops columns, without the range names (unique per row; op_name is what they group by).
SUMMARY_COLUMNS: dict[str, list[str]] = {
    "ops": ["op_id", "parent_id", "depth", "op_name", "start_ns", "end_ns", "self_cpu_ns", "total_cpu_ns",
            "self_gpu_ns", "total_gpu_ns", "input_shapes", "module_path", "stack", *COST_COLUMNS],
    "gpu_ops": ["op_id", "kind", "device_id", "start_ns", "end_ns", "bytes", "copy_kind"],
    "api_calls": [], "marks": [], "syncs": [], "threads": [],
}


def gpu_time_by_op(ops: pa.Table, gpu_ops: pa.Table, device: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(self, total) GPU ns per op row, optionally of one device.

    Over all devices these are the conversion's own ``self_gpu_ns`` / ``total_gpu_ns``; for one
    device they are summed again from that device's GPU ops and rolled up the op tree.
    """
    if device is None:
        return np_col(ops, "self_gpu_ns"), np_col(ops, "total_gpu_ns")
    # Ops in any row order (a dataset read without its op_id sort): ids -> row positions.
    row = np.full(ops.num_rows + 1, -1, np.int64)  # the last slot maps id -1 to -1
    row[np_col(ops, "op_id")] = np.arange(ops.num_rows)
    op = row[np_col(gpu_ops, "op_id", fill=-1)]
    op = np.where(np_col(gpu_ops, "device_id", fill=-1) == device, op, -1)
    self_ns = sum_by(op, np_col(gpu_ops, "end_ns") - np_col(gpu_ops, "start_ns"), ops.num_rows)
    total = self_ns.copy()
    parent, depth = row[np_col(ops, "parent_id", fill=-1)], np_col(ops, "depth")
    for d in range(int(depth.max(initial=0)), 0, -1):
        kids = np.flatnonzero((depth == d) & (parent >= 0))
        np.add.at(total, parent[kids], total[kids])
    return self_ns, total


def parse_time(text: str) -> float:
    """``"10us"``, ``"1.5ms"``, ``"2s"`` or a bare number of microseconds -> microseconds."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(ns|us|ms|s)?\s*", text)
    if not m:
        raise ValueError(f"cannot read time {text!r}; write it like 10us, 1.5ms or 2s")
    return float(m.group(1)) * TIME_UNITS[m.group(2) or "us"]


def format_time(us: float) -> str:
    """torch's profiler formatting: 1.234ms, 12.000us, 2.500s."""
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


@dataclass(frozen=True)
class KeyAverages:
    """Averages of ops grouped by name (and shape, module or stack): torch's key_averages."""

    rows: pa.Table  # key columns + calls, self_cpu_ns, cpu_total_ns, self_gpu_ns, gpu_total_ns, ...
    self_cpu_total_ns: int
    self_gpu_total_ns: int
    group_by: tuple[str, ...]

    def sorted(self, sort_by: str = "self_cuda_time_total", row_limit: int = -1,
               name_regex: str | None = None, min_time_us: float = 0.0) -> pa.Table:
        """Rows sorted by a torch sort key, filtered, limited."""
        column = SORT_KEYS.get(sort_by, sort_by)
        if column not in self.rows.column_names:
            raise ValueError(f"cannot sort by {sort_by!r}; use one of {', '.join(SORT_KEYS)}")
        rows = self.rows
        if name_regex:
            rows = rows.filter(pc.match_substring_regex(rows.column("name"), name_regex))
        if min_time_us > 0:
            floor = min_time_us * 1e3
            rows = rows.filter(pc.or_(pc.greater_equal(rows.column("cpu_total_ns"), floor),
                                      pc.greater_equal(rows.column("gpu_total_ns"), floor)))
        # Ties break on every grouping key, so the order never depends on the ops' row order.
        ties = [(k, "ascending") for k in dict.fromkeys(("name", *self.group_by)) if k != column]
        rows = rows.sort_by([(column, "ascending" if column == "name" else "descending"), *ties])
        return rows.slice(0, row_limit) if row_limit >= 0 else rows

    def table(self, sort_by: str = "self_cuda_time_total", row_limit: int = 100, name_regex: str | None = None,
              min_time_us: float = 0.0) -> str:
        """The table as torch prints it (Name, Self CPU %, Self CPU, ..., # of Calls)."""
        rows = self.sorted(sort_by, row_limit, name_regex, min_time_us).to_pylist()
        cpu_all, gpu_all = max(self.self_cpu_total_ns, 1), max(self.self_gpu_total_ns, 1)
        headers = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg",
                   "Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg", "# of Calls"]
        extra = [k for k in self.group_by if k != "name"]
        headers += [{"input_shapes": "Input Shapes", "module_path": "Module", "stack": "Source Location"}[k]
                    for k in extra]
        body = []
        for r in rows:
            body.append([
                r["name"], f"{100 * r['self_cpu_ns'] / cpu_all:.2f}%", format_time(r["self_cpu_ns"] / 1e3),
                f"{100 * r['cpu_total_ns'] / cpu_all:.2f}%", format_time(r["cpu_total_ns"] / 1e3),
                format_time(r["cpu_avg_ns"] / 1e3), format_time(r["self_gpu_ns"] / 1e3),
                f"{100 * r['self_gpu_ns'] / gpu_all:.2f}%", format_time(r["gpu_total_ns"] / 1e3),
                format_time(r["gpu_avg_ns"] / 1e3), str(r["calls"]),
            ] + [str(r[k]) if r[k] is not None else "" for k in extra])
        widths = [min(max([len(h)] + [len(row[i]) for row in body]), 60 if i == 0 else 80)
                  for i, h in enumerate(headers)]
        rule = "-" * (sum(widths) + 2 * (len(widths) - 1))

        def line(cells: list[str]) -> str:
            out = []
            for i, (cell, w) in enumerate(zip(cells, widths)):
                cell = cell if len(cell) <= w else cell[: w - 3] + "..."
                out.append(cell.ljust(w) if i == 0 or i >= 11 else cell.rjust(w))
            return "  ".join(out).rstrip()

        text = [rule, line(headers), rule] + [line(b) for b in body] + [rule]
        text.append(f"Self CPU time total: {format_time(self.self_cpu_total_ns / 1e3)}")
        text.append(f"Self CUDA time total: {format_time(self.self_gpu_total_ns / 1e3)}")
        return "\n".join(text) + "\n"


def key_averages(ops: pa.Table, gpu_ops: pa.Table, *, group_by_input_shape: bool = False,
                 group_by_stack_n: int = 0, group_by_module: bool = False,
                 top_level_events_only: bool = False, device: int | None = None) -> KeyAverages:
    """Group ops like torch's ``EventList.key_averages``.

    Args:
        ops, gpu_ops: a report's tables (with the PyTorch columns).
        group_by_input_shape: one row per (name, input shapes).
        group_by_stack_n: one row per (name, first n stack frames) where ops carry a stack.
        group_by_module: one row per (name, enclosing module path).
        top_level_events_only: only ops without a parent range.
        device: count GPU time of this device only.
    """
    self_gpu, total_gpu = gpu_time_by_op(ops, gpu_ops, device)
    name = ops.column("op_name") if "op_name" in ops.column_names else ops.column("name")
    cols: dict[str, Any] = {
        "name": name,
        "self_cpu_ns": ops.column("self_cpu_ns"),
        "cpu_total_ns": ops.column("total_cpu_ns"),
        "self_gpu_ns": pa.array(self_gpu),
        "gpu_total_ns": pa.array(total_gpu),
        **cost_inputs(ops),
    }
    keys = ["name"]
    if group_by_input_shape:
        cols["input_shapes"] = ops.column("input_shapes").fill_null("")
        keys.append("input_shapes")
    if group_by_module:
        cols["module_path"] = ops.column("module_path").fill_null("")
        keys.append("module_path")
    if group_by_stack_n > 0:
        stack = ops.column("stack").combine_chunks()
        firsts = pc.list_slice(stack, 0, group_by_stack_n)
        cols["stack"] = pc.fill_null(pc.binary_join(firsts, " <- "), "")
        keys.append("stack")
    table = pa.table(cols)
    if top_level_events_only:
        table = table.filter(ops.column("parent_id").is_null())
    agg = table.group_by(keys, use_threads=False).aggregate([
        ("self_cpu_ns", "sum"), ("cpu_total_ns", "sum"), ("self_gpu_ns", "sum"), ("gpu_total_ns", "sum"),
        ("name", "count"), *COST_AGGREGATES])
    agg = agg.rename_columns([c.replace("_sum", "").replace("_min", "").replace("name_count", "calls")
                              for c in agg.column_names])
    calls = agg.column("calls")
    agg = agg.append_column("cpu_avg_ns", pc.divide(agg.column("cpu_total_ns").cast(pa.float64()), calls))
    agg = agg.append_column("gpu_avg_ns", pc.divide(agg.column("gpu_total_ns").cast(pa.float64()), calls))
    return KeyAverages(agg, int(np.sum(np_col(ops, "self_cpu_ns"))), int(self_gpu.sum()), tuple(keys))


def busy_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of [start, end) intervals: time the GPU was doing anything."""
    if len(start) == 0:
        return 0
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum.accumulate(end[order])
    gaps = np.maximum(s[1:] - e[:-1], 0)
    return int(e[-1] - s[0] - gaps.sum())


def gpu_header(gpu_ops: pa.Table, devices: pa.Table) -> list[dict[str, Any]]:
    """Per device: busy time, span, idle share, kernel count, copy volume by direction."""
    out = []
    dev = np_col(gpu_ops, "device_id", fill=-1)
    kinds = np.asarray(gpu_ops.column("kind").to_numpy(zero_copy_only=False))
    s, e = np_col(gpu_ops, "start_ns"), np_col(gpu_ops, "end_ns")
    copy = np.asarray(gpu_ops.column("copy_kind").fill_null("").to_numpy(zero_copy_only=False))
    nbytes = np_col(gpu_ops, "bytes", fill=0)
    attributed = np_col(gpu_ops, "op_id", fill=-1) >= 0
    names = dict(zip(np_col(devices, "device_id", fill=-1).tolist(), devices.column("name").to_pylist()))
    for d in np.unique(dev):
        m = dev == d
        span = int(e[m].max() - s[m].min())
        busy = busy_ns(s[m], e[m])
        copies = {k: int(nbytes[m & (copy == k) & (kinds == "memcpy")].sum())
                  for k in sorted(set(copy[m & (kinds == "memcpy")]))}
        out.append({
            "device_id": int(d), "name": names.get(int(d)), "busy_ns": busy, "span_ns": span,
            "idle_share": 1.0 - busy / span if span else 0.0, "kernels": int((m & (kinds == "kernel")).sum()),
            "gpu_ops": int(m.sum()), "summed_ns": int((e[m] - s[m]).sum()),
            "attributed_ns": int((e[m] - s[m])[attributed[m]].sum()), "memcpy_bytes": copies,
        })
    return out


def merge_averages(parts: list[KeyAverages]) -> KeyAverages:
    """One table over several reports: rows with the same keys add up."""
    rows = pa.concat_tables([p.rows.select(list(parts[0].rows.column_names)) for p in parts])
    keys = list(parts[0].group_by)
    agg = rows.group_by(keys, use_threads=False).aggregate([
        *((c, "sum") for c in ("self_cpu_ns", "cpu_total_ns", "self_gpu_ns", "gpu_total_ns", "calls")),
        *COST_AGGREGATES])
    agg = agg.rename_columns([c.removesuffix("_sum").removesuffix("_min") for c in agg.column_names])
    calls = agg.column("calls")
    agg = agg.append_column("cpu_avg_ns", pc.divide(agg.column("cpu_total_ns").cast(pa.float64()), calls))
    agg = agg.append_column("gpu_avg_ns", pc.divide(agg.column("gpu_total_ns").cast(pa.float64()), calls))
    return KeyAverages(agg, sum(p.self_cpu_total_ns for p in parts), sum(p.self_gpu_total_ns for p in parts),
                       parts[0].group_by)


def step_times(ops: pa.Table) -> dict[int, int]:
    """Duration (ns) of each ``ProfilerStep#N`` range, by N (summed if a step repeats)."""
    names = ops.column("op_name") if "op_name" in ops.column_names else ops.column("name")
    m = pc.extract_regex(names, r"^ProfilerStep#(?P<n>\d+)$")
    valid = np.asarray(pc.is_valid(m).to_numpy(zero_copy_only=False))
    if not valid.any():
        return {}
    n = np.asarray(pc.struct_field(m, "n").cast(pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False))[valid]
    dur = (np_col(ops, "end_ns") - np_col(ops, "start_ns"))[valid]
    out: dict[int, int] = {}
    for step, d in zip(n.tolist(), dur.tolist()):
        out[step] = out.get(step, 0) + d
    return out


def rank_facts(report: Any, gpu: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """What the cross-rank summary needs of one report (``gpu``: its :func:`gpu_header`, if
    already computed), so that reports can be read one at a time."""
    meta = report.meta
    label = f"rank {meta['rank']}" if meta.get("rank") not in (None, "None") else str(meta.get("source"))
    gpu = gpu_header(report.gpu_ops, report.devices) if gpu is None else gpu
    return {"rank": label, "source": meta.get("source"), "ops": report.ops.num_rows,
            "kernels": sum(d["kernels"] for d in gpu), "gpu_busy_ns": {d["device_id"]: d["busy_ns"] for d in gpu},
            "steps": step_times(report.ops)}


def rank_summary(facts: list[dict[str, Any]]) -> dict[str, Any]:
    """Across ranks, from each report's :func:`rank_facts`: GPU busy time per report and device,
    and per step the slowest rank and the spread (slowest minus fastest), which is what a
    straggler looks like."""
    ranks = [{k: v for k, v in f.items() if k != "steps"} for f in facts]
    steps: dict[int, dict[str, int]] = {}
    for f in facts:
        for step, ns in f["steps"].items():
            steps.setdefault(step, {})[f["rank"]] = ns
    per_step = []
    for step in sorted(steps):
        by_rank = steps[step]
        slow = max(by_rank, key=lambda k: by_rank[k])
        per_step.append({"step": step, "slowest": slow, "max_ns": by_rank[slow],
                         "min_ns": min(by_rank.values()), "spread_ns": by_rank[slow] - min(by_rank.values()),
                         "ranks": len(by_rank)})
    return {"ranks": ranks, "steps": per_step}
