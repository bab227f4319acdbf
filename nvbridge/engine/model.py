"""What the engine produces: the correlated tables, and the flag bits they carry."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from nvbridge.readers.raw import SourceInfo

# ops.flags bits
OPEN_AT_END = 1
CROSS_THREAD = 2
CROSSING = 4
# gpu_ops.flags bits
NO_API_CALL = 1
BY_TIME = 2  # launched outside every range on its thread, attributed by time (time_op_id)


@dataclass(frozen=True, slots=True)
class Model:
    """The correlated profile: Arrow tables keyed by op_id / api_call_id / gpu_op_id."""

    info: SourceInfo
    ops: pa.Table
    api_calls: pa.Table
    gpu_ops: pa.Table
    marks: pa.Table
    syncs: pa.Table
    threads: pa.Table
    devices: pa.Table
    memory: pa.Table


@dataclass(frozen=True, slots=True)
class WindowRows:
    """What the engine makes of one window: the ops rows final now, and the api_calls and
    gpu_ops rows that continue those handed on before, in id order (each may have no rows); the
    window's memory rows (in time order) and ``memory_frees``: allocations of earlier windows
    freed in this one (their memory row and free time, nvbridge.engine.memory.FREES), which the
    sinks write into those rows' ``free_ns``."""

    ops: pa.Table
    api_calls: pa.Table
    gpu_ops: pa.Table
    memory: pa.Table | None = None
    memory_frees: pa.Table | None = None
