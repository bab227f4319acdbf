"""The small whole-report output tables: marks, syncs, threads, devices."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col
from nvbridge.readers.raw import DEVICES_SCHEMA, Tail


def devices_table(used: Iterable[int], devices: pa.Table) -> pa.Table:
    """The devices the report names, plus any device a GPU op ran on (``used``) that it does
    not name; every column of DEVICES_SCHEMA (null where a reader knows no such fact)."""
    seen = set(np_col(devices, "device_id", fill=-1).tolist())
    extra = sorted({int(d) for d in used if d >= 0} - seen)
    for field in DEVICES_SCHEMA:
        if field.name not in devices.column_names:
            devices = devices.append_column(field.name, pa.nulls(devices.num_rows, field.type))
    extra_t = pa.table(
        {
            f.name: pa.array(extra, f.type) if f.name == "device_id" else pa.nulls(len(extra), f.type)
            for f in DEVICES_SCHEMA
        },
        schema=DEVICES_SCHEMA,
    )
    named = devices.select(DEVICES_SCHEMA.names).cast(DEVICES_SCHEMA)
    return pa.concat_tables([named, extra_t]).sort_by([("device_id", "ascending")])


def other_tables(syncs: pa.Table, sync_api: np.ndarray, used_devices: Iterable[int], tail: Tail) -> dict[str, pa.Table]:
    """Every output table but ops, api_calls and gpu_ops, once the engine has seen the last
    window: ``syncs`` with the API call each belongs to (``sync_api``, -1 none), the reader's
    ``tail``, and the devices it names plus those GPU ops ran on (``used_devices``)."""
    return {
        "marks": tail.marks.sort_by([("ts_ns", "ascending")]),
        "syncs": syncs.append_column("api_call_id", pa.array(sync_api, mask=sync_api < 0)).sort_by(
            [("start_ns", "ascending")]
        ),
        "threads": tail.threads.drop_columns(["thread_key"]).sort_by(
            [("process_id", "ascending"), ("thread_id", "ascending")]
        ),
        "devices": devices_table(used_devices, tail.devices),
    }
