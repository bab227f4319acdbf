#!/usr/bin/env python3
"""Copy an Nsight Systems SQLite export with SYNTHETIC NCCL payload values filled in: what an
export of ``nsys -t nccl`` with ``--include-blobs=true`` holds, over the file's own payload
schemas, for an export whose payload values were not exported (``binaryData`` NULL).

    python -m scripts.record.synthetic_nccl_payloads IN.sqlite OUT.sqlite [--force]

Every NCCL API range (an NVTX_EVENTS row of a domain the file declares payload schemas for, named
``nccl...``) whose name says which schema it uses gets ``binaryData``: a 32-byte header of four
little-endian uint64 (domain id, schema id, payload size, 32: where the payload starts), then the
payload laid out by that schema's own entries (``NVTX_PAYLOAD_SCHEMA_ENTRIES``: each field's
type and offset; nothing about the layout is assumed here). The schema is picked by its entries'
labels: ``ncclSend``/``ncclRecv`` a schema with a message size and a peer (the first such schema
id for sends, the second for receives), ``ncclAllReduce``/``ncclReduceScatter`` a size and a
reduction, ``ncclReduce`` a size, root and reduction, ``ncclBroadcast`` a size and a root,
``ncclAllGather`` a size alone; other ranges (``ncclGroupStart``, ``ncclGroupEnd``,
``ncclCommCount``) keep none. The values are made up, deterministic per row: message size
``4096 * (1 + rowid % 13)``, one communicator id for every row, peer or root 0, reduction 0.

The copy is labelled: table ``NVBRIDGE_SYNTHETIC(name, value)`` says ``synthetic = yes``, what
was filled, the source file and its SHA-256, and how many rows got a payload. The input is never
modified; the output must not exist (``--force`` replaces it).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sqlite3
import struct
import sys
from pathlib import Path

HEADER = 32
COMM_ID = 0x5EED_C0DE_0000_0001
# NVTX payload entry types (nvToolsExtPayload.h) -> struct codes, C types at LP64 sizes
FORMATS = {
    1: "b", 2: "B", 3: "h", 4: "H", 5: "i", 6: "I", 7: "q", 8: "Q", 9: "q", 10: "Q",
    11: "b", 12: "B", 13: "h", 14: "H", 15: "i", 16: "I", 17: "q", 18: "Q", 22: "Q", 23: "Q",
}  # fmt: skip
ENUM_FORMAT = "i"  # a registered enum type (ids from 1 << 24): a C enum
# range name -> (labels its schema has, labels it lacks)
WANTS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "ncclSend": (frozenset({"size", "peer"}), frozenset()),
    "ncclRecv": (frozenset({"size", "peer"}), frozenset()),
    "ncclAllReduce": (frozenset({"size", "redop"}), frozenset({"root", "peer"})),
    "ncclReduceScatter": (frozenset({"size", "redop"}), frozenset({"root", "peer"})),
    "ncclReduce": (frozenset({"size", "root", "redop"}), frozenset({"peer"})),
    "ncclBroadcast": (frozenset({"size", "root"}), frozenset({"redop", "peer"})),
    "ncclAllGather": (frozenset({"size"}), frozenset({"root", "redop", "peer"})),
}
LABELS = {
    "message size [bytes]": "size",
    "bytes": "size",
    "peer rank": "peer",
    "root": "root",
    "reduction operation": "redop",
    "nccl communicator id": "comm",
}


def schemas(con: sqlite3.Connection) -> dict[tuple[int, int], tuple[int, list[tuple[str, int, int]]]]:
    """(domain, schema) -> (payload size, [(label kind, type, offset)]) from the file's tables."""
    out: dict[tuple[int, int], tuple[int, list[tuple[str, int, int]]]] = {}
    for d, s, size in con.execute("SELECT DISTINCT domainId, schemaId, payloadSize FROM NVTX_PAYLOAD_SCHEMAS"):
        out[(d, s)] = (int(size), [])
    rows = con.execute(
        'SELECT DISTINCT domainId, schemaId, idx, "type", name, "offset" FROM NVTX_PAYLOAD_SCHEMA_ENTRIES '
        "ORDER BY domainId, schemaId, idx"
    )
    for d, s, _idx, typ, name, offset in rows:
        if (d, s) in out:
            out[(d, s)][1].append((LABELS.get(str(name).strip().lower(), "other"), int(typ), int(offset or 0)))
    return out


def schema_for(
    name: str, domain: int, known: dict[tuple[int, int], tuple[int, list[tuple[str, int, int]]]]
) -> int | None:
    """The schema a range of ``name`` uses, by its entries' labels (None: it carries none here)."""
    if name not in WANTS:
        return None
    has, lacks = WANTS[name]
    fits = sorted(
        s for (d, s), (_, entries) in known.items() if d == domain and _fits({e[0] for e in entries}, has, lacks)
    )
    if not fits:
        return None
    return fits[min(1, len(fits) - 1)] if name == "ncclRecv" else fits[0]


def _fits(kinds: set[str], has: frozenset[str], lacks: frozenset[str]) -> bool:
    return has <= kinds and not (lacks & kinds)


def payload(size: int, entries: list[tuple[str, int, int]], message: int) -> bytes:
    """The payload struct, each field packed at its entry's offset by its entry's type."""
    buf = bytearray(size)
    values = {"size": message, "comm": COMM_ID, "peer": 0, "root": 0, "redop": 0}
    for kind, typ, offset in entries:
        fmt = FORMATS.get(typ) or (ENUM_FORMAT if typ >= 1 << 24 else None)
        if fmt is None or kind not in values or offset + struct.calcsize(fmt) > size:
            continue
        struct.pack_into("<" + fmt, buf, offset, values[kind])
    return bytes(buf)


def fill(con: sqlite3.Connection) -> int:
    """Give every NCCL range whose schema its name says a synthetic payload; rows filled."""
    known = schemas(con)
    domains = sorted({d for d, _ in known})
    if not domains:
        return 0
    marks = ", ".join("?" * len(domains))
    rows = con.execute(
        f"SELECT e.rowid, e.domainId, COALESCE(e.text, s.value) FROM NVTX_EVENTS e "
        f"LEFT JOIN StringIds s ON s.id = e.textId WHERE e.domainId IN ({marks})",
        domains,
    ).fetchall()
    filled = 0
    for rowid, domain, name in rows:
        schema = schema_for(str(name), int(domain), known)
        if schema is None:
            continue
        size, entries = known[(int(domain), schema)]
        blob = struct.pack("<4Q", int(domain), schema, size, HEADER) + payload(size, entries, 4096 * (1 + rowid % 13))
        con.execute("UPDATE NVTX_EVENTS SET binaryData = ? WHERE rowid = ?", (blob, rowid))
        filled += 1
    return filled


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", type=Path)
    ap.add_argument("output", type=Path)
    ap.add_argument("--force", action="store_true", help="replace the output if it exists")
    args = ap.parse_args(argv)
    if args.output.resolve() == args.input.resolve():
        print("error: the output must be another file than the input; name a new one.", file=sys.stderr)
        return 2
    if args.output.exists() and not args.force:
        print(f"error: {args.output} exists; pass --force to replace it.", file=sys.stderr)
        return 2
    with sqlite3.connect(f"file:{args.input}?mode=ro", uri=True) as check:
        tables = {t for (t,) in check.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"NVTX_EVENTS", "NVTX_PAYLOAD_SCHEMAS", "NVTX_PAYLOAD_SCHEMA_ENTRIES"} <= tables:
        print(f"error: {args.input} has no NVTX payload schemas; use an export of nsys -t nccl.", file=sys.stderr)
        return 2
    digest = hashlib.sha256(args.input.read_bytes()).hexdigest()
    shutil.copyfile(args.input, args.output)
    con = sqlite3.connect(args.output)
    try:
        filled = fill(con)
        con.execute("CREATE TABLE NVBRIDGE_SYNTHETIC (name TEXT, value TEXT)")
        label = [
            ("synthetic", "yes"),
            ("what", "NVTX_EVENTS.binaryData of NCCL ranges: made-up payload values over the file's own schemas"),
            ("by", "scripts/record/synthetic_nccl_payloads.py"),
            ("source", args.input.name),
            ("source_sha256", digest),
            ("rows_filled", str(filled)),
        ]
        con.executemany("INSERT INTO NVBRIDGE_SYNTHETIC VALUES (?, ?)", label)
        con.commit()
    finally:
        con.close()
    print(f"{args.output}: {filled} NCCL ranges given synthetic payloads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
