"""The dataset's tables, declared once: each table's columns, in file order, with their Arrow types.

Everything else derives from here: the conversion pipeline checks the engine's tables against
it before any sink takes them (:func:`conform`, nvbridge.conversion.pipeline), the dataset checks
take their integer columns from it (nvbridge.dataset.check), the summary's and the trace's
column lists are picked from it (:func:`pick`), and tests/test_schema.py holds docs/dataset.md,
the tests' contract and every file a conversion writes to it. Columns marked *contract* in
docs/dataset.md are :data:`CONTRACT`.

It also declares :class:`ReportTables`, the one protocol for "a report's tables": a loaded
``nvbridge.Report``, a dataset streamed from its files, or a conversion held in memory
(:class:`InMemory`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from nvbridge.columns import DICT_STR

I64, F64, STR, BOOL = pa.int64(), pa.float64(), pa.string(), pa.bool_()

# Written in meta; a reader refuses another. Bump it to rename or retype a *contract* column.
DATASET_SCHEMA_VERSION = "1"

# Every table of a dataset, in the order meta counts them.
TABLES = ("ops", "gpu_ops", "api_calls", "marks", "syncs", "threads", "devices", "memory")

OPS = pa.schema(
    [
        *(("op_id", I64), ("parent_id", I64), ("depth", I64), ("name", STR), ("domain", DICT_STR)),
        *(("domain_id", I64), ("process_id", I64), ("thread_id", I64), ("start_ns", I64), ("end_ns", I64)),
        *(("self_cpu_ns", I64), ("total_cpu_ns", I64), ("self_gpu_ns", I64), ("total_gpu_ns", I64)),
        *(("gpu_op_count", I64), ("total_gpu_op_count", I64), ("api_call_count", I64)),
        *(("time_self_gpu_ns", I64), ("time_total_gpu_ns", I64), ("time_gpu_op_count", I64)),
        *(("gpu_start_ns", I64), ("gpu_end_ns", I64), ("style", DICT_STR), ("end_thread_id", I64), ("flags", I64)),
        # PyTorch's columns, parsed from the name (nvbridge.engine.names, nvbridge.engine.semantics)
        *(("op_name", STR), ("seq", I64), ("torch_op_id", I64), ("input_op_ids", STR), ("fwd_tid", I64)),
        *(("is_backward", BOOL), ("input_shapes", STR), ("input_dtypes", STR), ("input_values", STR)),
        # costs (nvbridge.engine.costs)
        *(("flops", I64), ("bytes", I64), ("compute_dtype", STR), ("dtype_assumed", BOOL), ("dtype_inferred", BOOL)),
        *(("module_path", STR), ("fwd_op_id", I64), ("step", I64), ("stack", pa.list_(STR))),
        *(("achieved_tflops", F64), ("achieved_gbps", F64), ("intensity", F64)),
        # memory (nvbridge.engine.memory; null where the report has no memory events)
        *(("self_cpu_memory_usage", I64), ("cpu_memory_usage", I64), ("self_cuda_memory_usage", I64)),
        *(("cuda_memory_usage", I64), ("cpu_memory_peak", I64), ("cuda_memory_peak", I64)),
    ]
)
GPU_OPS = pa.schema(
    [
        *(("gpu_op_id", I64), ("op_id", I64), ("time_op_id", I64), ("api_call_id", I64)),
        *(("kind", DICT_STR), ("name", DICT_STR), ("device_id", I64), ("stream_id", I64), ("context_id", I64)),
        *(("process_id", I64), ("thread_id", I64), ("correlation_id", I64), ("start_ns", I64), ("end_ns", I64)),
        *(("bytes", I64), ("copy_kind", DICT_STR), ("src_kind", DICT_STR), ("dst_kind", DICT_STR)),
        *(("grid_x", I64), ("grid_y", I64), ("grid_z", I64), ("block_x", I64), ("block_y", I64), ("block_z", I64)),
        *(("registers_per_thread", I64), ("static_shared_bytes", I64), ("dynamic_shared_bytes", I64)),
        *(("short_name", DICT_STR), ("mangled_name", DICT_STR), ("graph_node_id", I64), ("flags", I64)),
    ]
)
API_CALLS = pa.schema(
    [
        *(("api_call_id", I64), ("op_id", I64), ("name", DICT_STR), ("kind", DICT_STR), ("process_id", I64)),
        *(("thread_id", I64), ("correlation_id", I64), ("start_ns", I64), ("end_ns", I64)),
        *(("gpu_op_count", I64), ("return_value", I64)),
    ]
)
# marks.domain: dictionary-encoded from Nsight Systems, plain text from nvprof (both read as text).
MARKS = pa.schema([("ts_ns", I64), ("name", STR), ("domain", DICT_STR), ("process_id", I64), ("thread_id", I64)])
# The order an Nsight Systems export gives; nvprof's readers put device_id and process_key later.
SYNCS = pa.schema(
    [
        *(("start_ns", I64), ("end_ns", I64), ("device_id", I64), ("stream_id", I64), ("correlation_id", I64)),
        *(("process_key", I64), ("sync_type", DICT_STR), ("api_call_id", I64)),
    ]
)
THREADS = pa.schema([("process_id", I64), ("thread_id", I64), ("thread_name", STR), ("process_name", STR)])
DEVICES = pa.schema(
    [
        *(("device_id", I64), ("name", STR), ("memory_gbps", F64), ("sm_count", I64), ("sm_clock_mhz", F64)),
        *(("compute_capability", STR), ("chip", STR)),
    ]
)
# One row per allocator event, in time order (nvbridge.engine.memory, docs/memory.md).
MEMORY = pa.schema(
    [
        *(("ts_ns", I64), ("process_id", I64), ("thread_id", I64), ("device", DICT_STR), ("device_id", I64)),
        *(("address", I64), ("bytes", I64), ("total_allocated", I64), ("total_reserved", I64), ("op_id", I64)),
        *(("step", I64), ("alloc_ns", I64), ("free_ns", I64), ("source", DICT_STR)),
    ]
)
META = pa.schema([("key", STR), ("value", STR)])
# Across ranks (nvbridge.dataset.collectives): at a many-report dataset's root, or inside the
# dataset of one report of several processes; not one of every report's TABLES.
COLLECTIVES = pa.schema(
    [
        *(("op", STR), ("comm", STR), ("seq", I64), ("rank", I64), ("report", STR), ("process_id", I64)),
        *(("step", I64), ("bytes", I64), ("arrival_ns", I64), ("start_ns", I64), ("end_ns", I64)),
        *(("wait_ns", I64), ("transfer_ns", I64), ("algbw_gbps", F64), ("busbw_gbps", F64), ("op_id", I64)),
        *(("source", DICT_STR), ("matched", BOOL), ("bytes_source", DICT_STR)),
    ]
)
# Beside a report's tables where its export holds NCCL's NVTX payloads (nvbridge.dataset.nccl_bytes):
# one row per NCCL range whose payload decoded; not one of every report's TABLES.
NCCL_PAYLOADS = pa.schema(
    [
        *(("op_id", I64), ("name", STR), ("domain_id", I64), ("schema_id", I64), ("comm", STR), ("bytes", I64)),
        *(("peer", I64), ("root", I64), ("red_op", I64), ("nranks", I64), ("rank", I64)),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "ops": OPS,
    "gpu_ops": GPU_OPS,
    "api_calls": API_CALLS,
    "marks": MARKS,
    "syncs": SYNCS,
    "threads": THREADS,
    "devices": DEVICES,
    "memory": MEMORY,
    "collectives": COLLECTIVES,
    "nccl_payloads": NCCL_PAYLOADS,
}
# Tables a dataset written by an older nvbridge lacks: read as the declared table without rows.
OPTIONAL = frozenset({"memory"})
# Tables whose columns a reader may list in another order (see SYNCS); the others are in file order.
ANY_ORDER = frozenset({"syncs"})

# The columns docs/dataset.md marks *contract*: stable within a dataset schema version, and what
# the dataset checks require of each table a reader opens (nvbridge.dataset.check.REQUIRED).
CONTRACT: dict[str, tuple[str, ...]] = {
    "ops": (
        *("op_id", "parent_id", "depth", "name", "domain", "process_id", "thread_id", "start_ns", "end_ns"),
        *("self_cpu_ns", "total_cpu_ns", "self_gpu_ns", "total_gpu_ns", "gpu_op_count", "flags"),
        *("op_name", "seq", "torch_op_id", "input_shapes", "input_op_ids", "fwd_tid", "is_backward"),
        *("module_path", "fwd_op_id"),
    ),
    "gpu_ops": (
        *("gpu_op_id", "op_id", "api_call_id", "kind", "name", "device_id", "stream_id", "context_id"),
        *("process_id", "correlation_id", "start_ns", "end_ns", "bytes"),
        *("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"),
    ),
    "api_calls": (
        *("api_call_id", "op_id", "name", "process_id", "thread_id", "correlation_id", "start_ns", "end_ns"),
    ),
    "marks": (),
    "syncs": (),
    "threads": ("process_id", "thread_id"),
    "devices": ("device_id",),
    "memory": ("ts_ns", "device", "bytes", "total_allocated", "total_reserved", "op_id"),
    "collectives": ("op", "comm", "seq", "rank", "step", "bytes", "arrival_ns", "wait_ns", "transfer_ns"),
    "nccl_payloads": (),  # read by nvbridge alone (nvbridge.dataset.nccl_bytes), no contract
}


def pick(table: str, columns: Sequence[str]) -> list[str]:
    """``columns`` of ``table``, each checked to be one of the dataset's: a list of columns a
    reader needs, stated where it is used, cannot name one the dataset does not have."""
    unknown = [c for c in columns if c not in SCHEMAS[table].names]
    if unknown:
        raise KeyError(f"{table} has no column {', '.join(unknown)} (nvbridge.dataset.schema)")
    return list(columns)


def same_type(declared: pa.DataType, actual: pa.DataType) -> bool:
    """Whether a column of type ``actual`` is one of type ``declared``: the same type, or text
    dictionary-encoded where it is declared plain or the reverse (both read as text)."""
    if declared == actual:
        return True
    text = (pa.string(), pa.large_string())

    def value(t: pa.DataType) -> pa.DataType:
        return t.value_type if pa.types.is_dictionary(t) else t

    return value(declared) in text and value(actual) in text


def mismatches(table: str, schema: pa.Schema) -> list[str]:
    """How a table's ``schema`` differs from the declared one (empty: it is one), one line each."""
    declared = SCHEMAS[table]
    found = []
    names = schema.names if table not in ANY_ORDER else [n for n in declared.names if n in schema.names]
    if list(names) != declared.names or set(schema.names) != set(declared.names):
        found.append(f"{table} columns {schema.names}, declared {declared.names}")
    for field in declared:
        if field.name in schema.names and not same_type(field.type, schema.field(field.name).type):
            found.append(f"{table}.{field.name} is {schema.field(field.name).type}, declared {field.type}")
    return found


def conform(table: str, rows: pa.Table) -> pa.Table:
    """``rows``, once checked to hold table ``table``'s columns, in order, of its types (the
    engine's output, as it is built).

    Raises:
        AssertionError: they do not (a column added in one place and not declared here).
    """
    found = mismatches(table, rows.schema)
    if found:
        raise AssertionError("; ".join(found))
    return rows


class ReportTables(Protocol):
    """A report's tables: ``meta`` (key/value text), and each table of :data:`TABLES` whole
    (:meth:`table`), its row count, or in parts of only some columns (:meth:`chunks`, which may
    skip parts entirely outside ``window``, (start_ns, end_ns))."""

    @property
    def meta(self) -> Mapping[str, str | None]: ...

    def table(self, name: str) -> pa.Table: ...

    def rows(self, name: str) -> int: ...

    def chunks(
        self, name: str, columns: Sequence[str], window: tuple[int | None, int | None] = (None, None)
    ) -> Iterator[pa.Table]: ...


@dataclass(frozen=True)
class InMemory:
    """A report's tables held in memory (a conversion's, before anything is written)."""

    meta: Mapping[str, str | None]
    tables: Mapping[str, pa.Table]

    def table(self, name: str) -> pa.Table:
        return self.tables[name]

    def rows(self, name: str) -> int:
        return int(self.tables[name].num_rows)

    def chunks(
        self, name: str, columns: Sequence[str], window: tuple[int | None, int | None] = (None, None)
    ) -> Iterator[pa.Table]:
        yield self.tables[name].select(list(columns))
