"""Split a one-file multi-process capture into one report per process (as a per-rank
recording would be), on a copy, with Python's sqlite3 only."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

_PID = 0xFFFFFF << 24  # the pid bits of globalTid / globalPid


def _tables_with(con: sqlite3.Connection, *columns: str) -> dict[str, list[str]]:
    out = {}
    for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        have = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")').fetchall()]
        hits = [c for c in columns if c in have]
        if hits:
            out[t] = hits
    return out


def split_process(source: Path, pid: int, dest: Path) -> Path:
    """A copy of ``source`` holding only process ``pid``'s rows."""
    shutil.copyfile(source, dest)
    con = sqlite3.connect(dest)
    with con:
        for table, cols in _tables_with(con, "globalTid", "globalPid").items():
            col = cols[0]
            con.execute(f'DELETE FROM "{table}" WHERE {col} IS NOT NULL AND (({col} & {_PID}) >> 24) != ?', (pid,))
    con.execute("VACUUM")
    con.close()
    return dest
