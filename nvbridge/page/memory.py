"""The hook for the page's memory timeline.

No export nvbridge reads records memory yet in its dataset (Nsight Systems' CUDA memory
usage events, ``CUDA_GPU_MEMORY_USAGE_EVENTS``, and torch's allocator records are not
converted): :func:`memory_timeline` returns None, and the page's memory section says the
report recorded none. Where a dataset gains a memory table, this function returns its points
(``{"device_id", "t_ms", "bytes"}`` records, decimated to the page's width as the step timeline
is) and the page draws them as a line per device (nvbridge/page/charts.py: add the spec).
"""

from __future__ import annotations

from typing import Any

from nvbridge.analysis.report import Report
from nvbridge.dataset.schema import TABLES

MEMORY_TABLE = "memory"  # the dataset table the hook will read, once conversion writes one


def memory_timeline(report: Report) -> dict[str, Any] | None:
    """The memory the report recorded over time, or None where it recorded none (every
    dataset today: ``TABLES`` has no memory table)."""
    if MEMORY_TABLE not in TABLES or not report.rows(MEMORY_TABLE):
        return None
    raise NotImplementedError("a memory table exists: draw it here (see the module docstring)")
