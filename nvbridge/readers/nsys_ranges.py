"""Nsight Systems NVTX rows -> ranges, marks, thread names and domain names (messages resolved
through ``StringIds`` where a row holds an id instead of text, rows validated); the raw columns
are :data:`nvbridge.readers.nsys_tables.NVTX`. Shared by the whole-file reader and the streamed
one (:mod:`nvbridge.readers.nsys`, :mod:`nvbridge.readers.nsys_nvtx`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import dense_ids, np_col
from nvbridge.readers._arrow import lookup, resolve_strings
from nvbridge.readers.nsys_tables import (
    NVTX,
    NVTX_DOMAIN_CREATE,
    NVTX_MARK,
    NVTX_PUSH_POP,
    NVTX_THREAD_NAME,
    NVTXT_PUSH_POP,
    TID_BITS,
    process_ids,
)
from nvbridge.readers.validate import names_found, no_nulls, raw_names, times

_NVTX_RAW = raw_names(NVTX)


def _text(ev: pa.Table, strings: pa.Table) -> pa.ChunkedArray:
    """NVTX messages; registered strings (NCCL's, for one) come by id where a row has no inline
    text. Only those rows' ids are looked up (a few percent of a torch capture's rows);
    coalesce is 5x faster than a masked replace of the rows that need it."""
    text = ev.column("text")
    text_id = ev.column("text_id")
    if text_id.null_count == len(text_id):
        return text
    ids = np_col(ev, "text_id", fill=-1)
    # Inline text wins; an id is needed only where there is none.
    need = np.flatnonzero(np.asarray(text.is_null().to_numpy(zero_copy_only=False)) & (ids != -1))
    if not len(need):
        return text
    found = resolve_strings(strings, ids[need])
    names_found("NVTX_EVENTS", "textId", ids[need], found, "StringIds")
    index = np.zeros(len(ids), np.int32)
    index[need] = np.asarray(found.indices.to_numpy(zero_copy_only=False))
    valid = np.zeros(len(ids), bool)
    valid[need] = True
    resolved = pa.DictionaryArray.from_arrays(pa.array(index, mask=~valid), found.dictionary)
    return pc.coalesce(text, resolved.cast(pa.string()))


def nvtx_others(
    ev: pa.Table, strings: pa.Table, known: dict[tuple[int, int], str] | None = None
) -> tuple[pa.Table, pa.Table, dict[tuple[int, int], str]]:
    """Mark, thread-name and domain-creation rows -> (marks, with their ``thread_key``; thread
    names; domain names).

    Domain names come from NvtxDomainCreate rows and are scoped per process (NVIDIA's reports
    join on domainId and the pid bits). Windowed exports may lack them: then the domain is
    reported by id. ``known``: the domains named by earlier rows (a streamed read's earlier
    parts), which name these marks too.
    """
    no_nulls("NVTX_EVENTS", ev, _NVTX_RAW, ["event_type", "global_tid"])
    etype = np_col(ev, "event_type")
    gtid = np_col(ev, "global_tid", fill=0)  # absent in the table: 0
    times("NVTX_EVENTS", ev.filter(pa.array(etype == NVTX_MARK)), _NVTX_RAW, end=None)
    pid = process_ids(gtid)
    domain_id = np_col(ev, "domain_id", fill=0)
    text = _text(ev, strings)
    is_domain = etype == NVTX_DOMAIN_CREATE
    domains = {
        (int(p), int(d)): str(n)
        for p, d, n in zip(pid[is_domain], domain_id[is_domain], text.filter(pa.array(is_domain)).to_pylist())
    }
    is_mark = etype == NVTX_MARK
    msel = pa.array(is_mark)
    marks = pa.table(
        {
            "ts_ns": ev.column("start_ns").filter(msel),
            "name": text.filter(msel),
            "domain": domain_names(pid[is_mark], domain_id[is_mark], {**(known or {}), **domains}),
            "process_id": pa.array(pid[is_mark]),
            "thread_id": pa.array(gtid[is_mark] & TID_BITS),
            # The thread as the ranges key it: nvbridge's memory marks are attributed by it
            # (nvbridge.readers.memory_marks.split_memory drops it from the marks table).
            "thread_key": pa.array(gtid[is_mark]),
        }
    )
    is_tname = etype == NVTX_THREAD_NAME
    thread_names = pa.table(
        {
            "thread_key": pa.array(gtid[is_tname]),
            "thread_name": text.filter(pa.array(is_tname)),
        }
    )
    return marks, thread_names, domains


def normalize_ranges(ev: pa.Table, strings: pa.Table, domains: dict[tuple[int, int], str]) -> pa.Table:
    """Push/pop and start/end range rows -> the normalized ranges table."""
    no_nulls("NVTX_EVENTS", ev, _NVTX_RAW, ["global_tid"])
    times("NVTX_EVENTS", ev, _NVTX_RAW, open_ok=True)
    etype = np_col(ev, "event_type")
    gtid = np_col(ev, "global_tid", fill=0)  # absent in the table: 0
    pid = process_ids(gtid)
    domain_id = np_col(ev, "domain_id", fill=0)
    end_gtid = np_col(ev, "end_global_tid", fill=0)
    crossed = (end_gtid != 0) & (end_gtid != gtid)
    push_pop = (etype == NVTX_PUSH_POP) | (etype == NVTXT_PUSH_POP)
    return pa.table(
        {
            "start_ns": ev.column("start_ns"),
            "end_ns": ev.column("end_ns"),
            "name": _text(ev, strings),
            "domain": domain_names(pid, domain_id, domains),
            "domain_id": pa.array(domain_id),
            "process_id": pa.array(pid),
            "thread_id": pa.array(gtid & TID_BITS),
            "thread_key": pa.array(gtid),
            "end_thread_key": pa.array(end_gtid, mask=~crossed),
            "style": lookup(push_pop.astype(np.int64), {1: "push_pop", 0: "start_end"}),
        }
    )


def domain_names(pid: np.ndarray, domain_id: np.ndarray, names: dict[tuple[int, int], str]) -> pa.Array:
    """Per-row domain name: null for the default domain 0 and for domains whose creation the
    export lacks (windowed captures); ``domain_id`` still tells those apart."""
    out = pa.nulls(len(pid), pa.string())
    if not names or not (domain_id != 0).any():
        return out
    ids, count = dense_ids(pid, domain_id)
    first = np.zeros(count, np.int64)
    first[ids[::-1]] = np.arange(len(ids))[::-1]  # a row of each (pid, domain) pair
    labels = [names.get((int(pid[i]), int(domain_id[i]))) if domain_id[i] else None for i in first]
    # Nulls go in the indices, never in the dictionary: Parquet cannot write a null dictionary
    # entry (the default domain beside a named one made convert fail).
    named = np.array([label is not None for label in labels], bool)
    slot = np.cumsum(named) - 1
    return pa.DictionaryArray.from_arrays(
        pa.array(slot[ids].astype(np.int32), mask=~named[ids]),
        pa.array([label for label in labels if label is not None], pa.string()),
    )
