#!/usr/bin/env python3
"""Add SYNTHETIC, clearly labelled device-memory events to an Nsight Systems export with CUDA calls.

    python -m scripts.record.synthetic_memory "sample_db/cnn_cpu+synthetic_gpu.sqlite" OUT.sqlite

No export in ../shared/real_db/ or sample_db/ was recorded with ``--cuda-memory-usage=true`` (the
machines here have no GPU), so this writes a COPY of an export whose runtime calls are already
there (``scripts/record/synthetic_gpu.py``'s layer) with a made-up ``CUDA_GPU_MEMORY_USAGE_EVENTS``
table, for the tests of nvbridge.readers.memory_nsys. Nothing in the added rows was measured:

- Every ``ALLOC_EVERY``-th ``cudaLaunchKernel`` call gets an allocation on device 0 one ns after
  it starts, with its correlationId (so its thread and op are the call's): ``(i % 7 + 1) * 512``
  KiB at ``BASE + i * 2 MiB``. The call after an allocation frees the block allocated
  ``FREE_LAG`` allocations earlier, two ns after it starts; the last blocks are never freed.
- One allocation of pinned host memory (memKind Pinned: not device memory, which the reader leaves
  out) and one device allocation whose correlationId names no call (its thread is unknown).
- The table's columns are those of the Nsight Systems 2022.4 exporter (start, globalPid,
  deviceId, contextId, address, pc, bytes, memKind, memoryOperationType, name, correlationId,
  streamId and the memory-pool columns); codes are the file's own ENUM_CUDA_MEM_KIND and
  ENUM_CUDA_DEV_MEM_EVENT_OPER ids, looked up by label.
- ``NVBRIDGE_SYNTHETIC(name, value)`` says so inside the file, with the source and parameters.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from scripts.record.synthetic_gpu import _shown, layered_copy

ALLOC_EVERY = 3
FREE_LAG = 2
BASE = 0x7F0000000000
MIB = 1 << 20
DDL = """CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (
    start INTEGER NOT NULL, globalPid INTEGER, deviceId INTEGER, contextId INTEGER,
    address INTEGER NOT NULL, pc INTEGER, bytes INTEGER NOT NULL, memKind INTEGER NOT NULL,
    memoryOperationType INTEGER NOT NULL, name TEXT, correlationId INTEGER, streamId INTEGER,
    localMemoryPoolAddress INTEGER, localMemoryPoolReleaseThreshold INTEGER, localMemoryPoolSize INTEGER,
    localMemoryPoolUtilizedSize INTEGER, importedMemoryPoolAddress INTEGER, importedMemoryPoolProcessId INTEGER)"""
ENUMS = {
    "ENUM_CUDA_MEM_KIND": [
        (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"),
    ],
    "ENUM_CUDA_DEV_MEM_EVENT_OPER": [
        (0, "CUDA_DEV_MEM_EVENT_OPR_ALLOCATION", "Allocation"),
        (1, "CUDA_DEV_MEM_EVENT_OPR_DEALLOCATION", "Deallocation"),
    ],
}


def _code(con: sqlite3.Connection, table: str, label: str) -> int:
    """The file's own code for ``label`` (its ENUM table, created where the export lacks it)."""
    if not con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchall():
        con.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL)")
        con.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", ENUMS[table])
    ((code,),) = con.execute(f"SELECT id FROM {table} WHERE label = ?", (label,)).fetchall()
    return int(code)


def events(calls: list[tuple[int, int, int]], device: int, pinned: int, alloc: int, free: int) -> list[tuple[int, ...]]:
    """Rows (start, globalPid, deviceId, address, bytes, memKind, memoryOperationType, correlationId)
    for the launch calls (start, globalTid, correlationId), as the module doc says."""
    rows: list[tuple[int, ...]] = []
    blocks: list[tuple[int, int]] = []
    for i, (start, gtid, corr) in enumerate(calls):
        gpid = gtid & ~0xFFFFFF
        if i % ALLOC_EVERY == 0:
            block = (BASE + i * 2 * MIB, (i % 7 + 1) * 512 * 1024)
            blocks.append(block)
            rows.append((start + 1, gpid, 0, *block, device, alloc, corr))
        elif i % ALLOC_EVERY == 1 and len(blocks) > FREE_LAG:
            address, size = blocks.pop(0)
            rows.append((start + 2, gpid, 0, address, size, device, free, corr))
    start, gtid, _ = calls[len(calls) // 2]
    rows.append((start + 3, gtid & ~0xFFFFFF, 0, BASE - 4 * MIB, 4096, pinned, alloc, calls[len(calls) // 2][2]))
    rows.append((start + 4, gtid & ~0xFFFFFF, 0, BASE - 8 * MIB, 8192, device, alloc, -7))
    return rows


def generate(source: Path, out: Path) -> int:
    """Copy ``source`` to ``out`` with the synthetic memory events; return how many rows."""
    with layered_copy(source, out) as (con, labels):
        calls = con.execute(
            """SELECT r.start, r.globalTid, r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r
            JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cudaLaunchKernel%' ORDER BY r.start"""
        ).fetchall()
        if len(calls) < 2 * ALLOC_EVERY:
            sys.exit(f"{source} has too few cudaLaunchKernel calls to hang memory events on")
        con.execute("CREATE TABLE IF NOT EXISTS NVBRIDGE_SYNTHETIC (name TEXT PRIMARY KEY, value TEXT)")
        con.execute(DDL)
        device, pinned = (_code(con, "ENUM_CUDA_MEM_KIND", k) for k in ("Device", "Pinned"))
        alloc, free = (_code(con, "ENUM_CUDA_DEV_MEM_EVENT_OPER", k) for k in ("Allocation", "Deallocation"))
        rows = events(calls, device, pinned, alloc, free)
        con.executemany(
            """INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS (start, globalPid, deviceId, address, bytes, memKind,
            memoryOperationType, correlationId, contextId, streamId) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, 7)""",
            rows,
        )
        labels.update(
            {
                "memory": "SYNTHETIC: CUDA_GPU_MEMORY_USAGE_EVENTS made up by scripts/record/synthetic_memory.py",
                "memory.source": _shown(source),
                "memory.parameters": f"ALLOC_EVERY={ALLOC_EVERY} FREE_LAG={FREE_LAG} BASE={BASE}",
            }
        )
    return len(rows)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        sys.exit("usage: python -m scripts.record.synthetic_memory SOURCE.sqlite OUT.sqlite")
    print(f"{args[1]}: {generate(Path(args[0]), Path(args[1]))} synthetic memory events")


if __name__ == "__main__":
    main()
