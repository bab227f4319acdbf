"""Damaged copies of real exports and samples for scripts/hostile/inputs.py: hostile values,
dropped tables and columns, truncations and byte flips (all synthetic damage, made at run time)."""

from __future__ import annotations

import functools
import random
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

from scripts.hostile.cases import (
    BIG,
    MAX,
    NVTX_RANGE,
    TIMEOUT,
    Case,
    K,
    Run,
    byte_build,
    compare_datasets,
    copy_to,
    env,
    first,
    is_nsys,
    mutated,
    nvbridge,
    rows,
    tables,
)


def value_cases(src: Path) -> list[Case]:
    """Hostile values in the event tables the readers take (refuse or flag expected)."""
    have = tables(src)
    tag = src.stem
    plans: list[tuple[str, str, str]] = []  # (table, row filter, kind)
    if "NVTX_EVENTS" in have and rows(src, "NVTX_EVENTS", NVTX_RANGE):
        plans.append(("NVTX_EVENTS", NVTX_RANGE, "nvtx"))
    for table in (K + "RUNTIME", K + "KERNEL", K + "MEMCPY", K + "DRIVER", K + "CONCURRENT_KERNEL"):
        if table in have and rows(src, table):
            plans.append((table, "1", "event"))
    if K + "MARKER" in have and rows(src, K + "MARKER", "flags = 2"):
        plans.append((K + "MARKER", "flags = 2", "marker"))
    cases: list[Case] = []

    def add(name: str, sql: list[str], expect: str) -> None:
        cases.append(Case(f"value/{tag}/{name}", "hostile values", mutated(src, sql, expect)))

    for table, where, kind in plans:
        row = first(table, where)
        t = table.replace(K, "")
        start, end = ("timestamp", None) if kind == "marker" else ("start", '"end"')
        add(f"{t}.{start}=NULL", [f"UPDATE {table} SET {start} = NULL WHERE {row}"], "error")
        add(f"{t}.{start}<0", [f"UPDATE {table} SET {start} = -5 WHERE {row}"], "refuse_or_flag")
        add(f"{t}.{start}=BLOB", [f"UPDATE {table} SET {start} = x'00ff' WHERE {row}"], "error")
        add(f"{t}.{start}=text", [f"UPDATE {table} SET {start} = 'soon' WHERE {row}"], "error")
        add(f"{t}.{start}=2^62", [f"UPDATE {table} SET {start} = {BIG} WHERE {row}"], "refuse_or_flag")
        if end is None:
            add(f"{t}.objectId=short", [f"UPDATE {table} SET objectId = x'0102' WHERE {row}"], "error")
            add(f"{t}.{start}=0-among-epoch", [f"UPDATE {table} SET {start} = 0 WHERE {where}"], "error")
            add(f"{t}.name=missing-string", [f"UPDATE {table} SET name = 987654321 WHERE {row}"], "error")
            continue
        add(f"{t}.end=NULL", [f"UPDATE {table} SET {end} = NULL WHERE {row}"], "any" if kind == "nvtx" else "error")
        add(f"{t}.end=2^63-1", [f"UPDATE {table} SET {end} = {MAX} WHERE {row}"], "refuse_or_flag")
        add(f"{t}.end<start", [f"UPDATE {table} SET {end} = start - 1000 WHERE {row}"], "refuse_or_flag")
        add(
            f"{t}.swapped",
            [f"UPDATE {table} SET start = {end}, {end} = start WHERE {where} AND {end} > start"],
            "refuse_or_flag",
        )
        if kind == "nvtx":
            add("NVTX.eventType=NULL", [f"UPDATE {table} SET eventType = NULL WHERE {row}"], "error")
            add("NVTX.globalTid=NULL", [f"UPDATE {table} SET globalTid = NULL WHERE {row}"], "error")
            add("NVTX.end-column-dropped", [f'ALTER TABLE {table} DROP COLUMN "end"'], "error")
            add("NVTX.textId=missing", [f"UPDATE {table} SET text = NULL, textId = 987654321 WHERE {row}"], "error")
            add("NVTX.text=BLOB", [f"UPDATE {table} SET text = x'ff00fe' WHERE {row}"], "error")
            add("NVTX.end=2^61", [f"UPDATE {table} SET {end} = {BIG // 2} WHERE {row}"], "error")
            cases.append(Case(f"value/{tag}/NVTX.rowid=2^62", "hostile values", rowid_gap(src)))
            continue
        add(f"{t}.correlationId=NULL", [f"UPDATE {table} SET correlationId = NULL WHERE {row}"], "error")
        add(f"{t}.correlationId=text", [f"UPDATE {table} SET correlationId = 'x7' WHERE {row}"], "error")
        add(f"{t}.duplicated", [f"INSERT INTO {table} SELECT * FROM {table} WHERE {row}"], "refuse_or_flag")
        add(f"{t}.sum>int64", [f"UPDATE {table} SET start = 0, {end} = {BIG - 1}"], "refuse_or_flag")
        # one row 73 years after the others (each short): spans that overflowed later sums
        add(f"{t}.2^61-apart", [f"UPDATE {table} SET start = {BIG // 2}, {end} = {BIG // 2 + 1} WHERE {row}"], "error")
        if "MEMCPY" in table:
            add(f"{t}.bytes=2^63-1", [f"UPDATE {table} SET bytes = {MAX} WHERE {row}"], "error")
        if "KERNEL" in table and is_nsys(src):
            add(f"{t}.demangledName=missing", [f"UPDATE {table} SET demangledName = 987654321 WHERE {row}"], "error")
        if table.endswith("RUNTIME") and is_nsys(src):
            add(f"{t}.nameId=missing", [f"UPDATE {table} SET nameId = 987654321 WHERE {row}"], "error")
            add(f"{t}.globalTid=NULL", [f"UPDATE {table} SET globalTid = NULL WHERE {row}"], "error")
    if "NVTX_PAYLOAD_SCHEMA_ENTRIES" in have and "NVTX_PAYLOAD_SCHEMAS" in have:
        cases += _payload_cases(src)
    return cases


def _payload_cases(src: Path) -> list[Case]:
    """NVTX payload schemas and blobs (NCCL's bytes, nvbridge.readers.nccl_payloads) that cannot be
    decoded: the bytes come from shapes or the file is refused in one line, never a traceback."""
    nccl = "domainId IN (SELECT domainId FROM NVTX_PAYLOAD_SCHEMAS)"
    plans = {
        "offset=text": ["UPDATE NVTX_PAYLOAD_SCHEMA_ENTRIES SET \"offset\" = 'x'"],
        "type=NULL": ['UPDATE NVTX_PAYLOAD_SCHEMA_ENTRIES SET "type" = NULL'],
        "offset=2^62": [f'UPDATE NVTX_PAYLOAD_SCHEMA_ENTRIES SET "offset" = {BIG}'],
        "payloadSize=-1": ["UPDATE NVTX_PAYLOAD_SCHEMAS SET payloadSize = -1"],
        "blob=short": [f"UPDATE NVTX_EVENTS SET binaryData = x'0102' WHERE {nccl}"],
        "blob=zeros": [f"UPDATE NVTX_EVENTS SET binaryData = zeroblob(64) WHERE {nccl}"],
        "blob=random": [f"UPDATE NVTX_EVENTS SET binaryData = randomblob(48) WHERE {nccl}"],
        "blob=text": [f"UPDATE NVTX_EVENTS SET binaryData = 'not bytes' WHERE {nccl}"],
    }
    return [
        Case(f"value/{src.stem}/payload.{name}", "hostile values", mutated(src, sql, "any"))
        for name, sql in plans.items()
    ]


def rowid_gap(src: Path) -> Callable[[Path], Run]:
    """The last NVTX row moved to rowid 2^62: same dataset as the original, in time."""

    def build(work: Path) -> Run:
        dst = copy_to(src, work)
        con = sqlite3.connect(dst)
        con.execute(f"UPDATE NVTX_EVENTS SET rowid = {BIG} WHERE rowid = (SELECT max(rowid) FROM NVTX_EVENTS)")
        con.commit()
        con.close()
        ref = work / "out" / "ref"
        subprocess.run(
            nvbridge("convert", src, "-o", ref, "-q"), env=env(), check=True, capture_output=True, timeout=TIMEOUT
        )
        out = work / "out" / "ds"

        def same(_proc: subprocess.CompletedProcess[str]) -> str | None:
            return compare_datasets(ref, out)

        return Run(nvbridge("convert", dst, "-o", out, "-q"), "ok", [out], same, timeout=30)

    return build


def _dropped_columns(src: Path, tag: str, have: set[str]) -> list[Case]:
    """The columns that carry each table's meaning, each dropped: refused (issue 24, item 6); the
    others (domainId, mangledName: older exporters lack them) may read as their defaults."""
    cases: list[Case] = []
    optional = {"domainId", "mangledName", "shortName", "eventClass", "returnValue"}
    for table, cols in (
        ("NVTX_EVENTS", ("start", "eventType", "text", "globalTid", "textId", "domainId")),
        (K + "RUNTIME", ("start", "nameId", "correlationId", "globalTid", "cbid", "processId", "threadId")),
        (K + "KERNEL", ("start", "end", "demangledName", "correlationId", "name", "deviceId", "globalPid")),
        (K + "CONCURRENT_KERNEL", ("name", "correlationId", "streamId")),
        (K + "MEMCPY", ("bytes", "copyKind", "streamId", "globalPid")),
        (K + "MARKER", ("timestamp", "objectId", "flags", "id", "name")),
        ("ThreadNames", ("nameId",)),
        ("StringIds", ("value",)),
        ("StringTable", ("value",)),
    ):
        if table not in have:
            continue
        con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
        present = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
        con.close()
        for col in cols:
            if col in present:
                cases.append(
                    Case(
                        f"drop-column/{tag}/{table}.{col}",
                        "dropped columns",
                        mutated(
                            src, [f'ALTER TABLE {table} DROP COLUMN "{col}"'], "any" if col in optional else "error"
                        ),
                    )
                )
    return cases


def structure_cases(src: Path) -> list[Case]:
    tag = src.stem
    have = tables(src)
    cases = []
    for table in (
        "StringIds",
        "NVTX_EVENTS",
        K + "RUNTIME",
        K + "KERNEL",
        K + "MEMCPY",
        "META_DATA_EXPORT",
        "EXPORT_META_DATA",
        "TARGET_INFO_SESSION_START_TIME",
        "ThreadNames",
        "PROCESSES",
        "StringTable",
        K + "MARKER",
        "Version",
        K + "NAME",
    ):
        if table in have:
            cases.append(
                Case(f"drop-table/{tag}/{table}", "dropped tables", mutated(src, [f"DROP TABLE {table}"], "any"))
            )
    cases += _dropped_columns(src, tag, have)
    if "StringIds" in have:
        cases.append(
            Case(f"value/{tag}/StringIds-emptied", "hostile values", mutated(src, ["DELETE FROM StringIds"], "error"))
        )
    for table, col in (
        ("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"),
        ("ANALYSIS_DETAILS", "duration"),
        ("TARGET_INFO_GPU", "id"),
        ("PROCESSES", "globalPid"),
        ("Version", "version"),
    ):
        if table in have:
            cases.append(
                Case(
                    f"value/{tag}/{table}.{col}=text",
                    "hostile values",
                    mutated(src, [f"UPDATE {table} SET {col} = 'n/a'"], "any"),
                )
            )
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in have:
            cases.append(
                Case(
                    f"value/{tag}/{table}.value=BLOB",
                    "hostile values",
                    mutated(src, [f"UPDATE {table} SET value = x'ff00fe'"], "any"),
                )
            )
    return cases


def _cut(data: bytes, n: int) -> bytes:
    return data[:n]


def byte_cases(src: Path, rng: random.Random) -> list[Case]:
    tag = src.stem
    size = src.stat().st_size
    cases = []
    for frac in (0.001, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.999):
        cut = max(1, int(size * frac))
        cases.append(Case(f"truncate/{tag}/{cut}", "truncations", byte_build(src, functools.partial(_cut, n=cut))))
    cases.append(Case(f"truncate/{tag}/header", "truncations", byte_build(src, lambda b: b[:50])))
    for i in range(8):
        pos = rng.randrange(0, size) if i else rng.randrange(0, 100)

        def flip(b: bytes, p: int = pos) -> bytes:
            return b[:p] + bytes([b[p] ^ 0xFF]) + b[p + 1 :]

        cases.append(Case(f"flip/{tag}/{pos}", "byte flips", byte_build(src, flip)))
    return cases
