"""Chrome trace of a report or dataset (to move beside the trace writer)."""

from __future__ import annotations

import os
from pathlib import Path

from nvbridge.conversion.report import check_trace_destination
from nvbridge.dataset import Report, load
from nvbridge.errors import ExportError
from nvbridge.export import chrome


def export_chrome_trace(source: str | os.PathLike[str] | Report, dest: str | os.PathLike[str], *,
                        start_ns: int | None = None, end_ns: int | None = None,
                        steps: tuple[int, int] | None = None, processes: set[int] | None = None,
                        force: bool = True) -> chrome.TraceStats:
    """Write a report (or converted dataset) as a Chrome/Perfetto trace.

    Args:
        source: a profiler database, SQLAlchemy URL, dataset directory, or a loaded Report.
        dest: ``.json`` or ``.json.gz`` (compressed while streaming).
        start_ns, end_ns: a time window, in the report's time base.
        steps: ``(first, last)`` ProfilerStep numbers: the window they span.
        processes: host process ids to keep.
        force: replace ``dest`` if it exists.

    Raises:
        InputError: the source cannot be read.
        ExportError: bad destination, or steps the report does not have.
    """
    path = Path(dest)
    check_trace_destination(path, force)
    report = source if isinstance(source, Report) else load(source)
    if steps is not None:
        try:
            start_ns, end_ns = chrome.step_window(report.ops, *steps)
        except ValueError as exc:
            raise ExportError(str(exc)) from exc
    rank = report.meta.get("rank")
    return chrome.write(report, path, start_ns=start_ns, end_ns=end_ns, processes=processes,
                        rank=int(rank) if rank not in (None, "None") else 0)
