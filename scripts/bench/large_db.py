#!/usr/bin/env python3
"""Build a large, real-shaped profiler database by tiling a real export in time.

    python -m scripts.bench.large_db SRC.sqlite OUT.sqlite --nvtx-rows 2000000 [--check]
    python -m scripts.bench.large_db SRC.sqlite OUT.sqlite --tiles 117

The schema and every non-event table (StringIds, ThreadNames, PROCESSES, META_*, TARGET_INFO_*,
ANALYSIS_DETAILS, nvprof's StringTable, ...) are copied once, through SQLite's backup API.
The event tables are then repeated K times inside SQLite (``INSERT ... SELECT`` over a
recursive CTE of tile numbers), tile ``i`` shifted by ``i * (event span + 1 us)`` so tiles
never overlap, with correlation ids (nvprof's MEMCPY ``runtimeCorrelationId`` too; nsys ``rangeId``,
nvprof marker ``id`` and ``_id_``) shifted past the source's maximum so they stay unique per
process (nvprof's start and end marker rows keep sharing one ``id``; 0 stays 0). nsys'
ANALYSIS_DETAILS.stopTime/duration move to the new end.

Tiles reuse the source's processes, threads and strings, so converting the result gives
K times the source's ops, API calls, GPU ops, marks and syncs and the same threads and
devices. ``--check`` verifies exactly that with ``nvbridge.conversion.convert_one`` (output in a temporary
directory, removed afterwards).

Generated files can be large (about 140 MB per million NVTX rows for the nsys 2026.2 export):
write them under /tmp or a git-ignored directory such as bench_out/, never into the repository.
"""

from __future__ import annotations

import argparse
import math
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

K = "CUPTI_ACTIVITY_KIND_"
NSYS_EVENT_TABLES = (
    "NVTX_EVENTS",
    K + "RUNTIME",
    K + "KERNEL",
    K + "MEMCPY",
    K + "MEMSET",
    K + "SYNCHRONIZATION",
    K + "GRAPH_TRACE",
)
NVPROF_EVENT_TABLES = (
    K + "MARKER",
    K + "MARKER_DATA",
    K + "RUNTIME",
    K + "DRIVER",
    K + "CONCURRENT_KERNEL",
    K + "KERNEL",
    K + "MEMCPY",
    K + "MEMCPY2",
    K + "MEMSET",
    K + "SYNCHRONIZATION",
)
# Columns holding a timestamp. Only positive values move: nvprof writes 0 for "not collected"
# (queued, submitted) and NULL stays NULL.
TIME_COLUMNS = frozenset(
    {
        "start",
        "end",
        "timestamp",
        "queued",
        "submitted",
        "completed",
        "qmdBulkReleaseDone",
        "qmdPreexitDone",
        "qmdLastCtaDone",
    }
)
# Id columns that must stay unique across tiles: shifted by i * (their max over the tiled
# tables + 1), so tile i's ids lie above every id of tiles < i.
ID_GROUPS = {
    "correlationId": "corr",  # nsys and nvprof: API call <-> GPU op, unique per process
    "runtimeCorrelationId": "corr",  # nvprof MEMCPY: the runtime call's correlationId (0: none)
    "rangeId": "range",  # nsys NVTX start/end ranges
}
NVPROF_MARKER_ID = "id"  # nvprof: start and end rows of one range share it


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def detect_kind(conn: sqlite3.Connection) -> str:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if K + "MARKER" in tables and "StringTable" in tables:
        return "nvprof"
    if "StringIds" in tables or "NVTX_EVENTS" in tables:
        return "nsys"
    raise SystemExit("source is neither an Nsight Systems nor an nvprof SQLite export")


def table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA main.table_info({quote(table)})")]


def event_tables(conn: sqlite3.Connection, kind: str) -> list[str]:
    wanted = NSYS_EVENT_TABLES if kind == "nsys" else NVPROF_EVENT_TABLES
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    return [t for t in wanted if t in tables]


def count(conn: sqlite3.Connection, table: str) -> int:
    return int(conn.execute(f"SELECT count(*) FROM {quote(table)}").fetchone()[0])


def nvtx_rows(conn: sqlite3.Connection, kind: str) -> int:
    table = "NVTX_EVENTS" if kind == "nsys" else K + "MARKER"
    has = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone()
    return count(conn, table) if has else 0


def plan(conn: sqlite3.Connection, kind: str, tables: list[str]) -> dict[str, int]:
    """Time span and id maxima of the source's event tables."""
    lo, hi = None, None
    maxima: dict[str, int] = {"corr": 0, "range": 0, "marker": 0}
    for t in tables:
        cols = table_columns(conn, t)
        for c in cols:
            if c in TIME_COLUMNS:
                a, b = conn.execute(
                    f"SELECT min({quote(c)}), max({quote(c)}) FROM {quote(t)} WHERE {quote(c)} > 0"
                ).fetchone()
                if a is not None:
                    lo = a if lo is None else min(lo, a)
                    hi = b if hi is None else max(hi, b)
            group = ID_GROUPS.get(c)
            if kind == "nvprof" and t in (K + "MARKER", K + "MARKER_DATA") and c == NVPROF_MARKER_ID:
                group = "marker"
            if group:
                m = conn.execute(f"SELECT max({quote(c)}) FROM {quote(t)}").fetchone()[0]
                maxima[group] = max(maxima[group], int(m or 0))
    if lo is None or hi is None:
        raise SystemExit("source has no timed events to tile")
    return {
        "t0": int(lo),
        "t1": int(hi),
        "time_step": int(hi) - int(lo) + 1000,  # span + 1 us gap
        "corr_step": maxima["corr"] + 1,
        "range_step": maxima["range"] + 1,
        "marker_step": maxima["marker"] + 1,
    }


def tile_table(conn: sqlite3.Connection, kind: str, table: str, tiles: int, p: dict[str, int]) -> int:
    """Append tiles 1..tiles-1 of ``table`` (tile 0 is the source's own rows)."""
    cols = table_columns(conn, table)
    src_rows = count(conn, table)
    if src_rows == 0 or tiles <= 1:
        return src_rows
    exprs = []
    for c in cols:
        q = "s." + quote(c)
        step = None
        if c in TIME_COLUMNS:
            step = p["time_step"]
        elif c in ID_GROUPS:
            step = p[ID_GROUPS[c] + "_step"]
        elif kind == "nvprof" and c == NVPROF_MARKER_ID and table in (K + "MARKER", K + "MARKER_DATA"):
            step = p["marker_step"]
        if c == "_id_":  # nvprof's AUTOINCREMENT key: 1..n per table, shift by n per tile
            mx = int(conn.execute(f"SELECT max(_id_) FROM {quote(table)}").fetchone()[0])
            exprs.append(f"{q} + t.i * {mx}")
        elif step is not None:
            exprs.append(f"CASE WHEN {q} > 0 THEN {q} + t.i * {step} ELSE {q} END")
        else:
            exprs.append(q)
    conn.execute("DROP TABLE IF EXISTS temp._tile_src")
    conn.execute(f"CREATE TEMP TABLE _tile_src AS SELECT * FROM main.{quote(table)} ORDER BY rowid")
    # CROSS JOIN keeps t as the outer loop: rows go in tile by tile, in the source's order.
    conn.execute(
        f"WITH RECURSIVE t(i) AS (VALUES(1) UNION ALL SELECT i + 1 FROM t WHERE i < {tiles - 1}) "
        f"INSERT INTO main.{quote(table)} ({', '.join(quote(c) for c in cols)}) "
        f"SELECT {', '.join(exprs)} FROM t CROSS JOIN temp._tile_src AS s"
    )
    conn.execute("DROP TABLE temp._tile_src")
    if "_id_" in cols:
        conn.execute(
            "UPDATE sqlite_sequence SET seq = (SELECT max(_id_) FROM main." + quote(table) + ") WHERE name = ?",
            (table,),
        )
    return src_rows


def build(
    src: Path, out: Path, *, tiles: int | None = None, nvtx_target: int | None = None, quiet: bool = False
) -> dict[str, object]:
    """Write ``out``, tiled from ``src``; returns what was done (kind, tiles, row counts)."""
    t_start = time.perf_counter()
    src_conn = sqlite3.connect(f"file:{src.resolve()}?mode=ro", uri=True)
    kind = detect_kind(src_conn)
    if tiles is None:
        n = nvtx_rows(src_conn, kind)
        if not n:
            raise SystemExit(f"{src.name} has no NVTX/marker rows; pass --tiles instead of --nvtx-rows")
        tiles = max(1, math.ceil((nvtx_target or n) / n))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    tmp.unlink(missing_ok=True)
    try:
        dst = sqlite3.connect(tmp, isolation_level=None)
        src_conn.backup(dst)  # schema + every table once, page by page
        src_conn.close()
        for pragma in (
            "journal_mode=OFF",
            "synchronous=OFF",
            "temp_store=MEMORY",
            "cache_size=-262144",
            "locking_mode=EXCLUSIVE",
        ):
            dst.execute("PRAGMA " + pragma)
        tables = event_tables(dst, kind)
        p = plan(dst, kind, tables)
        # Indexes are dropped for the bulk insert and rebuilt after (nvprof indexes
        # correlationId and timestamps; nsys exports have none).
        indexes = dst.execute(
            "SELECT name, sql FROM sqlite_master WHERE type='index' AND sql IS NOT NULL AND tbl_name IN ("
            + ",".join("?" * len(tables))
            + ")",
            tables,
        ).fetchall()
        dst.execute("BEGIN")
        for name, _sql in indexes:
            dst.execute(f"DROP INDEX {quote(name)}")
        src_counts = {t: tile_table(dst, kind, t, tiles, p) for t in tables}
        for _name, sql in indexes:
            dst.execute(sql)
        shift = (tiles - 1) * p["time_step"]
        if kind == "nsys" and "duration" in table_columns(dst, "ANALYSIS_DETAILS"):
            sets = ["duration = duration + ?"]
            args = [shift]
            if "stopTime" in table_columns(dst, "ANALYSIS_DETAILS"):
                sets.append("stopTime = stopTime + ?")
                args.append(shift)
            dst.execute(f"UPDATE ANALYSIS_DETAILS SET {', '.join(sets)}", args)
        dst.execute("COMMIT")
        out_counts = {t: count(dst, t) for t in tables}
        dst.close()
        bad = {t: (src_counts[t], out_counts[t]) for t in tables if out_counts[t] != tiles * src_counts[t]}
        if bad:
            raise SystemExit(f"row counts are not {tiles}x the source's: {bad}")
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    seconds, size = time.perf_counter() - t_start, out.stat().st_size
    result = {
        "kind": kind,
        "tiles": tiles,
        "src_counts": src_counts,
        "out_counts": out_counts,
        "time_step_ns": p["time_step"],
        "seconds": seconds,
        "bytes": size,
    }
    if not quiet:
        nv = "NVTX_EVENTS" if kind == "nsys" else K + "MARKER"
        print(
            f"{out}: {kind}, {tiles} tiles of {src.name} "
            f"({out_counts.get(nv, 0):,} {nv} rows, {sum(out_counts.values()):,} event rows, "
            f"{size / 1e6:.0f} MB) in {seconds:.1f} s"
        )
    return result


def check(src: Path, out: Path, tiles: int) -> None:
    """Convert both with nvbridge and require K x the source's rows, attribution included."""
    from nvbridge.conversion.report import convert_one
    from nvbridge.dataset.files import read
    from nvbridge.dataset.schema import TABLES

    scaled = (
        "rows_read",
        "ops",
        "api_calls",
        "api_calls_outside_ranges",
        "kernels",
        "memcpys",
        "memsets",
        "graph_launches",
        "gpu_ops_without_api_call",
        "gpu_ops_unattributed",
        "gpu_ns_total",
        "gpu_ns_unattributed",
    )
    same = ("threads", "processes")
    with tempfile.TemporaryDirectory(prefix="nvbridge-check-") as tmp:
        a = convert_one(src, Path(tmp) / "src")
        b = convert_one(out, Path(tmp) / "tiled")
        meta_a, _ = read(Path(tmp) / "src")
        meta_b, _ = read(Path(tmp) / "tiled")
    problems = [
        f"{f}: {getattr(a, f)} x {tiles} != {getattr(b, f)}" for f in scaled if getattr(a, f) * tiles != getattr(b, f)
    ]
    problems += [f"{f}: {getattr(a, f)} != {getattr(b, f)}" for f in same if getattr(a, f) != getattr(b, f)]
    for table in TABLES:
        ra, rb = int(meta_a[f"rows.{table}"] or 0), int(meta_b[f"rows.{table}"] or 0)
        want = ra if table in ("threads", "devices") else ra * tiles
        if rb != want:
            problems.append(f"rows.{table}: {rb} != {want}")
    if problems:
        raise SystemExit("check failed:\n  " + "\n  ".join(problems))
    print(
        f"check ok: nvbridge reads {b.rows_read:,} rows = {tiles} x {a.rows_read:,}; ops, API calls, "
        f"GPU ops, marks, syncs and attribution are {tiles}x the source's "
        f"(converted in {a.seconds:.2f} s and {b.seconds:.2f} s)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="a real nsys or nvprof SQLite export (read only)")
    ap.add_argument("output", type=Path, help="the tiled database to write (replaced if present)")
    size = ap.add_mutually_exclusive_group(required=True)
    size.add_argument(
        "--nvtx-rows", type=int, metavar="N", help="tile until at least N NVTX rows (nvprof: MARKER rows)"
    )
    size.add_argument("--tiles", type=int, metavar="K", help="repeat the event tables K times")
    ap.add_argument(
        "--check", action="store_true", help="convert source and result with nvbridge and require K x the rows"
    )
    args = ap.parse_args(argv)
    if args.output.resolve() == args.source.resolve():
        ap.error("output must differ from source")
    if (args.tiles is not None and args.tiles < 1) or (args.nvtx_rows is not None and args.nvtx_rows < 1):
        ap.error("--tiles and --nvtx-rows must be positive")
    result = build(args.source, args.output, tiles=args.tiles, nvtx_target=args.nvtx_rows)
    if args.check:
        check(args.source, args.output, int(result["tiles"]))  # type: ignore[call-overload]
    return 0


if __name__ == "__main__":
    sys.exit(main())
