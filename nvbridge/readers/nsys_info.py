"""Nsight Systems export facts besides the event tables: the source description (producer,
time base, session start, capture end, rank, the profiler's diagnostics) and the devices.

Shared by the whole-file reader and the streamed one (:mod:`nvbridge.readers.nsys`).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from nvbridge.profile import SourceInfo
from nvbridge.readers._db import Database
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
    return SourceInfo(
        source=db.name,
        kind="nsys",
        rank=_rank(db),
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


def device_table(db: Database) -> pa.Table:
    for table, id_col in (
        ("TARGET_INFO_GPU", "id"),
        ("TARGET_INFO_GPU", "deviceId"),
        ("TARGET_INFO_CUDA_GPU", "deviceId"),
    ):
        if id_col in db.columns(table) and "name" in db.columns(table):
            # memoryBandwidth: bytes/s as the driver reports it (for % of peak, nvbridge.gpus).
            bw = "memoryBandwidth" if "memoryBandwidth" in db.columns(table) else "NULL"
            rows = db.scalar_rows(f"SELECT DISTINCT {id_col}, name, {bw} FROM {table} ORDER BY {id_col}")
            return pa.table(
                {
                    "device_id": pa.array([meta_int([r], f"{table}.{id_col}") for r in rows], pa.int64()),
                    "name": pa.array([None if r[1] is None else str(r[1]) for r in rows], pa.string()),
                    "memory_gbps": pa.array(
                        [float(r[2]) / 1e9 if isinstance(r[2], (int, float)) and r[2] else None for r in rows],
                        pa.float64(),
                    ),
                }
            )
    return pa.table(
        {
            "device_id": pa.array([], pa.int64()),
            "name": pa.array([], pa.string()),
            "memory_gbps": pa.array([], pa.float64()),
        }
    )
