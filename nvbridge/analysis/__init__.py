"""What a converted report means to a PyTorch user: tables, figures and findings.

``averages`` makes torch's key_averages tables (``op_table``: their rows, grouping and
printing), ``gpu`` the GPU header, ``ranks`` the cross-rank figures, and ``summarize`` puts them
together as ``nvbridge summary`` prints them; ``report`` is the public ``nvbridge.Report``, the
dataset's tables with these answers.
New analyses (FLOPs and rooflines, advice, before/after diffs) each get a module here, read the
same tables (nvbridge.dataset) and never touch a database.
"""

from __future__ import annotations

from nvbridge.analysis.averages import gpu_time_by_op, key_averages
from nvbridge.analysis.gpu import GpuHeader, busy_ns, gpu_header
from nvbridge.analysis.op_table import (
    NO_OP,
    SORT_KEYS,
    SUMMARY_COLUMNS,
    TIME_UNITS,
    KeyAverages,
    check_regex,
    format_time,
    merge_averages,
    parse_time,
    sort_column,
)
from nvbridge.analysis.ranks import RankFacts, StepSpread, rank_facts, step_spreads, step_times
from nvbridge.analysis.summarize import Summary, summarize
from nvbridge.output.names import plural

__all__ = [
    "NO_OP",
    "SORT_KEYS",
    "SUMMARY_COLUMNS",
    "TIME_UNITS",
    "GpuHeader",
    "KeyAverages",
    "RankFacts",
    "StepSpread",
    "Summary",
    "busy_ns",
    "check_regex",
    "format_time",
    "gpu_header",
    "gpu_time_by_op",
    "key_averages",
    "merge_averages",
    "parse_time",
    "plural",
    "rank_facts",
    "sort_column",
    "step_spreads",
    "step_times",
    "summarize",
]
