"""Reading Nsight Systems' device-memory events (nvbridge.readers.memory_nsys) at scale.

    python -m scripts.bench.memory_nsys [--events 100000] [--calls 1000000]

Builds a SYNTHETIC database in a temporary directory (nothing measured: ``--calls`` runtime calls
on one thread, ``--events`` allocations and frees of device memory, each naming a call by
correlationId, spread over the calls) and prints, in one run: the floor (the event and call
columns read with sqlite3, no join), nvbridge's read, and the peer, the per-event correlated
subquery nvbridge used before (run over the first ``--peer-events`` events only, then scaled by
the events' count: it scans the calls once per event).
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

from nvbridge.readers._db import Database
from nvbridge.readers.memory_nsys import read_events

PID = 7 << 24
DDL = """
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(start INT, end INT, globalTid INT, correlationId INT, nameId INT);
CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS(start INT, globalPid INT, deviceId INT, contextId INT, address INT,
    pc INT, bytes INT, memKind INT, memoryOperationType INT, name TEXT, correlationId INT);
CREATE TABLE ENUM_CUDA_MEM_KIND(id INT, name TEXT, label TEXT);
CREATE TABLE ENUM_CUDA_DEV_MEM_EVENT_OPER(id INT, name TEXT, label TEXT);
CREATE TABLE NVBRIDGE_SYNTHETIC(name TEXT, value TEXT);
INSERT INTO NVBRIDGE_SYNTHETIC VALUES ('source', 'scripts/bench/memory_nsys.py: made up, nothing measured');
INSERT INTO ENUM_CUDA_MEM_KIND VALUES (2, 'CUDA_MEMOPR_MEMORY_KIND_DEVICE', 'Device');
INSERT INTO ENUM_CUDA_DEV_MEM_EVENT_OPER VALUES (0, 'A', 'Allocation'), (1, 'D', 'Deallocation');
"""
CORRELATED = (
    "SELECT m.start, (SELECT r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = m.correlationId"
    " AND (r.globalTid >> 24) = (m.globalPid >> 24) LIMIT 1) FROM CUDA_GPU_MEMORY_USAGE_EVENTS m"
)


def build(path: Path, events: int, calls: int) -> None:
    con = sqlite3.connect(path)
    con.executescript(DDL)
    step = max(calls // events, 1)
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, 1)",
        ((i * 10, i * 10 + 5, PID | 8, i) for i in range(calls)),
    )
    con.executemany(
        "INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS VALUES (?, ?, 0, 1, ?, 0, 512, 2, ?, NULL, ?)",
        ((i * step * 10 + 1, PID, 4096 + (i // 2) * 512, i % 2, (i * step) % calls) for i in range(events)),
    )
    con.commit()
    con.close()


def timed(call: object) -> float:
    start = time.perf_counter()
    call()  # type: ignore[operator]
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--peer-events", type=int, default=2_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memory_nsys_synthetic.sqlite"
        build(path, args.events, args.calls)
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        floor = timed(
            lambda: (
                con.execute("SELECT * FROM CUDA_GPU_MEMORY_USAGE_EVENTS").fetchall(),
                con.execute("SELECT globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchall(),
            )
        )
        with Database(path) as db:
            ours = timed(lambda: read_events(db))
        peer_part = timed(lambda: con.execute(f"{CORRELATED} LIMIT {args.peer_events}").fetchall())
        con.close()
    # The correlated subquery's cost per event grows with the call's position: the first
    # ``--peer-events`` are the cheapest, so the scaled figure is a lower bound.
    peer = peer_part * args.events / min(args.peer_events, args.events)
    print(f"{args.events:,} events, {args.calls:,} calls (synthetic)")
    print(f"floor (sqlite3 reads, no join): {floor:.2f} s")
    print(f"nvbridge read_events:           {ours:.2f} s  ({ours / floor:.2f}x the floor)")
    print(f"peer (correlated subquery):     >= {peer:.1f} s  (>= {peer / ours:.0f}x nvbridge)")


if __name__ == "__main__":
    main()
