"""Every real export converts, and its figures match ones computed here from the raw tables."""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import nvbridge
from nvbridge.engine import CROSS_THREAD, NO_API_CALL, OPEN_AT_END, check, correlate
from nvbridge.readers import read_profile
from tests.conftest import NSYS_FILES, NVPROF_FILES, raw, real_db

NSYS_GPU_UNION = """
    SELECT start, end, correlationId, globalPid, 'kernel' AS kind FROM CUPTI_ACTIVITY_KIND_KERNEL
    UNION ALL SELECT start, end, correlationId, globalPid, 'memcpy' FROM CUPTI_ACTIVITY_KIND_MEMCPY
    UNION ALL SELECT start, end, correlationId, globalPid, 'memset' FROM CUPTI_ACTIVITY_KIND_MEMSET
"""


def _count(path: Path, table: str, where: str = "1") -> int:
    have = {r[0] for r in raw(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    return int(raw(path, f"SELECT count(*) FROM {table} WHERE {where}")[0][0]) if table in have else 0


@pytest.mark.parametrize("name", NSYS_FILES)
def test_nsys_row_counts_match_raw_tables(name: str) -> None:
    path = real_db(name)
    report = nvbridge.load(path)
    assert report.meta["kind"] == "nsys"
    assert report.ops.num_rows == _count(path, "NVTX_EVENTS", "eventType IN (59, 60, 70, 71)")
    assert report.api_calls.num_rows == _count(path, "CUPTI_ACTIVITY_KIND_RUNTIME")
    kinds = Counter(report.gpu_ops.column("kind").to_pylist())
    assert kinds["kernel"] == _count(path, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert kinds["memcpy"] == _count(path, "CUPTI_ACTIVITY_KIND_MEMCPY")
    assert kinds["memset"] == _count(path, "CUPTI_ACTIVITY_KIND_MEMSET")


@pytest.mark.parametrize("name", NVPROF_FILES)
def test_nvprof_row_counts_match_raw_tables(name: str) -> None:
    path = real_db(name)
    report = nvbridge.load(path)
    assert report.meta["kind"] == "nvprof"
    assert report.meta["schema_version"] == "12"
    assert report.ops.num_rows == _count(path, "CUPTI_ACTIVITY_KIND_MARKER", "flags = 2")
    assert report.api_calls.num_rows == (
        _count(path, "CUPTI_ACTIVITY_KIND_RUNTIME") + _count(path, "CUPTI_ACTIVITY_KIND_DRIVER")
    )
    gpu = sum(
        _count(path, f"CUPTI_ACTIVITY_KIND_{t}") for t in ("CONCURRENT_KERNEL", "KERNEL", "MEMCPY", "MEMCPY2", "MEMSET")
    )
    assert report.gpu_ops.num_rows == gpu


def test_detected_versions() -> None:
    expected = {
        "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite": ("2026.2.1.210", "3.25.0"),
        "nsys-2024.2-pyprof-markers.sqlite": ("2024.2.1.106", "3.11.1"),
        "nsys-2024.6-nvfuser-cpp-nvtx.sqlite": ("2024.6.2.25", "3.16.1"),
        "nsys-2023.3-openmp-offload.sqlite": ("2023.3.1.92", "3.4.0"),
        "nsys-2021-pre-metadata.sqlite": (None, None),
    }
    for name, (product, schema) in expected.items():
        info = read_profile(real_db(name)).info
        assert (info.producer_version, info.schema_version) == (product, schema), name


def test_no_gpu_time_counted_twice(any_real_db: Path) -> None:
    """sum(self_gpu_ns) + unattributed GPU time == summed GPU op durations, for every file."""
    model = correlate(read_profile(any_real_db))
    check(model)
    ops, gpu = model.ops.to_pandas(), model.gpu_ops.to_pandas()
    dur = gpu.end_ns - gpu.start_ns
    assert int(ops.self_gpu_ns.sum()) + int(dur[gpu.op_id.isna()].sum()) == int(dur.sum())
    roots = ops[ops.parent_id.isna()]
    assert int(roots.total_gpu_ns.sum()) == int(ops.self_gpu_ns.sum())


def test_nsys_every_gpu_op_owner_matches_sql() -> None:
    """Each GPU op's op is the innermost same-thread range around its launch (computed in SQL)."""
    path = real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite")
    sql = f"""
        WITH g AS ({NSYS_GPU_UNION})
        SELECT g.kind, g.start, g.correlationId, a.correlationId IS NOT NULL,
          (SELECT n.start || '|' || coalesce(n.text, s.value) FROM NVTX_EVENTS n
             LEFT JOIN StringIds s ON s.id = n.textId
            WHERE n.globalTid = a.globalTid AND n.eventType IN (59, 60) AND n.endGlobalTid IS NULL
              AND n.start <= a.start AND n.end >= a.end
            ORDER BY n.start DESC, n.end ASC LIMIT 1)
        FROM g LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME a
          ON a.correlationId = g.correlationId AND (a.globalTid & -16777216) = g.globalPid
    """
    expected = {(k, s, c): (has_api, owner) for k, s, c, has_api, owner in raw(path, sql)}
    report = nvbridge.load(path)
    ops = report.df("ops").set_index("op_id")
    gpu = report.df("gpu_ops")
    got = {}
    for row in gpu.itertuples():
        owner = None
        if not np.isnan(row.op_id):
            op = ops.loc[int(row.op_id)]
            owner = f"{op.start_ns}|{op['name']}"
        got[(row.kind, row.start_ns, row.correlation_id)] = (int(not np.isnan(row.api_call_id)), owner)
    assert got == expected
    # The figures the issue asks to pin: 16 GPU ops lost their launch to the capture window,
    # and a known kernel's owner.
    assert int(((gpu["flags"] & NO_API_CALL) != 0).sum()) == 16 == sum(1 for v in expected.values() if not v[0])
    assert sorted(report.ops.column("process_id").unique().to_pylist()) == [148, 149]
    # NVIDIA's nvtxkernsum puts the 1,573,114 ns SendRecv kernel of rank 149 in range
    # "AllToAll4D, seq = 46286, op_id = 993812"; its innermost range is NCCL's ncclGroupEnd.
    [kernel] = gpu[(gpu.end_ns - gpu.start_ns == 1573114) & (gpu.process_id == 149)].itertuples()
    owner = ops.loc[int(kernel.op_id)]
    assert (owner["name"], owner.domain_id, kernel.device_id) == ("ncclGroupEnd", 1, 1)
    chain = []
    at = owner.parent_id
    while not np.isnan(at):
        chain.append(ops.loc[int(at)]["name"])
        at = ops.loc[int(at)].parent_id
    assert "AllToAll4D, seq = 46286, op_id = 993812" in chain


def test_nsys_thread_and_process_ids_decode_like_nvidia_sql() -> None:
    path = real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite")
    expected = Counter(
        raw(
            path,
            """
        SELECT globalTid / 0x1000000 % 0x1000000, globalTid % 0x1000000 FROM CUPTI_ACTIVITY_KIND_RUNTIME""",
        )
    )
    api = nvbridge.load(path).df("api_calls")
    assert Counter(zip(api.process_id, api.thread_id)) == expected


def test_nsys_registered_strings_and_domains() -> None:
    """NCCL's ranges use registered strings (textId) in their own domain."""
    path = real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite")
    expected = Counter(
        r[0]
        for r in raw(
            path,
            """
        SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId
         WHERE n.text IS NULL AND n.eventType = 59""",
        )
    )
    ops = nvbridge.load(path).df("ops")
    nccl = ops[ops.domain_id == 1]
    assert Counter(nccl["name"]) == expected
    assert sum(expected.values()) == 420
    torch_ranges = _count(path, "NVTX_EVENTS", "domainId = 0 AND text LIKE '%, seq = %'")
    assert ops[ops.domain_id == 0]["name"].str.contains(", seq = ").sum() == torch_ranges == 8241


def test_open_ranges_are_clamped_and_flagged() -> None:
    """mmagic's capture ended with 1404 PyProf push ranges still open."""
    path = real_db("nsys-2024.2-pyprof-markers.sqlite")
    duration = raw(path, "SELECT duration FROM ANALYSIS_DETAILS")[0][0]
    open_rows = _count(path, "NVTX_EVENTS", f"eventType = 59 AND (end IS NULL OR end = {duration})")
    assert open_rows == 1404
    ops = nvbridge.load(path).df("ops")
    flagged = ops[(ops["flags"] & OPEN_AT_END) != 0]
    assert len(flagged) == open_rows
    assert (flagged.end_ns == duration).all()
    assert not (ops["flags"] & CROSS_THREAD).any()


def _nvprof_pairs(path: Path) -> list[tuple[int, int, int, int, str]]:
    """(pid, tid, start, end, name) of every nvprof range, decoded here from the raw rows."""
    strings = dict(raw(path, "SELECT _id_, value FROM StringTable"))
    starts = {
        i: (ts, blob, name)
        for i, ts, blob, name in raw(
            path, "SELECT id, timestamp, objectId, name FROM CUPTI_ACTIVITY_KIND_MARKER WHERE flags = 2"
        )
    }
    ends = dict(raw(path, "SELECT id, timestamp FROM CUPTI_ACTIVITY_KIND_MARKER WHERE flags = 4"))
    out = []
    for i, (ts, blob, name) in starts.items():
        pid, tid = struct.unpack_from("<II", blob)
        out.append((pid, tid, ts, ends[i], strings[name]))
    return out


def test_nvprof_every_gpu_op_owner_matches_brute_force() -> None:
    """nvprof: blob-decoded threads, signed threadIds and innermost-range ownership."""
    path = real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite")
    ranges = _nvprof_pairs(path)
    api = {
        c: (p, t & 0xFFFFFFFF, s, e)
        for c, p, t, s, e in raw(
            path, "SELECT correlationId, processId, threadId, start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME"
        )
    }
    expected = {}
    for start, corr in raw(
        path,
        """
            SELECT start, correlationId FROM CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
            UNION ALL SELECT start, correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY
            UNION ALL SELECT start, correlationId FROM CUPTI_ACTIVITY_KIND_MEMSET""",
    ):
        p, t, s, e = api[corr]
        around = [r for r in ranges if (r[0], r[1]) == (p, t) and r[2] <= s and e <= r[3]]
        inner = max(around, key=lambda r: (r[2], -r[3]), default=None)
        expected[(start, corr)] = None if inner is None else (inner[2], inner[4])
    report = nvbridge.load(path)
    ops = report.df("ops").set_index("op_id")
    got = {}
    for row in report.df("gpu_ops").itertuples():
        op = ops.loc[int(row.op_id)]
        got[(row.start_ns, row.correlation_id)] = (op.start_ns, op["name"])
    assert got == expected
    assert len(got) == 189
    ops_threads = Counter(zip(report.ops.column("process_id").to_pylist(), report.ops.column("thread_id").to_pylist()))
    assert ops_threads == Counter((p, t) for p, t, *_ in ranges)
    assert ops_threads[(15938, 0xEADC3740)] == 481  # the main thread: forward ranges


def test_nvprof_threads_and_process_name() -> None:
    path = real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite")
    threads = nvbridge.load(path).df("threads")
    api_threads = {t & 0xFFFFFFFF for (t,) in raw(path, "SELECT DISTINCT threadId FROM CUPTI_ACTIVITY_KIND_RUNTIME")}
    marker_threads = {
        struct.unpack_from("<I", b, 4)[0]
        for (b,) in raw(path, "SELECT DISTINCT objectId FROM CUPTI_ACTIVITY_KIND_MARKER")
    }
    assert sorted(threads.thread_id) == sorted(api_threads | marker_threads)
    assert len(threads) == 3
    assert set(threads.process_id) == {15938}
    assert set(threads.process_name) == {"python language-model.py"}


def test_nvprof_kernel_names_are_demangled() -> None:
    gpu = nvbridge.load(real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite")).df("gpu_ops")
    kernels = gpu[gpu.kind == "kernel"]
    assert not kernels["name"].str.startswith("_Z").any()
    itanium = kernels["mangled_name"].str.startswith("_Z")
    assert itanium.sum() > 100 and (kernels["name"] != kernels["mangled_name"])[itanium].all()
    assert (
        (
            kernels["name"] == "void indexSelectLargeIndex<float, unsigned int, 2, 2, -2, true>(TensorInfo"
            "<float, unsigned int>, TensorInfo<float, unsigned int>, TensorInfo<long, unsigned int>, int, int, "
            "unsigned int, unsigned int, long)"
        ).sum()
        == raw(
            real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite"),
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL k JOIN StringTable s ON s._id_ = k.name "
            "WHERE s.value = '_Z21indexSelectLargeIndexIfjLi2ELi2ELin2ELb1EEv10TensorInfoIT_T0_ES3_S0_IlS2_EiiS2_S2_l'",
        )[0][0]
        == 2
    )
    copies = Counter(gpu[gpu.kind == "memcpy"]["name"])
    assert copies == Counter(
        f"Memcpy {k}"
        for (k,) in raw(
            real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite"),
            "SELECT CASE copyKind WHEN 1 THEN 'HtoD' WHEN 2 THEN 'DtoH' WHEN 8 THEN 'DtoD' END "
            "FROM CUPTI_ACTIVITY_KIND_MEMCPY",
        )
    )


def test_empty_capture_converts_to_empty_tables(tmp_path: Path) -> None:
    [result] = nvbridge.convert(real_db("nvprof-2020-empty-capture.sqlite"), tmp_path / "out")
    assert (result.ops, result.api_calls, result.kernels) == (0, 0, 0)
    report = nvbridge.load(tmp_path / "out")
    assert report.ops.num_rows == 0 and report.gpu_ops.num_rows == 0


def test_driver_only_capture_keeps_every_gpu_op_unattributed() -> None:
    """The 2021 export has no NVTX: every kernel is kept, launched by cuLaunchKernel, owned by no op."""
    path = real_db("nsys-2021-pre-metadata.sqlite")
    report = nvbridge.load(path)
    gpu = report.df("gpu_ops")
    assert gpu.op_id.isna().all()
    api = report.df("api_calls").set_index("api_call_id")
    launchers = Counter(api.loc[gpu.api_call_id.dropna().astype(int)]["name"])
    assert launchers["cuLaunchKernel"] == _count(path, "CUPTI_ACTIVITY_KIND_KERNEL")
