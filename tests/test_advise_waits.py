"""Host syncs and blocking copies, classified by their API call and checked against raw SQL.

The oracle (tests/raw_gpu.py) reads each export with sqlite3 and decides what blocked the host
from the call's name (nsys) or callback id (nvprof) alone, never from the SYNCHRONIZATION
record's ``syncType``, whose codes drift across Nsight Systems versions (SCHEMA.md 1.5). On
every real export and sample: the host's blocked time per API name and per op, and the
blocking copies' bytes, copies and seconds, equal advise's findings.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.cli import cli
from tests import raw_gpu, raw_waits
from tests.conftest import raw, real_db
from tests.raw_gpu import EVERY, path_of
from tests.test_timeline import PEAKS

DLPROF = "nsys-2022.1-dlprof-torch-seq.sqlite"
OPENMP = "nsys-2023.3-openmp-offload.sqlite"
WINDOWS = "nsys-2026.2-windows-cs336.sqlite"
NVFUSER = "nsys-2024.6-nvfuser-cpp-nvtx.sqlite"
WAIT_KINDS = ("host_sync", "blocking_copy_sync")


def _advice(path: Path) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["advise", str(path), "--json", "--limit", "-1", *PEAKS])
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def _label(ops: Any, r: raw_gpu.Range | None) -> str:
    """advise's op label of a raw range: the op row with its times and thread, by nvbridge's name."""
    if r is None:
        return "(no op range)"
    names = ops[(ops.start_ns == r.start) & (ops.end_ns == r.end) & (ops.process_id == r.pid)].op_name.tolist()
    assert names, r
    name = str(names[0])
    return "ProfilerStep (outside ops)" if name.startswith("ProfilerStep#") else name


def _processes_with_gpu(r: raw_gpu.Raw) -> set[int]:
    return {p for p, _ in raw_gpu.lanes(r)}


@pytest.mark.parametrize("name", EVERY)
def test_host_blocked_time_by_api_name_matches_raw_sql(name: str) -> None:
    path = path_of(name)
    r = raw_gpu.read(path)
    gpu = _processes_with_gpu(r)
    want: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for c in r.calls:
        if raw_gpu.blocks(c.name) and c.pid in gpu:
            want[raw_gpu.base(c.name)][0] += 1
            want[raw_gpu.base(c.name)][1] += c.dur
    advice = _advice(path)
    assert {n: [calls, ns] for n, calls, ns in advice.get("waits", [])} == dict(want)
    waited = sum(f["figures"].get("wait_ns", 0) for f in advice["findings"])
    assert waited == sum(ns for _, ns in want.values())
    assert all("sync" in f["kind"] for f in advice["findings"] if "wait_ns" in f["figures"])


@pytest.mark.parametrize("name", EVERY)
def test_waits_per_op_and_blocking_copies_match_raw_sql(name: str) -> None:
    path = path_of(name)
    r = raw_gpu.read(path)
    waits = raw_waits.waits(r)
    ops = nvbridge.load(path).ops.to_pandas() if r.ranges else None
    want: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * 6)
    for w in waits:
        kind = "blocking_copy_sync" if w.copies else "host_sync"
        row = want[(kind, _label(ops, w.op))]
        row[0] += w.wait_ns
        row[1] += w.call_ns
        row[2] += sum(g.nbytes for g in w.copies)
        row[3] += len(w.copies)
        row[4] += sum(g.host_pageable for g in w.copies)
        row[5] += sum(g.end - g.start for g in w.copies)  # the copies' GPU seconds
    got: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * 6)
    for f in _advice(path)["findings"]:
        if f["kind"] in WAIT_KINDS:
            fig = f["figures"]
            row = got[(f["kind"], f["op"])]
            for i, k in enumerate(("wait_ns", "call_ns", "bytes", "copies", "pageable", "copy_ns")):
                row[i] += fig.get(k, 0)
    assert dict(got) == dict(want)


def test_drifting_sync_codes_are_not_read_on_the_2022_1_export() -> None:
    """2022.1 stores cudaStreamWaitEvent as 3, the code of a stream sync, and
    cudaDeviceSynchronize as 1, an event sync's: 40 GPU-side waits were host syncs."""
    path = real_db(DLPROF)
    codes = dict(
        raw(
            path,
            """SELECT s.value, group_concat(DISTINCT y.syncType) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION AS y
            JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r ON r.correlationId = y.correlationId
            JOIN StringIds AS s ON s.id = r.nameId GROUP BY s.value""",
        )
    )
    assert codes["cudaStreamWaitEvent_v3020"] == codes["cudaStreamSynchronize_v3020"] == "3"
    assert codes["cudaDeviceSynchronize_v3020"] == "1"
    (waited,) = raw(
        path,
        """SELECT sum(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r JOIN StringIds AS s ON s.id = r.nameId
        WHERE s.value IN ('cudaDeviceSynchronize_v3020', 'cudaStreamSynchronize_v3020',
                          'cudaEventSynchronize_v3020', 'cudaMemcpy_v3020')""",
    )[0:1][0]
    advice = _advice(path)
    assert sum(f["figures"].get("wait_ns", 0) for f in advice["findings"]) == waited
    assert "cudaStreamWaitEvent" not in {n for n, _, _ in advice["waits"]}


def test_openmp_waits_are_the_calls_durations_not_the_sync_records() -> None:
    """The OpenMP-offload export: a host sync lasts as long as its call blocked the thread."""
    path = real_db(OPENMP)
    calls = raw(
        path,
        """SELECT count(*), sum(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r
        JOIN StringIds AS s ON s.id = r.nameId WHERE s.value = 'cuStreamSynchronize'""",
    )[0]
    advice = _advice(path)
    assert advice["waits"] == [["cuStreamSynchronize", calls[0], calls[1]]]
    assert sum(f["figures"].get("wait_ns", 0) for f in advice["findings"]) == calls[1]


def test_pageable_cuda_copies_are_blocking_copies_with_the_right_fix() -> None:
    """The Windows 2026.2 export's 113 pageable HtoD copies, each followed by a
    cudaStreamSynchronize: torch's own blocking .cuda(), never 'remove the synchronize'."""
    path = real_db(WINDOWS)
    ((copies, nbytes),) = raw(
        path, "SELECT count(*), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 AND srcKind = 0"
    )
    advice = _advice(path)
    found = [f for f in advice["findings"] if f["kind"] == "blocking_copy_sync"]
    assert sum(f["figures"]["copies"] for f in found) == copies == 113
    assert sum(f["figures"]["htod_bytes"] for f in found) == nbytes
    assert all("pin" in f["fix"].lower() and "non_blocking=True" in f["fix"] for f in found)
    assert not any(f["kind"] == "pageable_copy" for f in advice["findings"])  # counted once, as blocking
    for f in advice["findings"]:
        assert "Remove the explicit synchronize" not in f["fix"] or f["kind"] == "host_sync"


def test_tensor_cuda_syncs_on_the_2022_1_export_are_blocking_copies() -> None:
    path = real_db(DLPROF)
    advice = _advice(path)
    cuda = [f for f in advice["findings"] if f["kind"] == "blocking_copy_sync" and f["op"] == "Tensor.cuda"]
    assert cuda and sum(f["figures"]["copies"] for f in cuda) == 11
    assert not [f for f in advice["findings"] if f["kind"] == "host_sync" and f["op"] == "Tensor.cuda"]
