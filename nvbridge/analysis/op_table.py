"""torch-style key_averages tables, from a report's tables.

Column names and time formatting mirror ``torch.autograd.profiler_util.EventList.table`` so a
PyTorch user reads them without a legend. GPU times come from ``gpu_ops`` (optionally of one
device): an op's self CUDA time is the GPU time it launched directly, so summed self CUDA
equals the GPU time attributed to ops; nothing is counted twice. GPU ops launched outside
every op can be shown as one more row, ``[no op]``, so that self CUDA adds up to all GPU time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.analysis.memory_columns import (
    MEMORY_COLUMNS,
    MEMORY_TITLES,
    format_memory,
    has_memory,
    memory_inputs,
    shown_memory,
)
from nvbridge.analysis.text_table import TORCH_COLUMNS, Column, fit
from nvbridge.analysis.throughput import COST_AGGREGATES, COST_COLUMNS, cost_inputs
from nvbridge.columns import np_col
from nvbridge.dataset.schema import pick
from nvbridge.errors import OptionError

SORT_KEYS = {
    # torch's sort_by names, and the column each sorts on
    "self_cpu_time_total": "self_cpu_ns",
    "cpu_time_total": "cpu_total_ns",
    "cpu_time": "cpu_avg_ns",
    "self_cuda_time_total": "self_gpu_ns",
    "cuda_time_total": "gpu_total_ns",
    "cuda_time": "gpu_avg_ns",
    "self_device_time_total": "self_gpu_ns",
    "device_time_total": "gpu_total_ns",
    "count": "calls",
    **{c: c for c in MEMORY_COLUMNS},  # torch sorts by its memory attributes under their own names
}
# Sorting a report without GPU time by a GPU column would order rows by name: use the CPU one.
CPU_FALLBACK = {"self_gpu_ns": "self_cpu_ns", "gpu_total_ns": "cpu_total_ns", "gpu_avg_ns": "cpu_avg_ns"}
TIME_UNITS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
NO_OP = "[no op]"  # the row of GPU ops launched outside every op

# What the summary tables (key_averages, gpu_header, rank_facts) need of a dataset, checked
# before anything is read: a third of the ops columns, without the range names (unique per row;
# op_name is what they group by). Each mode reads only its part (nvbridge.analysis.streamed), and
# columns newer datasets have where present (the attribution by time).
SUMMARY_COLUMNS: dict[str, list[str]] = {
    name: pick(name, columns)
    for name, columns in {
        "ops": [
            "op_id",
            "parent_id",
            "depth",
            "op_name",
            "start_ns",
            "end_ns",
            "self_cpu_ns",
            "total_cpu_ns",
            "self_gpu_ns",
            "total_gpu_ns",
            "input_shapes",
            "module_path",
            "stack",
            "flags",
            "process_id",  # the ranks (nvbridge.dataset.ranks)
            *COST_COLUMNS,
        ],
        # thread_id: who launched the [no op] row's GPU time (nvbridge.analysis.launches)
        "gpu_ops": [
            "op_id",
            "kind",
            "device_id",
            "process_id",
            "thread_id",
            "start_ns",
            "end_ns",
            "bytes",
            "copy_kind",
        ],
        # API calls: the start-up before each process's first GPU op (nvbridge.dataset.timeline), and the
        # check that no interval ends before it starts (dataset.load)
        "api_calls": ["process_id", "name", "start_ns", "end_ns"],
        "marks": [],
        "syncs": [],
        "threads": ["process_id", "thread_id", "thread_name"],
    }.items()
}


def parse_time(text: str) -> float:
    """``"10us"``, ``"1.5ms"``, ``"2s"`` or a bare number of microseconds -> microseconds."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(ns|us|ms|s)?\s*", text)
    if not m:
        raise ValueError(f"cannot read time {text!r}; write it like 10us, 1.5ms or 2s")
    return float(m.group(1)) * TIME_UNITS[m.group(2) or "us"]


def format_time(us: float, unit: str | None = None) -> str:
    """torch's profiler formatting: 1.234ms, 12.000us, 2.500s (or always in ``unit``)."""
    if unit is None:
        unit = "s" if us >= 1e6 else "ms" if us >= 1e3 else "us"
    return f"{us / TIME_UNITS[unit]:.3f}{unit}"


def sort_column(sort_by: str) -> str:
    """The rows' column a torch sort key sorts on."""
    column = SORT_KEYS.get(sort_by, sort_by)
    if column not in (*SORT_KEYS.values(), "name"):
        raise ValueError(f"cannot sort by {sort_by!r}; use one of {', '.join(SORT_KEYS)}")
    return column


def check_regex(name_regex: str) -> None:
    """Raise ValueError naming the expression if Arrow's regular expressions (RE2) cannot read it."""
    try:
        pc.match_substring_regex(pa.array([""]), name_regex)
    except pa.ArrowInvalid as exc:
        raise ValueError(
            f"cannot read regular expression {name_regex!r} "
            f"({str(exc).split(':')[0].lower()}); check its brackets and escapes"
        ) from None


@dataclass(frozen=True)
class KeyAverages:
    """Averages of ops grouped by name (and shape, module or stack): torch's key_averages."""

    rows: pa.Table  # key columns + calls, self_cpu_ns, cpu_total_ns, self_gpu_ns, gpu_total_ns, ...
    self_cpu_total_ns: int
    self_gpu_total_ns: int
    group_by: tuple[str, ...]

    def sort_column(self, sort_by: str) -> str:
        """The column ``sort_by`` sorts on: a GPU one falls back to CPU where no GPU time was recorded."""
        column = sort_column(sort_by)
        if column in MEMORY_COLUMNS and not has_memory(self.rows):
            raise OptionError(
                f"cannot sort by {sort_by}: the report recorded no memory events; record with "
                "nvbridge.emit_nvtx(profile_memory=True), or sort by a time"
            )
        return CPU_FALLBACK.get(column, column) if self.self_gpu_total_ns == 0 else column

    def sorted(
        self,
        sort_by: str = "self_cuda_time_total",
        row_limit: int = -1,
        name_regex: str | None = None,
        min_time_us: float = 0.0,
    ) -> pa.Table:
        """Rows sorted by a torch sort key, filtered, limited."""
        column = self.sort_column(sort_by)
        rows = self.rows
        if name_regex:
            check_regex(name_regex)
            rows = rows.filter(pc.match_substring_regex(rows.column("name"), name_regex))
        if min_time_us > 0:
            floor = min_time_us * 1e3
            rows = rows.filter(
                pc.or_(
                    pc.greater_equal(rows.column("cpu_total_ns"), floor),
                    pc.greater_equal(rows.column("gpu_total_ns"), floor),
                )
            )
        # Ties break on every grouping key, so the order never depends on the ops' row order.
        ties = [(k, "ascending") for k in dict.fromkeys(("name", *self.group_by)) if k != column]
        rows = rows.sort_by([(column, "ascending" if column == "name" else "descending"), *ties])
        return rows.slice(0, row_limit) if row_limit >= 0 else rows

    def table(
        self,
        sort_by: str | None = "self_cuda_time_total",
        row_limit: int = 100,
        name_regex: str | None = None,
        min_time_us: float = 0.0,
        *,
        max_src_column_width: int = 80,
        max_name_column_width: int = 60,
        max_shapes_column_width: int = 80,
        header: str | None = None,
        top_level_events_only: bool = False,
        time_unit: str | None = None,
        max_width: int | None = None,
    ) -> str:
        """The table as torch prints it (Name, Self CPU %, Self CPU, ..., # of Calls); takes the
        arguments of torch's ``EventList.table`` (``top_level_events_only`` belongs to
        ``key_averages`` here: the rows are already grouped). ``max_width``: fit the table to
        this many columns (``text_table.fit``: headers wrapped, the name narrowed, the least
        useful columns left out with a note)."""
        if top_level_events_only:
            raise ValueError("pass top_level_events_only to key_averages(); these rows are already grouped")
        rows = self.sorted(sort_by or "self_cuda_time_total", row_limit, name_regex, min_time_us).to_pylist()
        cpu_all, gpu_all = max(self.self_cpu_total_ns, 1), max(self.self_gpu_total_ns, 1)

        def t(ns: float) -> str:
            return format_time(ns / 1e3, time_unit)

        extra = [k for k in self.group_by if k != "name"]
        titles = {"input_shapes": "Input Shapes", "module_path": "Module", "stack": "Source Location"}
        limits = {"input_shapes": max_shapes_column_width, "module_path": 80, "stack": max_src_column_width}
        memory = shown_memory(self.rows)
        columns = [
            Column("Name", left=True, cap=max_name_column_width, narrows=True),
            *(Column(title, drop=drop) for title, drop in TORCH_COLUMNS[:-1]),
            *(Column(MEMORY_TITLES[k], drop=8 + i) for i, k in enumerate(memory)),
            Column(TORCH_COLUMNS[-1][0], drop=TORCH_COLUMNS[-1][1]),
            *(Column(titles[k], left=True, cap=limits[k], narrows=True) for k in extra),
        ]
        body = [
            [
                r["name"],
                f"{100 * r['self_cpu_ns'] / cpu_all:.2f}%",
                t(r["self_cpu_ns"]),
                f"{100 * r['cpu_total_ns'] / cpu_all:.2f}%",
                t(r["cpu_total_ns"]),
                t(r["cpu_avg_ns"]),
                t(r["self_gpu_ns"]),
                f"{100 * r['self_gpu_ns'] / gpu_all:.2f}%",
                t(r["gpu_total_ns"]),
                t(r["gpu_avg_ns"]),
                *(format_memory(r[k]) for k in memory),
                str(r["calls"]),
            ]
            + [str(r[k]) if r[k] is not None else "" for k in extra]
            for r in rows
        ]
        fitted = fit(columns, body, max_width)
        text = ([header] if header else []) + fitted.lines
        text.append(f"Self CPU time total: {t(self.self_cpu_total_ns)}")
        text.append(f"Self CUDA time total: {t(self.self_gpu_total_ns)}")
        if (note := fitted.note(max_width)) is not None:
            text.append(note)
        return "\n".join(text) + "\n"


@dataclass(frozen=True, slots=True)
class Grouping:
    """How ops are grouped into key_averages rows (torch's key_averages arguments)."""

    input_shape: bool = False
    stack_n: int = 0
    module: bool = False
    top_level: bool = False

    @property
    def keys(self) -> tuple[str, ...]:
        extra = ("input_shapes",) * self.input_shape + ("module_path",) * self.module + ("stack",) * (self.stack_n > 0)
        return ("name", *extra)

    @property
    def columns(self) -> list[str]:
        """The ops columns :meth:`aggregate` reads (beside the GPU times it is given)."""
        extra = [{"name": "op_name"}.get(k, k) for k in self.keys]
        return [*extra, "self_cpu_ns", "total_cpu_ns", *(["parent_id"] if self.top_level else [])]

    def aggregate(self, ops: pa.Table, self_gpu: np.ndarray, total_gpu: np.ndarray) -> pa.Table:
        """Sums per group of ``ops`` (all of a report's ops or a part of them), before
        averages: rows of several parts add up with :func:`finish`."""
        name = ops.column("op_name") if "op_name" in ops.column_names else ops.column("name")
        cols: dict[str, Any] = {
            "name": name,
            "self_cpu_ns": ops.column("self_cpu_ns"),
            "cpu_total_ns": ops.column("total_cpu_ns"),
            "self_gpu_ns": pa.array(self_gpu),
            "gpu_total_ns": pa.array(total_gpu),
            **cost_inputs(ops),
            **memory_inputs(ops),
        }
        if self.input_shape:
            cols["input_shapes"] = ops.column("input_shapes").fill_null("")
        if self.module:
            cols["module_path"] = ops.column("module_path").fill_null("")
        if self.stack_n > 0:
            stack = ops.column("stack").combine_chunks()
            firsts = pc.list_slice(stack, 0, self.stack_n)
            cols["stack"] = pc.fill_null(pc.binary_join(firsts, " <- "), "")
        table = pa.table(cols)
        if self.top_level:
            table = table.filter(ops.column("parent_id").is_null())
        agg = table.group_by(list(self.keys), use_threads=False).aggregate(
            [
                ("self_cpu_ns", "sum"),
                ("cpu_total_ns", "sum"),
                ("self_gpu_ns", "sum"),
                ("gpu_total_ns", "sum"),
                ("name", "count"),
                *COST_AGGREGATES,
                *((c, "sum") for c in MEMORY_COLUMNS),
            ]
        )
        return agg.rename_columns(
            [c.replace("_sum", "").replace("_min", "").replace("name_count", "calls") for c in agg.column_names]
        )


def finish(
    parts: list[pa.Table],
    grouping: Grouping,
    self_cpu_total_ns: int,
    self_gpu_total_ns: int,
    unattributed: tuple[int, int] | None = None,
) -> KeyAverages:
    """KeyAverages from the :meth:`Grouping.aggregate` rows of a report's parts (rows with the
    same keys add up), the report's self CPU and GPU totals over all its ops, and with
    ``unattributed`` (calls, GPU ns of the GPU ops no op launched) a ``[no op]`` row."""
    agg = parts[0] if len(parts) == 1 else add_up(parts, list(grouping.keys))
    gpu_total = self_gpu_total_ns
    if unattributed is not None and unattributed[0]:
        agg = pa.concat_tables([agg, _no_op_row(agg.schema, *unattributed)])
        gpu_total += unattributed[1]
    return KeyAverages(_with_averages(agg), self_cpu_total_ns, gpu_total, grouping.keys)


def add_up(parts: list[pa.Table], keys: list[str]) -> pa.Table:
    """Rows of several parts with the same keys added up (columns as :meth:`Grouping.aggregate`)."""
    rows = pa.concat_tables([p.select(list(parts[0].column_names)) for p in parts])
    agg = rows.group_by(keys, use_threads=False).aggregate(
        [
            *((c, "sum") for c in ("self_cpu_ns", "cpu_total_ns", "self_gpu_ns", "gpu_total_ns", "calls")),
            *COST_AGGREGATES,
            *((c, "sum") for c in MEMORY_COLUMNS if c in parts[0].column_names),
        ]
    )
    return agg.rename_columns([c.removesuffix("_sum").removesuffix("_min") for c in agg.column_names])


def _no_op_row(schema: pa.Schema, calls: int, ns: int) -> pa.Table:
    """The ``[no op]`` row: ``calls`` GPU ops no op launched, ``ns`` of GPU time."""
    row: dict[str, object] = dict.fromkeys(schema.names, "")  # the other grouping keys
    row.update(name=NO_OP, self_cpu_ns=0, cpu_total_ns=0, self_gpu_ns=ns, gpu_total_ns=ns, calls=calls)
    # No op, no cost: every call unknown (nvbridge.analysis.throughput).
    row.update(flops=0, bytes=0, unknown_calls=row["calls"], compute_dtype=None)
    row.update(dict.fromkeys(MEMORY_COLUMNS))  # no op, no allocator events of its own
    return pa.table({f.name: pa.array([row[f.name]], f.type) for f in schema})


def _with_averages(agg: pa.Table) -> pa.Table:
    # unknown cost on every call: FLOPs and bytes null, as in the dataset (not the 0 summed)
    if "flops" in agg.column_names:
        unknown = np_col(agg, "unknown_calls", fill=0) >= np_col(agg, "calls", fill=0)
        for name in ("flops", "bytes"):
            values = pa.array(np_col(agg, name, fill=0), pa.int64(), mask=unknown)
            agg = agg.set_column(agg.column_names.index(name), name, values)
    calls = agg.column("calls")
    agg = agg.append_column("cpu_avg_ns", pc.divide(agg.column("cpu_total_ns").cast(pa.float64()), calls))
    return agg.append_column("gpu_avg_ns", pc.divide(agg.column("gpu_total_ns").cast(pa.float64()), calls))


def merge_averages(parts: list[KeyAverages]) -> KeyAverages:
    """One table over several reports: rows with the same keys add up."""
    columns = [c for c in parts[0].rows.column_names if c not in ("cpu_avg_ns", "gpu_avg_ns")]
    agg = add_up([p.rows.select(columns) for p in parts], list(parts[0].group_by))
    return KeyAverages(
        _with_averages(agg),
        sum(p.self_cpu_total_ns for p in parts),
        sum(p.self_gpu_total_ns for p in parts),
        parts[0].group_by,
    )
