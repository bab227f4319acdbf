"""Kernel attribution on the nvprof PyTorch report, against torch's own `load_nvprof`.

torch's parser (torch/autograd/profiler.py, parse_nvprof_trace) ignores threads: it charges a
kernel to every range whose time span strictly contains the launching runtime call, on any
thread. nvbridge charges a kernel only to ranges on the launching thread. So, per range:

    torch's kernel time == nvbridge's inclusive kernel time + kernels launched meanwhile
                           from *other* threads (torch's error, computed here from raw rows)

and wherever no other thread launched anything during the range, the two agree exactly.
"""

from __future__ import annotations

import os
import struct
import warnings
from typing import Any

import pytest

import nvbridge
from tests.conftest import raw, real_db, subtree_kernel_ns


def _torch_load_nvprof() -> Any:
    try:
        import torch.autograd.profiler as profiler
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("torch is missing in CI: the README's test command installs torch==2.13.0")
        pytest.skip("torch not installed (pip install torch==2.13.0)")
    return profiler.load_nvprof


def test_kernel_attribution_agrees_with_torch_where_torch_is_right() -> None:
    path = real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch marks load_nvprof deprecated
        events = _torch_load_nvprof()(str(path))
    torch_ns = {(int(e.time_range.start), e.name): sum(k.duration for k in e.kernels) for e in events}

    report = nvbridge.load(path)
    ops = report.df("ops")
    acc = subtree_kernel_ns(ops, report.df("gpu_ops"))
    ours = {(int(s), n): int(a) for s, n, a in zip(ops.start_ns, ops["name"], acc)}
    assert ours.keys() == torch_ns.keys()
    assert len(ours) == 683

    # Independent of both: kernels launched during each range from another thread.
    launches = raw(
        path,
        """
        SELECT r.threadId & 4294967295, r.start, r.end, k.end - k.start
          FROM CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL k
          JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId""",
    )
    strings = dict(raw(path, "SELECT _id_, value FROM StringTable"))
    ends = dict(raw(path, "SELECT id, timestamp FROM CUPTI_ACTIVITY_KIND_MARKER WHERE flags = 4"))
    other_thread: dict[tuple[int, str], int] = {}
    for mid, start, blob, name in raw(
        path,
        """
            SELECT id, timestamp, objectId, name FROM CUPTI_ACTIVITY_KIND_MARKER WHERE flags = 2""",
    ):
        tid = struct.unpack_from("<I", blob, 4)[0]
        other_thread[(start, strings[name])] = sum(
            d for t, s, e, d in launches if t != tid and start < s and e < ends[mid]
        )

    agree = [k for k in ours if other_thread[k] == 0]
    differ = [k for k in ours if other_thread[k] != 0]
    for key in agree:
        assert ours[key] == torch_ns[key], key
    for key in differ:
        assert torch_ns[key] == ours[key] + other_thread[key], key
    # Where and why they differ: ranges that were open while the autograd thread launched
    # backward kernels (torch 1.4 runs backward on its own thread).
    assert len(differ) == sum(1 for k in ours if other_thread[k]) > 0
    assert sum(ours.values()) < sum(torch_ns.values())
    print(f"agree on {len(agree)} ranges, differ on {len(differ)} (other-thread launches)")


def test_nvbridge_load_nvprof_is_a_working_drop_in() -> None:
    """torch's own EventList, tree built, key_averages works, on nvprof and Nsight Systems alike."""
    _torch_load_nvprof()
    for name in ("nvprof-2020-pytorch14-pyprof-lm.sqlite", "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"):
        path = real_db(name)
        events = nvbridge.load_nvprof(path)
        ours = {r["name"]: r for r in nvbridge.load(path).key_averages().sorted(row_limit=-1).to_pylist()}
        table = events.key_averages().table(sort_by="self_cuda_time_total", row_limit=5)
        assert "Self CUDA" in table
        torch_rows = {e.key: e for e in events.key_averages()}
        for op, row in ours.items():
            if row["self_gpu_ns"]:
                assert abs(torch_rows[op].self_device_time_total - row["self_gpu_ns"] / 1e3) < 1e-3 * row["calls"]
                assert torch_rows[op].count == row["calls"]
        threads = {e.thread for e in events if e.device_type.name == "CPU"}
        assert threads == set(nvbridge.load(path).ops.column("thread_id").to_pylist())


def test_events_views() -> None:
    report = nvbridge.load(real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite"))
    events = list(report.events())
    assert len(events) == report.ops.num_rows
    backward = [e for e in events if e.is_backward and e.fwd_event is not None]
    assert len(backward) == 61
    e = backward[0]
    assert e.fwd_event is not None and e.fwd_event.sequence_nr == e.sequence_nr
    with_kernels = [e for e in events if e.kernels]
    assert sum(len(e.kernels) for e in with_kernels) == 189
    for ev in with_kernels[:20]:
        assert sum(k.duration_ns for k in ev.kernels) == ev.self_device_time_total_ns
        for child in ev.cpu_children:
            assert child.cpu_parent is not None and child.cpu_parent.id == ev.id
