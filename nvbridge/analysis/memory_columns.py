"""torch's memory columns in the key_averages rows: names, sort keys and formatting.

``ops`` carries torch's four memory columns where the report recorded allocator events
(docs/memory.md): ``self_cpu_memory_usage``, ``cpu_memory_usage``, ``self_cuda_memory_usage``,
``cuda_memory_usage``, bytes allocated minus freed while the op was open (without / with its
children). torch's ``key_averages`` sums them per group, and so do the rows here; they are null
where the report recorded no memory at all (an older dataset, or a capture without
``profile_memory``), and the table shows them only where some row has a value.
"""

from __future__ import annotations

import pyarrow as pa

# torch's attribute names on FunctionEventAvg, which are also its sort_by keys, and the table's titles
MEMORY_COLUMNS = ("self_cpu_memory_usage", "cpu_memory_usage", "self_cuda_memory_usage", "cuda_memory_usage")
MEMORY_TITLES = {
    "cpu_memory_usage": "CPU Mem",
    "self_cpu_memory_usage": "Self CPU Mem",
    "cuda_memory_usage": "CUDA Mem",
    "self_cuda_memory_usage": "Self CUDA Mem",
}
KIB = 1024


def format_memory(nbytes: int | None) -> str:
    """torch's ``_format_memory``: ``1.50 Mb``, ``-4.00 Kb``, ``12 b`` (binary units, as torch)."""
    if nbytes is None:
        return ""
    for unit, size in (("Gb", KIB**3), ("Mb", KIB**2), ("Kb", KIB)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} b"


def memory_inputs(ops: pa.Table) -> dict[str, pa.ChunkedArray | pa.Array]:
    """The memory columns of ``ops`` for grouping: null where the table has none (an older
    dataset), so every part's rows have the same columns and add up."""
    return {c: ops.column(c) if c in ops.column_names else pa.nulls(ops.num_rows, pa.int64()) for c in MEMORY_COLUMNS}


def has_memory(rows: pa.Table) -> bool:
    """Whether some row carries a memory figure (the report recorded allocator events)."""
    return any(c in rows.column_names and rows.column(c).null_count < rows.num_rows for c in MEMORY_COLUMNS)


def shown_memory(rows: pa.Table) -> list[str]:
    """The memory columns the table shows, in torch's order: the CPU pair where some row
    allocated CPU memory, the CUDA pair where some allocated CUDA memory (torch's rule)."""
    shown: list[str] = []
    for pair in (("cpu_memory_usage", "self_cpu_memory_usage"), ("cuda_memory_usage", "self_cuda_memory_usage")):
        if all(c in rows.column_names for c in pair) and any(
            any(v for v in rows.column(c).to_pylist() if v is not None) for c in pair
        ):
            shown += pair
    return shown
