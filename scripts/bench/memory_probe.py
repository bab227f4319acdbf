"""Time the question a conversion asks before its first window: does the report hold nvbridge's
allocator marks? ``probe``: the probe of the first rows (nvbridge.readers.nsys_nvtx
.marks_among_first_rows); ``scan``: the whole-table query it replaced (kept here to compare).

    python -m scripts.bench.memory_probe probe|scan REPORT.sqlite

Prints the answer and the seconds it took; under farm-bench, pair the two
(``farm-bench --vs 'python -m scripts.bench.memory_probe scan F' -- python -m scripts.bench.memory_probe probe F``).
"""

from __future__ import annotations

import sys
import time

from nvbridge.readers._db import Database
from nvbridge.readers.nsys_nvtx import marks_among_first_rows

SCAN = "SELECT text FROM NVTX_EVENTS WHERE eventType = 34 AND domainId != 0 AND substr(text, 1, 4) = 'mem ' LIMIT 64"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("probe", "scan"):
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    with Database(argv[1]) as db:
        db.columns("NVTX_EVENTS")
        start = time.perf_counter()
        found = marks_among_first_rows(db) if argv[0] == "probe" else bool(db.scalar_rows(SCAN))
        print(f"{argv[0]}: {found} in {time.perf_counter() - start:.4f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
