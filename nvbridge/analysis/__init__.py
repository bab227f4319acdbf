"""What a converted report means to a PyTorch user: tables, figures and findings.

``summary`` makes torch's key_averages tables and the GPU header. New analyses (FLOPs and
rooflines, advice, before/after diffs) each get a module here, read the same ``Report``
tables and never touch a database.
"""

from __future__ import annotations

from nvbridge.analysis.summary import (
    SORT_KEYS,
    SUMMARY_COLUMNS,
    TIME_UNITS,
    KeyAverages,
    busy_ns,
    format_time,
    gpu_header,
    gpu_time_by_op,
    key_averages,
    merge_averages,
    parse_time,
    rank_facts,
    rank_summary,
    step_times,
)

__all__ = [
    "SORT_KEYS",
    "SUMMARY_COLUMNS",
    "TIME_UNITS",
    "KeyAverages",
    "busy_ns",
    "format_time",
    "gpu_header",
    "gpu_time_by_op",
    "key_averages",
    "merge_averages",
    "parse_time",
    "rank_facts",
    "rank_summary",
    "step_times",
]
