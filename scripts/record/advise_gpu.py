#!/usr/bin/env python3
"""Add a SYNTHETIC, labelled GPU layer to an advise recording, with ``.item()`` as a host sync.

    python -m scripts.record.advise_gpu sample_db/advise_cpu.sqlite
    # -> sample_db/advise_cpu+synthetic_gpu.sqlite

First scripts/record/synthetic_gpu.py does what its docstring says (one made-up kernel per leaf aten
op, pageable HtoD input copies per step; ``--batch-bytes`` from BATCH_BYTES below). Then, for
each ``aten::_local_scalar_dense`` range (what ``tensor.item()`` runs), its synthetic kernel
becomes what a CUDA build does there: a 4-byte device-to-PAGEABLE-host copy
(``CUPTI_ACTIVITY_KIND_MEMCPY`` copyKind 2, srcKind 2 device, dstKind 0 pageable, same
correlationId), launched by ``cudaMemcpyAsync_v3020``. The copy starts ``ITEM_LATENCY_NS`` after
its call (or when the stream frees) and lasts ``ITEM_COPY_NS``, and the call now ends when the
copy ends: a copy into pageable memory returns only when done, so the host waited for the GPU.
Copy and call must end inside the range; the script stops otherwise. The extra rows are
listed in ``NVBRIDGE_SYNTHETIC`` (``item_copies``). Nothing added was measured.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from scripts.record import synthetic_gpu

# Input tensors per step, by recording: advise's batch is 8x32 float32 + 8 int64 labels,
# diff's is 16x64 float32 + 16 int64 labels.
BATCH_BYTES = {
    "advise_cpu": [1024, 64],
    "diff_base_cpu": [4096, 128],
    "diff_extra_cpu": [4096, 128],
    "ranks_cpu": [4096, 128],
}
COPY_DTOH, MEM_DEVICE, MEM_PAGEABLE = 2, 2, 0
ITEM_BYTES = 4
ITEM_LATENCY_NS, ITEM_COPY_NS = 500, 1_000


def item_copies(con: sqlite3.Connection) -> int:
    """Turn the synthetic kernel of each _local_scalar_dense range into a blocking DtoH copy."""
    rows = con.execute(
        """
        SELECT r.rowid, r.start, n.end, k.rowid, k.deviceId, k.contextId, k.streamId, k.correlationId,
               k.globalPid,
               (SELECT max(p.end) FROM CUPTI_ACTIVITY_KIND_KERNEL AS p WHERE p.start < k.start) AS stream_free
        FROM NVTX_EVENTS AS n
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r ON r.globalTid = n.globalTid AND r.start >= n.start AND r.end <= n.end
        JOIN CUPTI_ACTIVITY_KIND_KERNEL AS k ON k.correlationId = r.correlationId
        WHERE n.text LIKE 'aten::_local_scalar_dense%'
        """
    ).fetchall()
    api_id = synthetic_gpu.Strings(con).id(synthetic_gpu.MEMCPY_API)
    for api_row, api_start, range_end, k_row, dev, ctx, _stream, corr, pid, stream_free in rows:
        k_start = max(api_start + ITEM_LATENCY_NS, stream_free or 0)
        k_end = k_start + ITEM_COPY_NS
        if k_end > range_end:
            sys.exit(f"the copy of correlationId {corr} ends after its _local_scalar_dense range")
        con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = ?", (k_row,))
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, correlationId,"
            " globalPid, bytes, copyKind, srcKind, dstKind, srcDeviceId, srcContextId, copyCount)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
            (k_start, k_end, dev, ctx, _stream, corr, pid, ITEM_BYTES, COPY_DTOH, MEM_DEVICE, MEM_PAGEABLE, dev, ctx),
        )
        con.execute(
            "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = ?, end = ? WHERE rowid = ?", (api_id, k_end, api_row)
        )
    con.execute(
        "INSERT INTO NVBRIDGE_SYNTHETIC (name, value) VALUES ('item_copies', ?)",
        (
            f"{len(rows)} (scripts/record/advise_gpu.py): the kernel of each aten::_local_scalar_dense range became a "
            f"{ITEM_BYTES}-byte DtoH copy device->pageable by {synthetic_gpu.MEMCPY_API}, starting "
            f"{ITEM_LATENCY_NS} ns after its call or when the stream frees, {ITEM_COPY_NS} ns long; the call ends "
            "when the copy ends",
        ),
    )
    return len(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="sample_db/advise_cpu.sqlite, diff_base_cpu or diff_extra_cpu")
    args = parser.parse_args(argv)
    out = args.source.with_name(f"{args.source.stem}+synthetic_gpu.sqlite")
    counts = synthetic_gpu.generate(args.source, out, BATCH_BYTES[args.source.stem])
    con = sqlite3.connect(out, isolation_level=None)
    try:
        con.execute("BEGIN")
        n = item_copies(con)
        con.execute("COMMIT")
        con.execute("VACUUM")
    finally:
        con.close()
    print(
        f"{out}: {counts['runtime']} API calls, {counts['kernel'] - n} kernels, "
        f"{counts['memcpy'] + n} copies ({n} of them .item() DtoH)"
    )


if __name__ == "__main__":
    main()
