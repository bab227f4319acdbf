"""NCCL's own NVTX payloads (``nsys -t nccl``, NCCL 2.19+), decoded by the export's own schema
tables: per NCCL API range (``ncclAllReduce``, ``ncclSend``, ...), its communicator, message
size, peer or root and reduction operation.

NCCL annotates each API call as an NVTX range in its domain with an extended payload: a C struct
whose layout NCCL registers as a payload schema. Nsight Systems exports the schemas
(``NVTX_PAYLOAD_SCHEMAS``: ``domainId, schemaId, payloadSize``; ``NVTX_PAYLOAD_SCHEMA_ENTRIES``:
each field's ``idx, type, name, offset``, a NULL offset being 0) and, with
``--include-blobs=true``, each event's payload in ``NVTX_EVENTS.binaryData``. NVIDIA documents
no layout for that column; the one read here (what third-party decoders of 2026 exports read)
is a 32-byte header of four little-endian uint64 -- the domain id, the schema id, the payload's
size and where it starts (32; some read the total size, 32 + size) -- then the payload. A blob
is decoded only when its header agrees with the file itself (its row's domain, a schema the file
declares in that domain, that schema's size, a blob long enough); anything else is left
undecoded and counted, never guessed. ``jsonText`` (``--include-json``) is read where no blob
decodes: values under the schema entries' own names.

Fields are found by the entries' names (NCCL's stable labels, never offsets or schema ids, which
NCCL renumbered between releases), their widths by NVTX's entry types (``nvToolsExtPayload.h``;
the C types at LP64 sizes, as on Linux). Few rows: NCCL's ranges are a small share of
NVTX_EVENTS, so they are read with one SQL query filtered by domain and name.
"""

from __future__ import annotations

import json
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from nvbridge.readers._db import Database
from nvbridge.readers.nsys_source import NsysWindows
from nvbridge.readers.nsys_tables import TID_BITS, process_ids
from nvbridge.readers.raw import WindowSource

HEADER = 32
# Schema ids from here on are registered schemas or enums (NVTX_PAYLOAD_ENTRY_TYPE_SCHEMA_ID_STATIC_START).
SCHEMA_ID_START = 1 << 24
# NVTX payload entry types -> NumPy little-endian types (C types at LP64 sizes).
ENTRY_TYPES: dict[int, str] = {
    1: "<i1", 2: "<u1", 3: "<i2", 4: "<u2", 5: "<i4", 6: "<u4", 7: "<i8", 8: "<u8", 9: "<i8", 10: "<u8",
    11: "<i1", 12: "<u1", 13: "<i2", 14: "<u2", 15: "<i4", 16: "<u4", 17: "<i8", 18: "<u8",
    22: "<u8", 23: "<u8", 24: "<i4", 25: "<u1", 26: "<u2", 27: "<u4",
}  # fmt: skip
ENUM_TYPE = "<i4"  # a registered enum (ncclRedOp_t): a C enum, int-sized

# output column -> how NCCL labels the entry (lower case; "Bytes" in NCCL 2.19's first schemas)
FIELDS: dict[str, tuple[str, ...]] = {
    "comm": ("nccl communicator id",),
    "bytes": ("message size [bytes]", "bytes"),
    "peer": ("peer rank",),
    "root": ("root",),
    "red_op": ("reduction operation",),
    "nranks": ("no. of ranks",),
    "rank": ("rank",),
}
PAYLOADS = pa.schema(
    [
        *(("process_id", pa.int64()), ("thread_id", pa.int64()), ("start_ns", pa.int64()), ("end_ns", pa.int64())),
        *(("name", pa.string()), ("domain_id", pa.int64()), ("schema_id", pa.int64()), ("comm", pa.string())),
        *(("bytes", pa.int64()), ("peer", pa.int64()), ("root", pa.int64()), ("red_op", pa.int64())),
        *(("nranks", pa.int64()), ("rank", pa.int64())),
    ]
)


@dataclass(frozen=True, slots=True)
class Schema:
    size: int
    fields: dict[str, tuple[int, str]]  # output column -> (offset, NumPy type)


@dataclass(frozen=True, slots=True)
class Payloads:
    table: pa.Table  # PAYLOADS: one row per NCCL range whose payload decoded
    undecoded: int  # NCCL ranges with a blob or JSON that did not decode


def field_of(name: str | None) -> str | None:
    """The output column a schema entry's label names (None: not one read here)."""
    label = (name or "").strip().lower()
    return next((col for col, labels in FIELDS.items() if label in labels), None)


def schemas(db: Database) -> dict[tuple[int, int], Schema]:
    """The file's payload schemas by (domain, schema id); each is listed once per process that
    registered it, identically."""
    if not db.has("NVTX_PAYLOAD_SCHEMAS") or not db.has("NVTX_PAYLOAD_SCHEMA_ENTRIES"):
        return {}
    sizes = {}
    for d, s, n in db.scalar_rows(_SIZES_SQL):
        key, size = (_int(d), _int(s)), _int(n)
        if key[0] is not None and key[1] is not None and size is not None and size > 0:
            sizes[(key[0], key[1])] = size
    return build_schemas(sizes, db.scalar_rows(_ENTRIES_SQL))


def _int(value: object) -> int | None:
    """An integer cell's value (None: NULL, or another type: a hostile or damaged row)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_SIZES_SQL = "SELECT DISTINCT domainId, schemaId, payloadSize FROM NVTX_PAYLOAD_SCHEMAS"
_ENTRIES_SQL = (
    'SELECT DISTINCT domainId, schemaId, idx, "type", name, "offset" FROM NVTX_PAYLOAD_SCHEMA_ENTRIES '
    "ORDER BY domainId, schemaId, idx"
)


def build_schemas(
    sizes: dict[tuple[int, int], int], entries: list[tuple[object, ...]]
) -> dict[tuple[int, int], Schema]:
    """Schemas from the rows of the two tables (an entry outside the payload's size, or of a type
    not read here, is dropped)."""
    fields: dict[tuple[int, int], dict[str, tuple[int, str]]] = {k: {} for k in sizes}
    for domain, schema, _idx, typ, name, offset in entries:
        key, t, at = (_int(domain), _int(schema)), _int(typ), 0 if offset is None else _int(offset)
        col = field_of(name if isinstance(name, str) else None)
        if key not in fields or col is None or col in fields[key] or t is None or at is None:
            continue
        dtype = ENTRY_TYPES.get(t) or (ENUM_TYPE if t >= SCHEMA_ID_START else None)
        if dtype is not None and 0 <= at and at + np.dtype(dtype).itemsize <= sizes[key]:
            fields[key][col] = (at, dtype)
    return {k: Schema(sizes[k], f) for k, f in fields.items() if f}


def of_source(source: WindowSource) -> Future[pa.Table]:
    """The decoded payloads of a streamed Nsight Systems export, read on its database's reader
    threads while the conversion goes on (the database stays open until its sinks finish); none
    for a report read whole (nvprof, a database URL), whose reader keeps no database."""
    if not isinstance(source, NsysWindows):
        done: Future[pa.Table] = Future()
        done.set_result(PAYLOADS.empty_table())
        return done
    db = source.db

    def payloads() -> pa.Table:
        with db.translate_errors():
            return read(db).table

    out: Future[pa.Table] = db.run(payloads)
    return out


def read(db: Database) -> Payloads:
    """The decoded payloads of NCCL's ranges in ``db`` (none without payload schemas)."""
    known = schemas(db)
    if not known or "binaryData" not in db.columns("NVTX_EVENTS"):
        return Payloads(PAYLOADS.empty_table(), 0)
    domains = ", ".join(str(d) for d in sorted({d for d, _ in known}))
    json_col = "e.jsonText" if "jsonText" in db.columns("NVTX_EVENTS") else "NULL"
    rows = db.scalar_rows(
        f"SELECT e.start, e.end, e.globalTid, e.domainId, COALESCE(e.text, s.value), "
        f"CAST(e.binaryData AS BLOB), {json_col} FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
        f"WHERE e.domainId IN ({domains}) AND (e.binaryData IS NOT NULL OR {json_col} IS NOT NULL)"
    )
    return decode([r for r in rows if _nccl_range(r)], known)


def _nccl_range(row: tuple[object, ...]) -> bool:
    """A well-formed row of one of NCCL's ranges (start, globalTid and domain integers, the end
    an integer or NULL, a name ``nccl...``); the conversion refuses any other row itself."""
    start, end, gtid, domain, name = row[:5]
    ints = all(_int(v) is not None for v in (start, gtid, domain)) and (end is None or _int(end) is not None)
    return ints and isinstance(name, str) and name.startswith("nccl")


def decode(rows: list[tuple[object, ...]], known: dict[tuple[int, int], Schema]) -> Payloads:
    """Decode rows of (start, end, globalTid, domainId, name, blob, jsonText)."""
    if not rows:
        return Payloads(PAYLOADS.empty_table(), 0)
    n = len(rows)
    domain = np.array([r[3] for r in rows], np.int64)
    blobs = [r[5] if isinstance(r[5], bytes) else b"" for r in rows]
    cols: dict[str, np.ndarray] = {c: np.zeros(n, np.int64) for c in FIELDS}
    valid: dict[str, np.ndarray] = {c: np.zeros(n, bool) for c in FIELDS}
    schema_id = _headers(blobs, domain, known)
    for (d, s), schema in known.items():
        at = np.flatnonzero((schema_id == s) & (domain == d))
        if not len(at):
            continue
        block = np.frombuffer(b"".join(blobs[i][HEADER : HEADER + schema.size] for i in at.tolist()), np.uint8)
        block = block.reshape(len(at), schema.size)
        for col, (offset, dtype) in schema.fields.items():
            width = np.dtype(dtype).itemsize
            values = np.ascontiguousarray(block[:, offset : offset + width]).view(dtype).ravel()
            cols[col][at] = values.astype(np.uint64).view(np.int64) if col == "comm" else values.astype(np.int64)
            valid[col][at] = True
    done = schema_id >= 0
    _from_json(rows, ~done, known, cols, valid)
    decoded = done | np.any(np.column_stack([valid[c] for c in FIELDS]), axis=1)
    undecoded = int(np.count_nonzero(~decoded))
    keep = np.flatnonzero(decoded)
    gtid = np.array([r[2] for r in rows], np.int64)[keep]
    start = np.array([r[0] for r in rows], np.int64)[keep]
    end = np.array([r[0] if r[1] is None else r[1] for r in rows], np.int64)[keep]
    comm = cols["comm"][keep].view(np.uint64)
    table = pa.table(
        {
            "process_id": process_ids(gtid),
            "thread_id": gtid & TID_BITS,
            "start_ns": start,
            "end_ns": end,
            "name": pa.array([str(rows[i][4]) for i in keep.tolist()], pa.string()),
            "domain_id": domain[keep],
            "schema_id": np.where(schema_id[keep] >= 0, schema_id[keep], -1),
            "comm": pa.array([f"0x{c:016x}" for c in comm.tolist()], pa.string(), mask=~valid["comm"][keep]),
            **{c: pa.array(cols[c][keep], pa.int64(), mask=~valid[c][keep]) for c in FIELDS if c != "comm"},
        },
        schema=PAYLOADS,
    )
    return Payloads(table, undecoded)


def _headers(blobs: list[bytes], domain: np.ndarray, known: dict[tuple[int, int], Schema]) -> np.ndarray:
    """Per blob, the schema id its header names where the header agrees with the file (-1 else)."""
    out = np.full(len(blobs), -1, np.int64)
    long_enough = np.flatnonzero(np.array([len(b) >= HEADER for b in blobs], bool))
    if not len(long_enough):
        return out
    head = np.frombuffer(b"".join(blobs[i][:HEADER] for i in long_enough.tolist()), "<u8").reshape(-1, 4)
    length = np.array([len(blobs[i]) for i in long_enough.tolist()], np.int64)
    for (d, s), schema in known.items():
        ok = (head[:, 0] == d) & (head[:, 1] == s) & (domain[long_enough] == d) & (head[:, 2] == schema.size)
        ok &= (head[:, 3] == HEADER) | (head[:, 3] == HEADER + schema.size)
        ok &= length >= HEADER + schema.size
        out[long_enough[ok]] = s
    return out


def _from_json(
    rows: list[tuple[object, ...]],
    todo: np.ndarray,
    known: dict[tuple[int, int], Schema],
    cols: dict[str, np.ndarray],
    valid: dict[str, np.ndarray],
) -> None:
    """Fields of the rows no blob decoded, from their jsonText: the values under the labels the
    file's schemas use (an object's keys, at any depth)."""
    if not known:
        return
    for i in np.flatnonzero(todo).tolist():
        text = rows[i][6]
        if not isinstance(text, str) or not text.strip():
            continue
        try:
            found = _labelled(json.loads(text))
        except ValueError:
            continue
        for col, value in found.items():
            cols[col][i] = np.array([value], np.uint64).view(np.int64)[0] if col == "comm" and value >= 0 else value
            valid[col][i] = True


def _labelled(node: object) -> dict[str, int]:
    """The integer values of ``node`` whose keys are labels read here (the first of each)."""
    out: dict[str, int] = {}
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            for key, value in cur.items():
                col = field_of(str(key))
                if col is not None and col not in out and isinstance(value, int) and not isinstance(value, bool):
                    out[col] = value
                elif isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(cur, list):
            stack.extend(cur)
    return out
