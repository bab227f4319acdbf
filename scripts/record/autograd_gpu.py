#!/usr/bin/env python3
"""Add a SYNTHETIC, labelled GPU layer to the autograd-thread recording, at its launch marks.

    python -m scripts.record.autograd_gpu sample_db/autograd_thread_ranges.sqlite
    # -> sample_db/autograd_thread_ranges+synthetic_gpu.sqlite

scripts/workloads/autograd_thread.py left an NVTX mark where each GPU launch would happen, on the
thread that would make it: ``launch aten::<op>`` for a kernel (main thread in ``Forward`` and
``Optimizer``, ``pt_autograd_0`` during ``Backward``) and ``copy <bytes>`` for an input batch
copy (``pt_data_pin``, between steps). This script turns each mark into what a CUDA build does
there, with the rows and rules of scripts/record/synthetic_gpu.py (same tables, names, device 0,
context 1, stream 7, serialized launches, kernel durations by op name): one
``cudaLaunchKernel_v7000`` + kernel, or one ``cudaMemcpyAsync_v3020`` + pageable HtoD copy, the
call starting at the mark on the mark's thread and lasting ``API_NS`` (or ending 1 ns before the
thread's next NVTX event, so calls never overlap or cross a range). So the backward kernels
are launched from a thread with no open range while the main thread waits inside its
``Backward`` range, which is the shape nvbridge attributes by time (gpu_ops.time_op_id). The
marks themselves stay (they are the real recording). Everything added is listed in
``NVBRIDGE_SYNTHETIC``; nothing added was measured.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import sqlite3
import sys
from pathlib import Path

from scripts.record import synthetic_gpu

GENERATOR = "scripts/record/autograd_gpu.py"
NVTX_MARK = 34
API_NS = 3_000


def plan(con: sqlite3.Connection) -> list[synthetic_gpu.Launch]:
    """One launch per launch or copy mark, in time order."""
    rows = con.execute(
        "SELECT e.start, e.globalTid, coalesce(e.text, s.value) FROM NVTX_EVENTS AS e"
        " LEFT JOIN StringIds AS s ON s.id = e.textId WHERE e.eventType = ? ORDER BY e.start, e.globalTid",
        (NVTX_MARK,),
    ).fetchall()
    # A call ends before the next NVTX event on its thread (mark, range start or end), so calls
    # never overlap each other and never cross a range.
    bounds: dict[int, list[int]] = {}
    for tid, t in con.execute(
        "SELECT globalTid, start FROM NVTX_EVENTS"
        " UNION ALL SELECT globalTid, end FROM NVTX_EVENTS WHERE end IS NOT NULL"
    ):
        bounds.setdefault(tid, []).append(t)
    for times in bounds.values():
        times.sort()
    out = []
    for start, tid, text in rows:
        later = bounds[tid][bisect.bisect_right(bounds[tid], start) :]
        end = min(start + API_NS, later[0] - 1) if later else start + API_NS
        if end <= start:
            sys.exit(f"no room for a call at the mark at {start} ns")
        kind, _, what = str(text).partition(" ")
        if kind == "launch":
            op = what.removeprefix("aten::")
            crc = synthetic_gpu._crc(f"{op}|")
            gpu_ns = synthetic_gpu.kernel_duration_ns(op, "")
            out.append(synthetic_gpu.Launch(start, end, tid, synthetic_gpu.LAUNCH_API, gpu_ns, op, crc))
        elif kind == "copy":
            nbytes = int(what)
            gpu_ns = synthetic_gpu.MEMCPY_FIXED_NS + nbytes * 1_000 // synthetic_gpu.MEMCPY_BANDWIDTH_BYTES_PER_US
            out.append(synthetic_gpu.Launch(start, end, tid, synthetic_gpu.MEMCPY_API, gpu_ns, bytes=nbytes))
    return out


def generate(source: Path, out: Path) -> dict[str, int]:
    """Copy ``source`` to ``out`` with the synthetic GPU layer; return row counts."""
    with synthetic_gpu.layered_copy(source, out) as (con, labels):
        present = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")} & set(
            synthetic_gpu.DDL
        )
        if present:
            sys.exit(f"{source} already has {', '.join(sorted(present))}: give the CPU-only recording")
        launches = plan(con)
        if not launches:
            sys.exit(f"{source} has no launch marks: record it with scripts/record/autograd.sh")
        for ddl in synthetic_gpu.DDL.values():
            con.execute(ddl)
        counts = synthetic_gpu.write(con, launches)
        labels.update(
            {
                "synthetic": "yes: every row of CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_KERNEL and "
                "CUPTI_ACTIVITY_KIND_MEMCPY, and the StringIds they name, is made up; all other tables are the "
                "unmodified real CPU recording",
                "generator": f"{GENERATOR} (nvbridge repository), "
                "with scripts/record/synthetic_gpu.py's rows and rules",
                "command": f"python -m scripts.record.autograd_gpu sample_db/{source.name}",
                "source_file": source.name,
                "source_sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
                "placement": "one call per NVTX mark, on the mark's thread, from the mark's time, "
                f"{API_NS} ns long or to 1 ns before the thread's next NVTX event: "
                "'launch aten::<op>' -> cudaLaunchKernel_v7000 + kernel synthetic::<op>_kernel; "
                "'copy <bytes>' -> cudaMemcpyAsync_v3020 + HtoD copy pageable -> device",
                "device_context_stream": (
                    f"{synthetic_gpu.DEVICE_ID},{synthetic_gpu.CONTEXT_ID},{synthetic_gpu.STREAM_ID}"
                ),
                "launch_latency_ns": str(synthetic_gpu.LAUNCH_LATENCY_NS),
                "serialization": "one stream, launch order: start = max(api start + launch latency, previous end)",
                "kernel_duration_ns": "low + crc32('<op>|') % (high - low); "
                + "; ".join(f"{k} [{lo}, {hi})" for k, (lo, hi) in synthetic_gpu.DURATION_NS.items()),
                "memcpy_model_ns": f"{synthetic_gpu.MEMCPY_FIXED_NS} + bytes * 1000 // "
                f"{synthetic_gpu.MEMCPY_BANDWIDTH_BYTES_PER_US}",
                "rows_runtime": str(counts["runtime"]),
                "rows_kernel": str(counts["kernel"]),
                "rows_memcpy": str(counts["memcpy"]),
            }
        )
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="sample_db/autograd_thread_ranges.sqlite")
    args = parser.parse_args(argv)
    out = args.source.with_name(f"{args.source.stem}+synthetic_gpu.sqlite")
    counts = generate(args.source, out)
    print(f"{out}: {counts['runtime']} API calls, {counts['kernel']} kernels, {counts['memcpy']} copies")


if __name__ == "__main__":
    main()
