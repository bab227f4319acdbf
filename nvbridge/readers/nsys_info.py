"""Nsight Systems export facts besides the event tables: the source description (producer,
time base, session start, capture end, rank, the profiler's diagnostics) and the devices.

Shared by the whole-file reader and the streamed one (:mod:`nvbridge.readers.nsys`).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from nvbridge.readers._db import Database
from nvbridge.readers.devices import clock_mhz, compute_capability, devices_table, gbps, sm_count
from nvbridge.readers.nsys_rank_marks import rank_facts
from nvbridge.readers.raw import SourceInfo
from nvbridge.readers.validate import BadRows


def _meta(db: Database) -> dict[str, str]:
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if db.has(table):
            return {str(k): str(v) for k, v in db.scalar_rows(f"SELECT name, value FROM {table}")}
    return {}


def source_info(db: Database) -> SourceInfo:
    meta = _meta(db)
    start_utc = None
    if db.has("TARGET_INFO_SESSION_START_TIME"):
        rows = db.scalar_rows("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
        start_utc = meta_int(rows, "TARGET_INFO_SESSION_START_TIME.utcEpochNs")
    capture_end = None
    if db.has("ANALYSIS_DETAILS") and "duration" in db.columns("ANALYSIS_DETAILS"):
        rows = db.scalar_rows("SELECT duration FROM ANALYSIS_DETAILS LIMIT 1")
        capture_end = meta_int(rows, "ANALYSIS_DETAILS.duration")
    normalized = meta.get("EXPORT_PARAM_TIME_NORMALIZE", "false").lower() == "true"
    if normalized and capture_end is not None and start_utc is not None:
        capture_end += start_utc
    marked, world_size, process_ranks = rank_facts(db)
    return SourceInfo(
        source=db.name,
        kind="nsys",
        rank=marked if marked is not None else _rank(db),
        world_size=world_size,
        process_ranks=process_ranks,
        producer=meta.get("EXPORT_PRODUCT_NAME", "Nsight Systems").replace("NVIDIA ", ""),
        producer_version=meta.get("EXPORT_PRODUCT_VERSION"),
        schema_version=meta.get("EXPORT_SCHEMA_VERSION"),
        time_base="epoch" if normalized else "session",
        session_start_utc_ns=start_utc,
        capture_end_ns=capture_end,
        diagnostics=_diagnostics(db),
    )


def _diagnostics(db: Database) -> str | None:
    """Warnings and errors the profiler recorded (severity 2-3 of ENUM_DIAGNOSTIC_SEVERITY_LEVEL),
    each once, in time order."""
    if not {"text", "severity"} <= db.columns("DIAGNOSTIC_EVENT"):
        return None
    rows = db.scalar_rows("SELECT text FROM DIAGNOSTIC_EVENT WHERE severity IN (2, 3) ORDER BY timestamp")
    texts = list(dict.fromkeys(str(t).strip() for (t,) in rows if t is not None and str(t).strip()))
    return "\n".join(texts) or None


def meta_int(rows: list[tuple[Any, ...]], where: str) -> int | None:
    """The first row's integer, None when absent; text or BLOB there is damage."""
    if not rows or rows[0][0] is None:
        return None
    if not isinstance(rows[0][0], int):
        raise BadRows(
            f"{where} holds {rows[0][0]!r} instead of an integer; the export is damaged or "
            "was edited; export the report again."
        )
    return rows[0][0]


def _rank(db: Database) -> int | None:
    """RANK from the captured process environment: that one variable, nothing else is kept."""
    if not db.has("META_DATA_CAPTURE"):
        return None
    rows = db.scalar_rows(
        "SELECT value FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT_VARIABLE%' AND value LIKE 'RANK=%'"
    )
    for (value,) in rows:
        text = str(value)[5:]
        if text.isdigit():
            return int(text)
    return None


# The device facts of each table that describes GPUs, newest first, by the column names each
# version uses: (table, id column, SM count, SM clock, major, minor, bandwidth, bytes per unit).
_DEVICE_TABLES = (
    ("TARGET_INFO_GPU", "id", "smCount", "clockRate", "computeMajor", "computeMinor", "memoryBandwidth", 1),
    ("TARGET_INFO_GPU", "deviceId", "smCount", "clockRate", "computeMajor", "computeMinor", "memoryBandwidth", 1),
    # about 2021: CUPTI's device record (bandwidth in KB/s, clock in kHz)
    (
        "TARGET_INFO_CUDA_GPU",
        "deviceId",
        "numMultiprocessors",
        "coreClockRate",
        "computeCapabilityMajor",
        "computeCapabilityMinor",
        "globalMemoryBandwidth",
        1000,
    ),
)


def device_table(db: Database) -> pa.Table:
    """One row per device id (nvbridge.readers.devices), from the first table that names devices
    and records their facts (a 2021-era TARGET_INFO_GPU has names only: a TARGET_INFO_CUDA_GPU
    beside it is preferred), else from the first that names them."""
    named = [t for t in _DEVICE_TABLES if {t[1], "name"} <= db.columns(t[0])]
    if not named:
        return devices_table([])
    table, id_col, sm, clock, major, minor, bw, unit = next((t for t in named if t[2] in db.columns(t[0])), named[0])
    have = db.columns(table)
    wanted = [c if c in have else "NULL" for c in (bw, sm, clock, major, minor, "chipName", "uuid")]
    rows = db.scalar_rows(f"SELECT DISTINCT {id_col}, name, {', '.join(wanted)} FROM {table} ORDER BY {id_col}")
    sms = _cuda_device_sms(db) if sm not in have else {}
    return devices_table(
        [
            (
                meta_int([r], f"{table}.{id_col}"),
                None if r[1] is None else str(r[1]),
                gbps(r[2], unit),
                sm_count(r[3]) or sms.get(r[8], sms.get(r[0])),
                clock_mhz(r[4]),
                compute_capability(r[5], r[6]),
                str(r[7]) if isinstance(r[7], str) and r[7] else None,
            )
            for r in rows
        ]
    )


def _cuda_device_sms(db: Database) -> dict[Any, int]:
    """SM counts from TARGET_INFO_CUDA_DEVICE (2025+), by GPU uuid and by GPU id, for a
    TARGET_INFO_GPU without them."""
    have = db.columns("TARGET_INFO_CUDA_DEVICE")
    if not {"gpuId", "numMultiprocessors"} <= have:
        return {}
    uuid = "uuid" if "uuid" in have else "NULL"
    rows = db.scalar_rows(f"SELECT gpuId, {uuid}, numMultiprocessors FROM TARGET_INFO_CUDA_DEVICE")
    out: dict[Any, int] = {}
    for gpu, key, n in rows:
        if sm_count(n):
            out.update({gpu: n} if key is None else {gpu: n, key: n})
    return out
