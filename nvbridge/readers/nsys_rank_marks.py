"""The rank marks emit_nvtx writes (``nvbridge.annotate._rank``): which process is which rank.

Each annotated process writes an NVTX mark in the domain ``nvbridge``, an inline ASCII message
``rank <rank> <world_size> <local_rank>`` (``-1``: unknown). They are read from the ``marks``
table a conversion makes anyway (its ``domain`` names the domain from the export's
NvtxDomainCreate rows), not with a query of their own: NVTX_EVENTS has no index, and a scan of
it for a few marks cost a 10M-row conversion seconds. Per process (``process_id``) the last mark
that names a rank wins (a process may write a second one once ``torch.distributed`` is
initialized); a mark in another domain, of another shape, or with rank -1 never counts.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col

DOMAIN = "nvbridge"
MESSAGE = re.compile(r"rank (-?\d+) (-?\d+) (-?\d+)")
Fields = tuple[int, int, int]  # rank, world size, local rank


def process_ranks(marks: pa.Table) -> dict[int, Fields]:
    """Per process id, the (rank, world size, local rank) its last rank mark recorded."""
    if not marks.num_rows or not {"domain", "name", "process_id", "ts_ns"} <= set(marks.column_names):
        return {}
    domain = marks.column("domain")
    if pa.types.is_dictionary(domain.type):
        domain = domain.cast(pa.string())
    mask = pc.fill_null(
        pc.and_(pc.equal(domain, DOMAIN), pc.starts_with(marks.column("name").cast(pa.string()), "rank ")), False
    )
    mine = marks.filter(mask)
    if not mine.num_rows:
        return {}
    order = np.argsort(np_col(mine, "ts_ns", fill=0), kind="stable")
    names = mine.column("name").cast(pa.string()).to_pylist()
    pids = np_col(mine, "process_id", fill=-1)
    out: dict[int, Fields] = {}
    for i in order.tolist():
        found = MESSAGE.fullmatch(names[i] or "")
        if found is not None and int(found[1]) >= 0:
            out[int(pids[i])] = (int(found[1]), int(found[2]), int(found[3]))
    return out


def rank_facts(marks: pa.Table) -> tuple[int | None, int | None, str | None]:
    """(rank, world size, process ranks) for SourceInfo: ``rank`` where exactly one process
    recorded one; the world size where the marks agree on it; ``process_ranks`` as JSON
    ``{"<pid>": rank}`` where any process recorded its rank."""
    found = process_ranks(marks)
    if not found:
        return None, None, None
    sizes = {f[1] for f in found.values()}
    world = sizes.pop() if len(sizes) == 1 and -1 not in sizes else None
    rank = next(iter(found.values()))[0] if len(found) == 1 else None
    return rank, world, json.dumps({str(p): f[0] for p, f in sorted(found.items())})
