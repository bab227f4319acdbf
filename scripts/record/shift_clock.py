#!/usr/bin/env python3
"""Copy an Nsight Systems SQLite export with its clock shifted by a known offset: the same run,
as if recorded on a host whose clock disagrees with the others' (for clock alignment tests).

    python -m scripts.record.shift_clock IN.sqlite OUT.sqlite --offset-ns 123456789 [--clock events|wallclock]

``--clock events`` (the default) adds the offset to every event time of the report: each
integer column the file's own tables name as a time (``start``, ``end``, ``timestamp``,
CUPTI's ``queued``/``submitted``/``completed``, ANALYSIS_DETAILS' ``startTime``/``stopTime``,
and any ``...Start``/``...Ns``/``...Timestamp`` a newer export adds; see :func:`time_columns`),
found by reading the file's schema, not from a fixed list of tables. The session's wall-clock
start (``TARGET_INFO_SESSION_START_TIME.utcEpochNs``) is kept: the report then says its events
happened ``offset`` later than they did. ``--clock wallclock`` instead adds the offset to that
wall-clock start only (not its ``utcTime``/``localTime`` text, which no reader uses), the
events kept: what a host
whose real-time clock is off by ``offset`` records. Either way the report is ``offset`` late
against the others on the wall clock.

The copy is labelled: table ``NVBRIDGE_SHIFTED(name, value)`` says ``shifted = yes``, the
offset, the mode, the source file and its SHA-256, and every column shifted with its row count.
The input is never modified; the output must not exist (``--force`` replaces it).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import sqlite3
import sys
from pathlib import Path

# A column is a time of the report's clock by its name (nsys and its versions spell them so);
# the wall-clock start is handled apart, and these look like times but are not.
TIME_NAME = re.compile(
    r"^(start|end|timestamp|queued|submitted|completed)$|(start|stop|end)(time|ts|ns)?$|timestamp$", re.IGNORECASE
)
NOT_TIMES = frozenset({"endGlobalTid", "endLineNo", "funcEndLineNo", "timestampType", "utcTime", "localTime"})
WALLCLOCK = ("TARGET_INFO_SESSION_START_TIME", "utcEpochNs")


def time_columns(con: sqlite3.Connection) -> list[tuple[str, str]]:
    """(table, column) of every integer column of the report's clock, read from its schema."""
    out = []
    tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    for table in tables:
        for _cid, name, decl, *_ in con.execute(f"PRAGMA table_info('{table}')"):
            if (table, name) == WALLCLOCK or name in NOT_TIMES or not TIME_NAME.search(name):
                continue
            if "INT" in (decl or "").upper() or _all_integers(con, table, name):
                out.append((table, name))
    return out


def _all_integers(con: sqlite3.Connection, table: str, column: str) -> bool:
    """A column declared without a type holds times if every value it has is an integer."""
    kinds = {k for (k,) in con.execute(f'SELECT DISTINCT typeof("{column}") FROM "{table}"')}
    return bool(kinds) and kinds <= {"integer", "null"}


def shift(source: Path, dest: Path, offset_ns: int, clock: str = "events") -> dict[str, str]:
    """Write ``dest``: ``source`` shifted (module doc); returns the label's rows."""
    check = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        tables = {t for (t,) in check.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        check.close()
    if "StringIds" not in tables:  # nvprof keeps StringTable (and epoch times: another story)
        raise SystemExit(f"{source} is not an Nsight Systems export (no StringIds table)")
    if clock == "wallclock" and WALLCLOCK[0] not in tables:
        raise SystemExit(f"{source} records no wall-clock start ({WALLCLOCK[0]}); shift --clock events")
    shutil.copyfile(source, dest)
    label = {
        "shifted": "yes",
        "generator": "scripts/record/shift_clock.py",
        "offset_ns": str(offset_ns),
        "clock": clock,
        "source": source.name,
        "source_sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
    }
    con = sqlite3.connect(dest)
    try:
        with con:
            targets = time_columns(con) if clock == "events" else [WALLCLOCK]
            for table, column in targets:
                cur = con.execute(
                    f'UPDATE "{table}" SET "{column}" = "{column}" + ? WHERE "{column}" IS NOT NULL', (offset_ns,)
                )
                label[f"column.{table}.{column}"] = f"{cur.rowcount} rows"
            con.execute("CREATE TABLE NVBRIDGE_SHIFTED (name TEXT PRIMARY KEY, value TEXT)")
            con.executemany("INSERT INTO NVBRIDGE_SHIFTED VALUES (?, ?)", sorted(label.items()))
    finally:
        con.close()
    return label


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--offset-ns", type=int, required=True)
    parser.add_argument("--clock", choices=("events", "wallclock"), default="events")
    parser.add_argument("--force", action="store_true", help="replace DEST if it exists")
    args = parser.parse_args(argv)
    if args.dest.exists() and not args.force:
        sys.exit(f"{args.dest} exists; pass --force to replace it")
    if args.dest.resolve() == args.source.resolve():
        sys.exit("DEST is SOURCE; the input is never modified")
    label = shift(args.source, args.dest, args.offset_ns, args.clock)
    shifted = [k.removeprefix("column.") for k in label if k.startswith("column.")]
    print(f"{args.dest}: {args.clock} shifted by {args.offset_ns} ns ({', '.join(shifted)})")


if __name__ == "__main__":
    main()
