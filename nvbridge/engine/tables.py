"""The output tables besides ops: API calls and GPU ops with the op each belongs to, and the
small whole-report tables (marks, syncs, threads, devices)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from nvbridge.columns import DICT_STR, np_col, take_batches
from nvbridge.engine.keys import through
from nvbridge.engine.model import NO_API_CALL

if TYPE_CHECKING:
    from nvbridge.engine.correlator import Correlator

# gpu_ops columns copied from the reader's table as they are.
_GPU_PASSED = (
    "bytes",
    "copy_kind",
    "src_kind",
    "dst_kind",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "registers_per_thread",
    "static_shared_bytes",
    "dynamic_shared_bytes",
    "short_name",
    "mangled_name",
    "graph_node_id",
)


def api_calls_table(api: pa.Table, api_op: np.ndarray, gpu_count: np.ndarray, first: int, stop: int) -> pa.Table:
    """Rows ``first:stop`` of the api_calls table (``api_op``: each call's op, -1 none)."""
    api, api_op = api.slice(first, stop - first), api_op[first:stop]
    return pa.table(
        {
            "api_call_id": pa.array(np.arange(first, stop, dtype=np.int64)),
            "op_id": pa.array(api_op, mask=api_op < 0),
            "name": api.column("name").cast(DICT_STR),
            "kind": api.column("kind"),
            "process_id": api.column("process_id"),
            "thread_id": api.column("thread_id"),
            "correlation_id": api.column("correlation_id"),
            "start_ns": api.column("start_ns"),
            "end_ns": api.column("end_ns"),
            "gpu_op_count": pa.array(gpu_count[first:stop].astype(np.int64)),
            "return_value": api.column("return_value"),
        }
    )


def gpu_ops_table(engine: Correlator, first: int, stop: int) -> pa.Table:
    """Rows ``first:stop`` of the gpu_ops table, in start (gpu_op_id) order."""
    api = engine.api
    g_start, g_end, g_op_all, g_api_all = engine.gpu_columns()
    g_api, g_op = g_api_all[first:stop], g_op_all[first:stop]
    gpu = take_batches(engine.gpu, engine.gpu_order[first:stop])
    g_pid_from_api = through(np_col(api, "process_id", fill=0), g_api)
    g_tid_from_api = through(np_col(api, "thread_id", fill=0), g_api)
    g_pkey = np_col(gpu, "process_key", fill=0)
    # Without an API row, nsys still knows the process from globalPid; nvprof does not.
    g_pid = np.where(g_api >= 0, g_pid_from_api, (g_pkey >> 24) & 0xFFFFFF)
    g_pid_known = (g_api >= 0) | (engine.info.kind == "nsys")
    cols = {
        "gpu_op_id": pa.array(np.arange(first, stop, dtype=np.int64)),
        "op_id": pa.array(g_op, mask=g_op < 0),
        "api_call_id": pa.array(g_api, mask=g_api < 0),
        "kind": gpu.column("kind"),
        "name": gpu.column("name"),
        "device_id": gpu.column("device_id"),
        "stream_id": gpu.column("stream_id"),
        "context_id": gpu.column("context_id"),
        "process_id": pa.array(g_pid, mask=~g_pid_known),
        "thread_id": pa.array(g_tid_from_api, mask=g_api < 0),
        "correlation_id": gpu.column("correlation_id"),
        "start_ns": pa.array(g_start[first:stop]),
        "end_ns": pa.array(g_end[first:stop]),
    }
    for name in _GPU_PASSED:
        cols[name] = gpu.column(name)
    cols["flags"] = pa.array(np.where(g_api < 0, NO_API_CALL, 0).astype(np.int64))
    return pa.table(cols)


def devices_table(engine: Correlator, devices: pa.Table) -> pa.Table:
    """The devices the report names, plus any device a GPU op ran on that it does not name
    (known once the engine is set up: a streamed trace's header needs it before the windows)."""
    seen = set(np_col(devices, "device_id", fill=-1).tolist())
    extra = sorted({int(d) for d in np.unique(np_col(engine.gpu, "device_id", fill=-1)) if d >= 0} - seen)
    if "memory_gbps" not in devices.column_names:  # a reader that knows no bandwidth
        devices = devices.append_column("memory_gbps", pa.nulls(devices.num_rows, pa.float64()))
    extra_t = pa.table(
        {
            "device_id": pa.array(extra, pa.int64()),
            "name": pa.nulls(len(extra), pa.string()),
            "memory_gbps": pa.nulls(len(extra), pa.float64()),
        }
    )
    return pa.concat_tables([devices.cast(extra_t.schema), extra_t]).sort_by([("device_id", "ascending")])


def other_tables(engine: Correlator, marks: pa.Table, threads: pa.Table, devices: pa.Table) -> dict[str, pa.Table]:
    """Every output table but ops, api_calls and gpu_ops (:meth:`Correlator.api_calls`,
    :meth:`Correlator.gpu_ops`), once the engine has seen the last window."""
    syncs, s_api = engine.syncs, engine.sync_api
    return {
        "marks": marks.sort_by([("ts_ns", "ascending")]),
        "syncs": syncs.append_column("api_call_id", pa.array(s_api, mask=s_api < 0)).sort_by(
            [("start_ns", "ascending")]
        ),
        "threads": threads.drop_columns(["thread_key"]).sort_by(
            [("process_id", "ascending"), ("thread_id", "ascending")]
        ),
        "devices": devices_table(engine, devices),
    }
