"""What a CUDA API call does to the host, by its name (nvbridge.gpu.cuda_api), and the sync records'
labels read from the export's own enum table (nvbridge.readers.nsys_tables)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np

import nvbridge
from nvbridge.gpu import cuda_api
from tests import raw_gpu
from tests.conftest import real_db
from tests.raw_gpu import EVERY, path_of


def test_every_api_name_of_the_real_exports_is_classified_as_the_oracle_does() -> None:
    names: set[str] = set()
    for name in EVERY:
        names.update(c.name for c in raw_gpu.read(path_of(name)).calls)
    assert len(names) > 60
    for n in sorted(names):
        cls = cuda_api.classify(n)
        assert (cls == cuda_api.SYNC) == raw_gpu.is_sync(n), n
        assert (cls == cuda_api.SYNC_COPY) == raw_gpu.is_sync_copy(n), n
        assert bool(cuda_api.blocks_host(np.array([cls]))[0]) == raw_gpu.blocks(n), n
    for n in ("cudaStreamWaitEvent_v3020", "cuStreamWaitEvent", "cudaEventQuery_v3020", "cudaStreamQuery_v3020"):
        assert cuda_api.classify(n) == cuda_api.NO_WAIT
    assert cuda_api.classify("cudaMemcpyPeer_v4000") == cuda_api.ASYNC_COPY  # asynchronous to the host
    assert cuda_api.classify("cudaStreamSynchronize_ptsz_v7000") == cuda_api.SYNC
    assert cuda_api.base_name("cudaGetDeviceProperties_v2_v12000") == "cudaGetDeviceProperties"


def _sync_labels(path: Path) -> dict[str, set[str]]:
    """sync_type labels per API call name of the converted report."""
    report = nvbridge.load(path)
    names = report.api_calls.column("name").to_pylist()
    out: dict[str, set[str]] = {}
    for call, label in zip(
        report.syncs.column("api_call_id").to_pylist(), report.syncs.column("sync_type").to_pylist()
    ):
        if call is not None:
            out.setdefault(cuda_api.base_name(names[call]), set()).add(label)
    return out


def test_sync_labels_come_from_the_files_enum_and_2025_deprecated_codes(tmp_path: Path) -> None:
    src = real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite")
    assert _sync_labels(src)["cudaStreamSynchronize"] == {"Stream sync"}
    # a file whose enum numbers the kinds differently: the labels follow the file's table
    moved = tmp_path / "moved.sqlite"
    shutil.copyfile(src, moved)
    con = sqlite3.connect(moved)
    con.execute("UPDATE ENUM_CUPTI_SYNC_TYPE SET id = id + 10")  # ids are unique: two steps
    con.execute("UPDATE ENUM_CUPTI_SYNC_TYPE SET id = (id - 9) % 5")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET syncType = (syncType + 1) % 5")
    con.commit()
    con.close()
    assert _sync_labels(moved) == _sync_labels(src)
    # 2025.1 stores 0 in syncType and the code in deprecatedSyncType
    old = tmp_path / "old.sqlite"
    shutil.copyfile(src, old)
    con = sqlite3.connect(old)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET deprecatedSyncType = syncType, syncType = 0")
    con.commit()
    con.close()
    assert _sync_labels(old) == _sync_labels(src)
