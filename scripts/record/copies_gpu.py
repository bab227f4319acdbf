#!/usr/bin/env python3
"""Add a SYNTHETIC, labelled GPU layer whose pinned host-to-device copies dominate the GPU timeline.

    python -m scripts.record.copies_gpu sample_db/diff_base_cpu.sqlite
    # -> sample_db/diff_base_cpu+pinned_copies_gpu.sqlite

The shape of a real report nvbridge must name (issue 25, item 6): an inference run whose GPUs
spend most of their busy time copying inputs in from pinned memory. First scripts/record/synthetic_gpu.py
does what its docstring says, with input batches of ``BATCH_BYTES`` per step (copies of 32 MiB
each, at the generator's fixed 12 GB/s: about 2.8 ms a copy), so the copies hold most of the GPU
timeline. Then each of those copies is marked as coming from PINNED host memory
(``CUPTI_ACTIVITY_KIND_MEMCPY.srcKind`` 1, ENUM_CUDA_MEM_KIND), as a DataLoader with
``pin_memory=True`` makes them: no pageable-copy or blocking-copy finding applies, only the copy
time itself. The change is listed in ``NVBRIDGE_SYNTHETIC`` (``pinned_copies``). Nothing added
was measured; the output is the same, byte for byte, on every run.
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path

from scripts.record import synthetic_gpu

BATCH_BYTES = [32 << 20, 32 << 20]  # two input tensors a step
MEM_PINNED = 1  # ENUM_CUDA_MEM_KIND


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a CPU-only recording, e.g. sample_db/diff_base_cpu.sqlite")
    args = parser.parse_args(argv)
    out = args.source.with_name(f"{args.source.stem}+pinned_copies_gpu.sqlite")
    counts = synthetic_gpu.generate(args.source, out, BATCH_BYTES)
    con = sqlite3.connect(out, isolation_level=None)
    try:
        con.execute("BEGIN")
        n = con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET srcKind = ? WHERE copyKind = 1", (MEM_PINNED,)).rowcount
        con.execute(
            "INSERT INTO NVBRIDGE_SYNTHETIC (name, value) VALUES ('pinned_copies', ?)",
            (f"{n} (scripts/record/copies_gpu.py): every HtoD input copy's srcKind set to {MEM_PINNED} (pinned)",),
        )
        con.execute("COMMIT")
        con.execute("VACUUM")
    finally:
        con.close()
    print(f"{out}: {counts['runtime']} API calls, {counts['kernel']} kernels, {n} pinned HtoD copies")


if __name__ == "__main__":
    main()
