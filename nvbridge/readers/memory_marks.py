"""nvbridge's own allocator marks -> memory events, parsed as columns.

``emit_nvtx(profile_memory=True)`` records every allocation and free of torch's allocators as an
NVTX mark in the domain named ``nvbridge`` with the message
``mem <device> <address> <bytes> <total_allocated> <total_reserved>`` (decimal integers, ``bytes``
negative for a free; /work/briefs/spec2728.md, docs/memory.md). Those marks are split from the
others here (they never reach the ``marks`` table) and become rows of :data:`MEMORY_EVENTS`, the
readers-engine contract for memory events whatever recorded them: Arrow string kernels, no Python
object per row. A mark of the domain that does not parse (another field count, a field that is not
an integer) stays an ordinary mark rather than being guessed at.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import DICT_STR, np_col

# The domain nvbridge's recorder creates (nvtxDomainCreateA("nvbridge")).
DOMAIN = "nvbridge"
PREFIX = "mem "
FIELDS = 6  # "mem", device, address, bytes, total_allocated, total_reserved

# A memory event as the engine takes it (nvbridge.engine.memory): one row per allocation or free.
# ``thread_key`` as the ranges' (nsys globalTid); ``device_id`` the GPU index, -1 for the CPU.
MEMORY_EVENTS = pa.schema(
    [
        ("ts_ns", pa.int64()),
        ("process_id", pa.int64()),
        ("thread_id", pa.int64()),
        ("thread_key", pa.int64()),
        ("device", DICT_STR),
        ("device_id", pa.int64()),
        ("address", pa.int64()),
        ("bytes", pa.int64()),
        ("total_allocated", pa.int64()),
        ("total_reserved", pa.int64()),
        ("source", DICT_STR),
    ]
)


def no_events() -> pa.Table:
    return MEMORY_EVENTS.empty_table()


def split_memory(marks: pa.Table) -> tuple[pa.Table, pa.Table]:
    """``marks`` (the readers' marks columns, optionally with ``thread_key``) -> (the other marks,
    without ``thread_key``; the memory events, MEMORY_EVENTS, in the marks' order).

    A mark is a memory event when its domain is ``nvbridge`` and its message parses as the
    spec's ``mem`` line. Without ``thread_key`` (nvprof's markers) the key is nvprof's own,
    ``pid << 32 | tid``."""
    plain = marks.drop_columns(["thread_key"]) if "thread_key" in marks.column_names else marks
    if not marks.num_rows:
        return plain, no_events()
    domain = marks.column("domain").cast(pa.string())
    name = marks.column("name").cast(pa.string())
    candidate = pc.and_(pc.equal(domain, DOMAIN), pc.starts_with(name, PREFIX)).fill_null(False)
    if not pc.any(candidate).as_py():
        return plain, no_events()
    rows = np.flatnonzero(np.asarray(candidate.to_numpy(zero_copy_only=False)))
    parts = pc.split_pattern(name.take(pa.array(rows)), " ")
    fields = [pc.list_element(parts, i) for i in range(1, FIELDS)] if rows.size else []
    whole = pc.equal(pc.list_value_length(parts), FIELDS).fill_null(False)
    ints = [_integer(f) for f in fields[1:]]  # address, bytes, total_allocated, total_reserved
    ok = np.asarray(whole.to_numpy(zero_copy_only=False)).astype(bool)
    for _, valid in ints:
        ok &= valid
    events = rows[ok]
    keep = np.ones(marks.num_rows, bool)
    keep[events] = False
    others = plain if keep.all() else plain.filter(pa.array(keep))
    take = pa.array(np.flatnonzero(ok))
    device = fields[0].take(take).cast(pa.string())
    if "thread_key" in marks.column_names:
        key = np_col(marks, "thread_key")[events]
    else:
        key = (np_col(marks, "process_id", fill=0)[events] << 32) | np_col(marks, "thread_id", fill=0)[events]
    table = pa.table(
        {
            "ts_ns": pa.array(np_col(marks, "ts_ns")[events]),
            "process_id": pa.array(np_col(marks, "process_id", fill=0)[events]),
            "thread_id": pa.array(np_col(marks, "thread_id", fill=0)[events]),
            "thread_key": pa.array(key),
            "device": device.dictionary_encode(),
            "device_id": pa.array(device_index(device)),
            "address": pa.array(ints[0][0][ok]),
            "bytes": pa.array(ints[1][0][ok]),
            "total_allocated": pa.array(ints[2][0][ok]),
            "total_reserved": pa.array(ints[3][0][ok]),
            "source": pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(len(events), np.int32)), pa.array([DOMAIN], pa.string())
            ),
        }
    )
    return others, table.cast(MEMORY_EVENTS)


def _integer(text: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Decimal text -> (int64 values, which parsed). An address is an unsigned 64-bit pointer:
    read as uint64 and kept bit for bit in int64 (user-space pointers are below 2^63)."""
    text = pc.fill_null(text, "")
    signed = pc.match_substring_regex(text, r"^-?[0-9]{1,19}$")
    unsigned = pc.match_substring_regex(text, r"^[0-9]{1,20}$")
    valid = np.asarray(pc.or_(signed, unsigned).to_numpy(zero_copy_only=False)).astype(bool)
    out = np.zeros(len(valid), np.int64)
    if not valid.any():
        return out, valid
    neg = np.asarray(pc.starts_with(text, "-").to_numpy(zero_copy_only=False)).astype(bool) & valid
    digits = pc.if_else(pa.array(valid), text, "0")
    magnitude = pc.cast(pc.utf8_ltrim(digits, "-"), pa.decimal128(20, 0))
    too_big = np.asarray(pc.greater(magnitude, pa.scalar(2**64 - 1, pa.decimal128(20, 0))).to_numpy(False))
    valid &= ~too_big.astype(bool)
    as_u64 = np.asarray(pc.cast(pc.if_else(pa.array(valid), magnitude, 0), pa.uint64()).to_numpy(False))
    out = as_u64.view(np.int64).copy()
    out[neg] = -out[neg]
    # A negative number past int64, or a signed field written as a huge unsigned: not ours.
    valid &= ~(neg & (as_u64 > np.uint64(2**63)))
    return out, valid


def device_index(device: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """torch Device strings -> the GPU index: ``cuda:N`` -> N, ``cuda`` -> 0, anything else -1."""
    text = pc.fill_null(device.cast(pa.string()), "")
    is_cuda = np.asarray(pc.starts_with(text, "cuda").to_numpy(zero_copy_only=False)).astype(bool)
    index = pc.replace_substring_regex(text, r"^cuda:?", "")
    numeric = np.asarray(pc.match_substring_regex(index, r"^[0-9]{1,9}$").to_numpy(zero_copy_only=False)).astype(bool)
    out = np.full(len(is_cuda), -1, np.int64)
    if (is_cuda & numeric).any():
        value = pc.cast(pc.if_else(pa.array(is_cuda & numeric), index, "0"), pa.int64())
        out = np.where(is_cuda & numeric, np.asarray(value.to_numpy(zero_copy_only=False)), -1)
    out[is_cuda & np.asarray(pc.equal(text, "cuda").to_numpy(zero_copy_only=False)).astype(bool)] = 0
    return out


class MemoryQueue:
    """Memory events read ahead of the windows, handed on a window at a time: each window takes
    those before its cut (:meth:`take`), in time order. Events that come after a cut already made
    and are older than it (an export out of time order) set :attr:`out_of_order`: the reader then
    reads again by start (a Restart), as for ranges."""

    def __init__(self) -> None:
        self._held: list[pa.Table] = []
        self._last_cut: int | None = None
        self.out_of_order = False
        self.seen = 0

    def put(self, events: pa.Table) -> None:
        if not events.num_rows:
            return
        self.seen += events.num_rows
        if self._last_cut is not None and int(np_col(events, "ts_ns").min()) < self._last_cut:
            self.out_of_order = True
        self._held.append(events)

    def take(self, cut: int | None) -> pa.Table | None:
        """The events before ``cut`` (None: all) not taken before; None: none."""
        self._last_cut = cut
        if not self._held:
            return None
        held = pa.concat_tables(self._held).combine_chunks() if len(self._held) > 1 else self._held[0]
        ts = np_col(held, "ts_ns")
        if len(ts) > 1 and (np.diff(ts) < 0).any():
            order = np.argsort(ts, kind="stable")  # ties keep the export's order
            held, ts = held.take(pa.array(order)), ts[order]
        stop = len(ts) if cut is None else int(np.searchsorted(ts, cut, "left"))
        self._held = [held.slice(stop)] if stop < len(ts) else []
        return held.slice(0, stop) if stop else None
