"""``load_nvprof``: torch's own EventList of FunctionEvents, from any report nvbridge reads.

A drop-in for the deprecated ``torch.autograd.profiler.load_nvprof`` that also reads Nsight
Systems, keeps real thread ids, charges each kernel to one op only and builds the tree, so
``key_averages()`` works. Imports torch; the rest of nvbridge never does. Above conversion (a
report is converted in memory by nvbridge.conversion.memory.load_tables).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from nvbridge.columns import np_col
from nvbridge.conversion.memory import load_tables
from nvbridge.errors import MissingDependency


def load_nvprof(path: str | os.PathLike[str]) -> Any:
    """Read a report (or converted dataset) as ``torch.autograd.profiler_util.EventList``.

    Times are microseconds relative to the first op, as torch's profiler reports them.

    Raises:
        MissingDependency: torch is not installed (``pip install torch``).
    """
    # torch's profiler classes are untyped; keep strict checking for the rest of nvbridge.
    try:
        from torch.autograd import DeviceType  # type: ignore[attr-defined]
        from torch.autograd.profiler_util import EventList, FunctionEvent
    except ImportError as exc:
        raise MissingDependency(
            f"nvbridge.load_nvprof needs torch ({exc}); install it with: pip install torch"
        ) from exc

    report = load_tables(path)
    ops = report.ops
    names = ops.column("op_name").to_pylist()
    threads = np_col(ops, "thread_id", fill=0).tolist()
    origin = int(np_col(ops, "start_ns").min(initial=0))
    starts = ((np_col(ops, "start_ns") - origin) / 1e3).tolist()
    ends = ((np_col(ops, "end_ns") - origin) / 1e3).tolist()
    seqs = np_col(ops, "seq", fill=-1).tolist()
    shapes = ops.column("input_shapes").to_pylist()
    stacks = ops.column("stack").to_pylist()
    events = [
        FunctionEvent(  # type: ignore[no-untyped-call]
            id=i,
            name=names[i],
            thread=threads[i],
            start_us=starts[i],
            end_us=ends[i],
            sequence_nr=seqs[i],
            use_device="cuda",
            node_id=0,
            stack=stacks[i] or [],
            input_shapes=shapes[i] or [],
        )
        for i in range(ops.num_rows)
    ]
    g = report.gpu_ops
    owners = np_col(g, "op_id", fill=-1)
    durations = ((np_col(g, "end_ns") - np_col(g, "start_ns")) / 1e3).tolist()
    g_start = ((np_col(g, "start_ns") - origin) / 1e3).tolist()
    streams = np_col(g, "stream_id", fill=0).tolist()
    # As torch.profiler does: each GPU op is a kernel of the op that launched it *and* an
    # event of its own on the device, which is what torch's tables sum for "Self CUDA".
    for j, (op, name, device, dur) in enumerate(
        zip(owners.tolist(), g.column("name").to_pylist(), np_col(g, "device_id", fill=0).tolist(), durations)
    ):
        if op < 0:
            continue
        events[op].append_kernel(name, device, dur)
        events.append(
            FunctionEvent(  # type: ignore[no-untyped-call]
                id=ops.num_rows + j,
                name=name,
                thread=streams[j],
                start_us=g_start[j],
                end_us=g_start[j] + dur,
                use_device="cuda",
                node_id=0,
                stack=[],
                input_shapes=[],
                device_type=DeviceType.CUDA,
                device_index=device,
            )
        )
    parents = np_col(ops, "parent_id", fill=-1)
    fwd = np_col(ops, "fwd_op_id", fill=-1)
    for i in np.flatnonzero(parents >= 0).tolist():
        events[i].set_cpu_parent(events[parents[i]])
        events[parents[i]].append_cpu_child(events[i])
    for i in np.flatnonzero(fwd >= 0).tolist():
        events[i].fwd_thread = threads[fwd[i]]
    result = EventList(events, use_device="cuda")  # type: ignore[no-untyped-call]
    result._tree_built = True  # the tree comes from nvbridge's per-thread nesting, not time alone
    return result
