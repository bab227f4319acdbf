"""The Parquet dataset: the column contract, meta, round trip, and the public surface."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import nvbridge
from nvbridge.dataset.schema import DATASET_SCHEMA_VERSION
from tests.conftest import raw, real_db

I64, STR = pa.int64(), pa.string()
CONTRACT = {
    "ops": {
        "op_id": I64,
        "parent_id": I64,
        "depth": I64,
        "name": STR,
        "domain": STR,
        "process_id": I64,
        "thread_id": I64,
        "start_ns": I64,
        "end_ns": I64,
        "self_cpu_ns": I64,
        "total_cpu_ns": I64,
        "self_gpu_ns": I64,
        "total_gpu_ns": I64,
        "gpu_op_count": I64,
        "flags": I64,
    },
    "gpu_ops": {
        "gpu_op_id": I64,
        "op_id": I64,
        "api_call_id": I64,
        "kind": STR,
        "name": STR,
        "device_id": I64,
        "stream_id": I64,
        "process_id": I64,
        "correlation_id": I64,
        "start_ns": I64,
        "end_ns": I64,
        "bytes": I64,
        "grid_x": I64,
        "grid_y": I64,
        "grid_z": I64,
        "block_x": I64,
        "block_y": I64,
        "block_z": I64,
    },
    "api_calls": {
        "api_call_id": I64,
        "op_id": I64,
        "name": STR,
        "process_id": I64,
        "thread_id": I64,
        "correlation_id": I64,
        "start_ns": I64,
        "end_ns": I64,
    },
    "threads": {"process_id": I64, "thread_id": I64},
    "devices": {
        "device_id": I64,
        "name": STR,
        "memory_gbps": pa.float64(),
        "sm_count": I64,
        "sm_clock_mhz": pa.float64(),
        "compute_capability": STR,
        "chip": STR,
    },
}


# Columns beside the contract ones, with their types (docs/dataset.md).
ADDED = {
    "ops": {"time_self_gpu_ns": I64, "time_total_gpu_ns": I64, "time_gpu_op_count": I64},
    "gpu_ops": {"time_op_id": I64, "flags": I64},
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ds") / "fsdp"
    nvbridge.convert(real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"), out)
    return out


def test_contract_columns_and_types(dataset: Path) -> None:
    report = nvbridge.load(dataset)
    for table, columns in [*CONTRACT.items(), *ADDED.items()]:
        schema = getattr(report, table).schema
        for name, typ in columns.items():
            got = schema.field(name).type
            if pa.types.is_dictionary(got):  # repeated names are stored dictionary-encoded
                got = got.value_type
            assert got == typ, (table, name)


def test_round_trip_equals_in_memory(dataset: Path) -> None:
    on_disk = nvbridge.load(dataset)
    in_memory = nvbridge.load(real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"))
    for table in ("ops", "gpu_ops", "api_calls", "threads", "devices", "marks", "syncs"):
        assert getattr(on_disk, table).equals(getattr(in_memory, table)), table


def test_meta_describes_source_and_never_copies_environment(dataset: Path) -> None:
    report = nvbridge.load(dataset)
    meta = report.meta
    assert meta["dataset_schema_version"] == DATASET_SCHEMA_VERSION
    assert (meta["kind"], meta["producer_version"], meta["time_base"]) == ("nsys", "2026.2.1.210", "session")
    start = raw(
        real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"), "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME"
    )[0][0]
    assert meta["session_start_utc_ns"] == str(start)
    text = " ".join(f"{k}={v}" for k, v in meta.items())
    assert "ENVIRONMENT" not in text and "PATH=" not in text and "HOME" not in text
    assert meta["rows.ops"] == "17113"


def test_nvprof_time_base_is_epoch() -> None:
    meta = nvbridge.load(real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite")).meta
    assert meta["time_base"] == "epoch"


def test_duckdb_reads_the_dataset(dataset: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    top = duckdb.sql(f"""
        SELECT name, sum(self_gpu_ns) AS gpu FROM '{dataset}/ops.parquet'
        GROUP BY name ORDER BY gpu DESC LIMIT 1""").fetchall()[0]
    kernels = duckdb.sql(f"SELECT count(*) FROM '{dataset}/gpu_ops.parquet' WHERE kind = 'kernel'").fetchall()[0]
    assert kernels == (
        raw(real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"), "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0],
    )
    assert top is not None and top[1] > 0


def test_load_rejects_a_directory_that_is_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(nvbridge.ExportError, match="is not an nvbridge dataset"):
        nvbridge.load(tmp_path)


def test_public_surface() -> None:
    assert nvbridge.__all__ == sorted(nvbridge.__all__)
    for name in nvbridge.__all__:
        assert hasattr(nvbridge, name) or name == "emit_nvtx"
