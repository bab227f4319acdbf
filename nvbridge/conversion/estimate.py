"""How many rows a conversion will read, for the progress display."""

from __future__ import annotations

import os
from pathlib import Path

_EVENT_TABLES = (
    "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_MARKER",
    "CUPTI_ACTIVITY_KIND_DRIVER", "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL",
)


def estimate_rows(source: str | os.PathLike[str]) -> int:
    """Rows a conversion will read, from each event table's largest rowid (no scan); 0 if unknown."""
    path = Path(os.fspath(source))
    if "://" in os.fspath(source) or not path.is_file():
        return 0
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{path.resolve()}?mode=ro&immutable=1", uri=True)
        try:
            have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            return sum(int(con.execute(f'SELECT max(rowid) FROM "{t}"').fetchone()[0] or 0)
                       for t in _EVENT_TABLES if t in have)
        finally:
            con.close()
    except (sqlite3.Error, ValueError, TypeError, OverflowError):
        return 0  # the conversion itself reports what is wrong with the file
