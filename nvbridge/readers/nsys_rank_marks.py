"""The rank marks emit_nvtx writes (``nvbridge.annotate._rank``): which process is which rank.

Each annotated process writes an NVTX mark in the domain ``nvbridge``, an inline ASCII message
``rank <rank> <world_size> <local_rank>`` (``-1``: unknown). Read here with one query over the
marks and domain creations of NVTX_EVENTS, by process (the pid bits of ``globalTid``); a
process's last mark that names a rank wins (a process may write a second one once
``torch.distributed`` is initialized).

Event types are looked up by name in the export's ENUM_NSYS_EVENT_TYPE where it has one
(``NvtxMark``, ``NvtxDomainCreate``), else the ids every export so far uses (34, 75). A mark whose
domain's creation the export lacks (a capture started after it) counts when its text has the
exact shape; a mark in the default domain or in a domain of another name never does.
"""

from __future__ import annotations

import json
import re

from nvbridge.readers._db import Database

DOMAIN = "nvbridge"
MESSAGE = re.compile(r"rank (-?\d+) (-?\d+) (-?\d+)")
Fields = tuple[int, int, int]  # rank, world size, local rank
# ENUM_NSYS_EVENT_TYPE's ids (as nsys_tables; not imported from there, which imports nsys_info)
NVTX_MARK, NVTX_DOMAIN_CREATE = 34, 75


def _event_type(db: Database, name: str, default: int) -> int:
    if {"id", "name"} <= db.columns("ENUM_NSYS_EVENT_TYPE"):
        rows = db.scalar_rows(f"SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name = '{name}'")
        if rows and isinstance(rows[0][0], int):
            return rows[0][0]
    return default


def process_ranks(db: Database) -> dict[int, Fields]:
    """Per process id, the (rank, world size, local rank) its last rank mark recorded."""
    if not {"eventType", "text", "globalTid", "domainId", "start"} <= db.columns("NVTX_EVENTS"):
        return {}
    mark = _event_type(db, "NvtxMark", NVTX_MARK)
    create = _event_type(db, "NvtxDomainCreate", NVTX_DOMAIN_CREATE)
    rows = db.scalar_rows(
        f"SELECT eventType, globalTid, domainId, text FROM NVTX_EVENTS WHERE eventType = {create} "
        f"OR (eventType = {mark} AND domainId != 0 AND text LIKE 'rank %') ORDER BY start"
    )
    domains = {((tid or 0) >> 24 & 0xFFFFFF, dom): text for etype, tid, dom, text in rows if etype == create}
    out: dict[int, Fields] = {}
    for etype, tid, dom, text in rows:
        if etype != mark or not isinstance(tid, int) or not isinstance(text, str):
            continue
        pid = tid >> 24 & 0xFFFFFF
        found = MESSAGE.fullmatch(text)
        if found is None or domains.get((pid, dom), DOMAIN) != DOMAIN:
            continue
        fields = (int(found[1]), int(found[2]), int(found[3]))
        if fields[0] >= 0:
            out[pid] = fields
    return out


def rank_facts(db: Database) -> tuple[int | None, int | None, str | None]:
    """(rank, world size, process ranks) for SourceInfo: ``rank`` where exactly one process
    recorded one; the world size where the marks agree on it; ``process_ranks`` as JSON
    ``{"<pid>": rank}`` where any process recorded its rank."""
    found = process_ranks(db)
    if not found:
        return None, None, None
    sizes = {f[1] for f in found.values()}
    world = sizes.pop() if len(sizes) == 1 and -1 not in sizes else None
    rank = next(iter(found.values()))[0] if len(found) == 1 else None
    return rank, world, json.dumps({str(p): f[0] for p, f in sorted(found.items())})
