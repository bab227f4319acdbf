"""Test helpers on copies of real exports, with Python's sqlite3 only: split a one-file
multi-process capture into one report per process (as a per-rank recording would be), and
shift one report's clock (a host whose wall clock differs, a session that started later)."""

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


def shift_clock(source: Path, dest: Path, wall_ns: int, times_ns: int) -> Path:
    """A copy of ``source`` whose recorded session start (wall clock) is ``wall_ns`` later and
    whose every timestamp (relative to the session) is ``times_ns`` later."""
    shutil.copyfile(source, dest)
    con = sqlite3.connect(dest)
    with con:
        con.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?", (wall_ns,))
        for table, cols in _tables_with(con, "start", "end", "timestamp").items():
            sets = ", ".join(f'"{c}" = "{c}" + {int(times_ns)}' for c in cols)
            where = " AND ".join(f'"{c}" IS NOT NULL' for c in cols[:1])
            con.execute(f'UPDATE "{table}" SET {sets} WHERE {where}')
    con.close()
    return dest
