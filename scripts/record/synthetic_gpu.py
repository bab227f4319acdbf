#!/usr/bin/env python3
"""Add a SYNTHETIC, clearly labelled GPU layer to a real CPU-only Nsight Systems export.

    python -m scripts.record.synthetic_gpu sample_db/cnn_cpu.sqlite
    # -> sample_db/cnn_cpu+synthetic_gpu.sqlite

The machines that recorded ``sample_db/`` have no GPU, so their exports hold real NVTX ranges
(from ``nvbridge.emit_nvtx``) and OS runtime calls but no CUDA rows. This script copies such an
export to a NEW file and adds made-up CUDA rows that follow the real ranges, so kernel
attribution can be exercised end to end on a file with a real NVTX layer. The source file is only
read. Nothing in the added rows was measured:

- For each leaf ``aten::`` op range (no range nested inside it; forward, backward-node and
  optimizer ops alike) that would launch work on a GPU (view-like ops in ``METADATA_OPS`` do not),
  one ``cudaLaunchKernel_v7000`` call in ``CUPTI_ACTIVITY_KIND_RUNTIME`` on the op's thread,
  starting a quarter into the op range and at most ``API_MAX_NS`` long (so it ends by the middle
  of the range), and one kernel in ``CUPTI_ACTIVITY_KIND_KERNEL`` named
  ``synthetic::<op>_kernel`` with the same correlationId.
- Per ``ProfilerStep#N`` range, one ``cudaMemcpyAsync_v3020`` call plus an HtoD row in
  ``CUPTI_ACTIVITY_KIND_MEMCPY`` for each tensor of the input batch (``--batch-bytes``), placed
  in the step before its first nested range.
- GPU work runs on device 0, context 1, stream 7, in launch order: each starts
  ``LAUNCH_LATENCY_NS`` after its call or when the previous one ends, so nothing overlaps.
  Kernel durations and grid/block sizes are a fixed function of the op name and, where the
  range records them, its input sizes (CRC-32, no randomness): same input, same rows.
- ``NVBRIDGE_SYNTHETIC(name, value)`` says all of this inside the file: that the GPU rows are
  synthetic, the generator, the source file and its SHA-256, and every parameter.

The new tables use the column names and types of a real Nsight Systems 2026.2 export (only the
DDL; no rows are taken from any other file). The output is written to a temporary name, vacuumed,
then renamed, and is byte-for-byte the same on every run with the same SQLite library.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import sqlite3
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from scripts.paths import ROOT
from scripts.record.nsys_ddl import DDL as DDL  # re-exported: autograd_gpu and advise_gpu take it from here

GENERATOR = "scripts/record/synthetic_gpu.py"
COMMAND = "python -m scripts.record.synthetic_gpu"
DEVICE_ID, CONTEXT_ID, STREAM_ID = 0, 1, 7
LAUNCH_API = "cudaLaunchKernel_v7000"
MEMCPY_API = "cudaMemcpyAsync_v3020"
API_MAX_NS = 5_000  # a launch call lasts at most 5 us (and at most a quarter of its op range)
LAUNCH_LATENCY_NS = 2_000  # GPU work starts 2 us after its call begins, or when the stream frees
MEMCPY_BANDWIDTH_BYTES_PER_US = 12_000  # 12 GB/s HtoD from pageable memory
MEMCPY_FIXED_NS = 1_000
NVTX_PUSH_POP = 59
COPY_HTOD, MEM_PAGEABLE, MEM_DEVICE = 1, 0, 2  # ENUM_CUDA_MEMCPY_OPER, ENUM_CUDA_MEM_KIND
LAUNCH_REGULAR = 1  # ENUM_CUDA_KRENEL_LAUNCH_TYPE

# Ops that only make a new view or an empty tensor: no kernel on a real GPU.
METADATA_OPS = frozenset({
    "alias", "as_strided", "chunk", "detach", "empty", "empty_like", "empty_strided", "expand",
    "expand_as", "flatten", "lift_fresh", "narrow", "permute", "reshape", "select", "slice",
    "split", "split_with_sizes", "squeeze", "t", "transpose", "unbind", "unflatten", "unsqueeze",
    "view", "view_as", "_reshape_alias", "_unsafe_view",
})  # fmt: skip
# Duration ranges in ns, [low, high), by the kind of work an op does; the rest are elementwise.
MATMUL = ("conv", "mm", "addmm", "bmm", "baddbmm", "linear", "matmul", "scaled_dot_product", "_efficient_attention")
REDUCTION = ("norm", "softmax", "nll_loss", "pool", "mean", "sum", "embedding", "cross_entropy", "var", "std")
DURATION_NS = {"matmul": (6_000, 14_000), "reduction": (2_500, 6_000), "elementwise": (1_200, 3_000)}

OP = re.compile(r"^aten::(?P<op>\w+)(?:, seq = \d+)?(?:, op_id = \d+)?(?:, sizes = (?P<sizes>\[.*?\]))?(?:, |$)")


@dataclass(frozen=True)
class NvtxRange:
    """One closed push/pop range of the source export."""

    start_ns: int
    end_ns: int
    global_tid: int
    text: str


@dataclass(frozen=True)
class Launch:
    """One synthetic API call and the GPU op it causes (a kernel, or a copy when ``bytes``)."""

    api_start_ns: int
    api_end_ns: int
    global_tid: int
    api_name: str
    gpu_ns: int
    kernel_op: str = ""  # aten op name without the namespace, for kernels
    crc: int = 0
    bytes: int = 0


def _crc(text: str) -> int:
    return zlib.crc32(text.encode())


def _category(op: str) -> str:
    if any(key in op for key in MATMUL):
        return "matmul"
    if any(key in op for key in REDUCTION):
        return "reduction"
    return "elementwise"


def kernel_duration_ns(op: str, sizes: str) -> int:
    """A fixed function of the op and its input sizes: same op and shape, same duration."""
    low, high = DURATION_NS[_category(op)]
    return low + _crc(f"{op}|{sizes}") % (high - low)


def read_ranges(con: sqlite3.Connection) -> list[NvtxRange]:
    """Closed push/pop ranges that start and end on one thread, ordered for nesting."""
    rows = con.execute(
        """
        SELECT e.start, e.end, e.globalTid, coalesce(e.text, s.value)
        FROM NVTX_EVENTS AS e LEFT JOIN StringIds AS s ON s.id = e.textId
        WHERE e.eventType = ? AND e.end IS NOT NULL AND e.endGlobalTid IS NULL
        ORDER BY e.globalTid, e.start, e.end DESC, e.rowid
        """,
        (NVTX_PUSH_POP,),
    ).fetchall()
    return [NvtxRange(s, e, g, t or "") for s, e, g, t in rows]


def nest(ranges: list[NvtxRange]) -> tuple[list[bool], list[int | None]]:
    """(is leaf, index of first child) per range; ``ranges`` ordered by (thread, start, -end)."""
    has_child = [False] * len(ranges)
    first_child: list[int | None] = [None] * len(ranges)
    stack: list[int] = []
    for i, r in enumerate(ranges):
        while stack and (ranges[stack[-1]].global_tid != r.global_tid or ranges[stack[-1]].end_ns < r.end_ns):
            stack.pop()
        if stack:
            parent = stack[-1]
            if not has_child[parent]:
                first_child[parent] = i
            has_child[parent] = True
        stack.append(i)
    return [not c for c in has_child], first_child


def plan(ranges: list[NvtxRange], batch_bytes: list[int]) -> tuple[list[Launch], int]:
    """Synthetic launches in API start order, and the number of leaf aten ops skipped as views."""
    is_leaf, first_child = nest(ranges)
    launches: list[Launch] = []
    skipped = 0
    for i, r in enumerate(ranges):
        if r.text.startswith("ProfilerStep#"):
            # input batch copies, in the step before anything nested in it starts
            gap_end = ranges[first_child[i]].start_ns if first_child[i] is not None else r.end_ns  # type: ignore[index]
            slot = (gap_end - r.start_ns) // (len(batch_bytes) + 1)
            if slot < 2:
                sys.exit(f"{r.text} has no room before its first nested range for the input copies")
            for k, nbytes in enumerate(batch_bytes):
                start = r.start_ns + slot * k + slot // 2
                gpu_ns = MEMCPY_FIXED_NS + nbytes * 1_000 // MEMCPY_BANDWIDTH_BYTES_PER_US
                api_ns = min(API_MAX_NS, max(1, slot // 4))
                launches.append(Launch(start, start + api_ns, r.global_tid, MEMCPY_API, gpu_ns, bytes=nbytes))
            continue
        m = OP.match(r.text)
        if m is None or not is_leaf[i]:
            continue
        if m["op"] in METADATA_OPS:
            skipped += 1
            continue
        span = r.end_ns - r.start_ns
        if span < 4:
            continue
        start = r.start_ns + span // 4
        api_ns = min(API_MAX_NS, span // 4)
        sizes = m["sizes"] or ""
        gpu_ns = kernel_duration_ns(m["op"], sizes)
        launches.append(
            Launch(start, start + api_ns, r.global_tid, LAUNCH_API, gpu_ns, m["op"], _crc(f"{m['op']}|{sizes}"))
        )
    launches.sort(key=lambda x: (x.api_start_ns, x.global_tid))
    return launches, skipped


class Strings:
    """StringIds: reuse an existing id for a value, else append ids after the largest."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.ids: dict[str, int] = {
            str(v): int(i) for i, v in con.execute("SELECT id, value FROM StringIds ORDER BY id")
        }
        self.next_id = 1 + max(self.ids.values(), default=-1)

    def id(self, value: str) -> int:
        if value not in self.ids:
            self.con.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (self.next_id, value))
            self.ids[value] = self.next_id
            self.next_id += 1
        return self.ids[value]


def mangle(namespace: str, name: str) -> str:
    """Itanium mangling of ``void namespace::name()``."""
    return f"_ZN{len(namespace)}{namespace}{len(name)}{name}Ev"


def write(con: sqlite3.Connection, launches: list[Launch]) -> dict[str, int]:
    """Insert the API calls, kernels and copies; return row counts."""
    strings = Strings(con)
    stream_free = 0
    counts = {"runtime": 0, "kernel": 0, "memcpy": 0}
    for correlation_id, x in enumerate(launches, start=1):
        gpu_start = max(x.api_start_ns + LAUNCH_LATENCY_NS, stream_free)
        gpu_end = gpu_start + x.gpu_ns
        stream_free = gpu_end
        global_pid = x.global_tid & ~0xFFFFFF
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId,"
            " returnValue, callchainId) VALUES (?, ?, 0, ?, ?, ?, 0, NULL)",
            (x.api_start_ns, x.api_end_ns, x.global_tid, correlation_id, strings.id(x.api_name)),
        )
        counts["runtime"] += 1
        if x.bytes:
            con.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, correlationId,"
                " globalPid, bytes, copyKind, srcKind, dstKind, dstDeviceId, dstContextId, copyCount)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                (gpu_start, gpu_end, DEVICE_ID, CONTEXT_ID, STREAM_ID, correlation_id, global_pid, x.bytes,
                 COPY_HTOD, MEM_PAGEABLE, MEM_DEVICE, DEVICE_ID, CONTEXT_ID),
            )  # fmt: skip
            counts["memcpy"] += 1
            continue
        short = f"{x.kernel_op}_kernel"
        matmul = _category(x.kernel_op) == "matmul"
        block = 256 if x.crc & 1 else 128
        counts["kernel"] += 1
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId,"
            " globalPid, demangledName, shortName, mangledName, launchType, cacheConfig, registersPerThread,"
            " gridX, gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory,"
            " localMemoryPerThread, localMemoryTotal, gridId, sharedMemoryExecuted, tensorSizeMinusOneElements)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, 1, 1, ?, 1, 1, ?, 0, 0, 0, ?, ?, '[]')",
            (gpu_start, gpu_end, DEVICE_ID, CONTEXT_ID, STREAM_ID, correlation_id, global_pid,
             strings.id(f"synthetic::{short}"), strings.id(short), strings.id(mangle("synthetic", short)),
             LAUNCH_REGULAR, 16 + 8 * ((x.crc >> 16) % 6), 1 + (x.crc >> 8) % 64, block,
             4096 if matmul else 0, counts["kernel"], 8192 if matmul else 0),
        )  # fmt: skip
    return counts


def _shown(path: Path) -> str:
    """``path`` relative to the repository when inside it (the label must not vary by checkout)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return path.name


@contextmanager
def layered_copy(source: Path, out: Path) -> Iterator[tuple[sqlite3.Connection, dict[str, str]]]:
    """``source`` copied beside ``out`` and opened in one transaction for a synthetic layer; when
    the block ends, the labels it filled go into NVBRIDGE_SYNTHETIC and the compacted copy
    becomes ``out``. On any error or exit the copy is removed and ``out`` is left as it was."""
    tmp = out.with_name(out.name + ".tmp")
    tmp.unlink(missing_ok=True)
    shutil.copyfile(source, tmp)
    tmp.chmod(0o644)
    con = sqlite3.connect(tmp, isolation_level=None)
    try:
        con.execute("BEGIN")
        labels: dict[str, str] = {}
        yield con, labels
        con.executemany("INSERT INTO NVBRIDGE_SYNTHETIC (name, value) VALUES (?, ?)", labels.items())
        con.execute("COMMIT")
        con.execute("VACUUM")
    except BaseException:
        con.close()
        tmp.unlink(missing_ok=True)
        raise
    con.close()
    os.replace(tmp, out)


def generate(source: Path, out: Path, batch_bytes: list[int]) -> dict[str, int]:
    """Copy ``source`` to ``out`` with the synthetic GPU layer; return row counts."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        tables = {name for (name,) in src.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        src.close()
    if "NVTX_EVENTS" not in tables or "StringIds" not in tables:
        sys.exit(f"{source} is not an Nsight Systems export with NVTX ranges (NVTX_EVENTS, StringIds)")
    present = sorted(tables & set(DDL))
    if present:
        sys.exit(f"{source} already has {', '.join(present)}: give a CPU-only recording")

    with layered_copy(source, out) as (con, labels):
        launches, skipped = plan(read_ranges(con), batch_bytes)
        for ddl in DDL.values():
            con.execute(ddl)
        counts = write(con, launches)
        capture = None
        if "ANALYSIS_DETAILS" in tables:
            capture = con.execute("SELECT max(duration) FROM ANALYSIS_DETAILS").fetchone()
        last_end = con.execute(
            "SELECT max(end) FROM (SELECT end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL"
            " SELECT end FROM CUPTI_ACTIVITY_KIND_MEMCPY)"
        ).fetchone()[0]
        if capture and capture[0] is not None and last_end is not None and last_end > capture[0]:
            sys.exit(f"synthetic GPU work ends at {last_end} ns, after the capture ({capture[0]} ns)")
        labels.update(
            {
                "synthetic": "yes: every row of CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_KERNEL and "
                "CUPTI_ACTIVITY_KIND_MEMCPY, and the StringIds they name, is made up; all other tables are the "
                "unmodified real CPU recording",
                "generator": f"{GENERATOR} (nvbridge repository)",
                "command": f"{COMMAND} {_shown(source)} --batch-bytes {','.join(map(str, batch_bytes))}",
                "source_file": source.name,
                "source_sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
                "placement": "one cudaLaunchKernel_v7000 + one kernel per leaf aten op range that launches GPU "
                "work (forward, backward-node and optimizer ops); API call from 1/4 of the op range, "
                f"min(range/4, {API_MAX_NS} ns) long; one cudaMemcpyAsync_v3020 + one HtoD memcpy per input "
                "tensor per ProfilerStep#N, before the step's first nested range",
                "metadata_ops_without_kernels": ",".join(sorted(METADATA_OPS)),
                "leaf_metadata_ops_skipped": str(skipped),
                "device_context_stream": f"{DEVICE_ID},{CONTEXT_ID},{STREAM_ID}",
                "launch_latency_ns": str(LAUNCH_LATENCY_NS),
                "serialization": "one stream, launch order: start = max(api start + launch latency, previous end)",
                "kernel_duration_ns": "low + crc32('<op>|<sizes>') % (high - low); "
                + "; ".join(f"{k} [{lo}, {hi})" for k, (lo, hi) in DURATION_NS.items()),
                "kernel_names": "demangledName synthetic::<op>_kernel, shortName <op>_kernel, "
                "mangledName _ZN9synthetic<len><op>_kernelEv",
                "batch_bytes": ",".join(map(str, batch_bytes)),
                "memcpy_model_ns": f"{MEMCPY_FIXED_NS} + bytes * 1000 // {MEMCPY_BANDWIDTH_BYTES_PER_US}",
                "rows_runtime": str(counts["runtime"]),
                "rows_kernel": str(counts["kernel"]),
                "rows_memcpy": str(counts["memcpy"]),
            }
        )
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a CPU-only nsys SQLite export (e.g. sample_db/cnn_cpu.sqlite)")
    parser.add_argument("-o", "--output", type=Path, help="default: <source dir>/<stem>+synthetic_gpu.sqlite")
    parser.add_argument(
        "--batch-bytes",
        default="4096,32",
        help="bytes of each input tensor copied HtoD per step (default 4096,32: the CNN sample's "
        "4x1x16x16 float32 images and 4 int64 labels)",
    )
    args = parser.parse_args(argv)
    out = args.output or args.source.with_name(f"{args.source.stem}+synthetic_gpu.sqlite")
    if out.resolve() == args.source.resolve():
        sys.exit("the output must be a new file, not the source")
    batch = [int(b) for b in args.batch_bytes.split(",") if b]
    counts = generate(args.source, out, batch)
    size = out.stat().st_size
    print(f"{out}: {counts['runtime']} API calls, {counts['kernel']} kernels, {counts['memcpy']} copies, {size} bytes")


if __name__ == "__main__":
    main()
