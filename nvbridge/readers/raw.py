"""The normalized profile both readers produce and the correlation engine consumes.

Every table is Arrow with integer nanosecond times; nvprof and Nsight Systems look alike
from here on. Keys:

- ``thread_key`` is unique across processes (nsys ``globalTid``; nvprof ``pid << 32 | tid``).
- ``process_key`` scopes correlation ids (nsys ``globalPid``; nvprof the process id, or 0 on
  GPU rows, which nvprof records without a process).

Columns (see the readers for how each is read):

- ranges: start_ns, end_ns (null = never closed), name, domain, domain_id, process_id, thread_id,
  thread_key, end_thread_key (null unless the range ended on another thread), style
- marks: ts_ns, name, domain, process_id, thread_id
- api_calls: start_ns, end_ns, name, kind (runtime/driver), process_id, thread_id, thread_key,
  process_key, correlation_id, return_value
- gpu_ops: start_ns, end_ns, kind (kernel/memcpy/memset/graph), name, short_name, device_id,
  context_id, stream_id, process_key, correlation_id, bytes, copy_kind, grid_x..z, block_x..z,
  registers_per_thread, static_shared_bytes, dynamic_shared_bytes, graph_node_id
- syncs: start_ns, end_ns, sync_type, device_id, stream_id, process_key, correlation_id
- threads: process_id, thread_id, thread_key, thread_name, process_name
- devices: DEVICES_SCHEMA (device_id, name, memory_gbps, sm_count, sm_clock_mhz, compute_capability,
  chip: the facts the driver reports, null where not recorded)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, Protocol

import pyarrow as pa

from nvbridge.columns import DICT_STR

# One row per device id: the facts peaks are derived from (nvbridge.gpu.peaks), in these units.
DEVICES_SCHEMA = pa.schema(
    [
        ("device_id", pa.int64()),
        ("name", pa.string()),
        ("memory_gbps", pa.float64()),  # the memory bandwidth the driver reports
        ("sm_count", pa.int64()),
        ("sm_clock_mhz", pa.float64()),  # the maximum SM clock the driver reports (cudaDeviceProp.clockRate)
        ("compute_capability", pa.string()),  # "8.9"
        ("chip", pa.string()),  # "AD103" (nsys only)
    ]
)
# The normalized ranges columns the engine takes (the readers may add more).
RANGES_SCHEMA = pa.schema(
    [
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("name", pa.string()),
        ("domain", DICT_STR),
        ("domain_id", pa.int64()),
        ("process_id", pa.int64()),
        ("thread_id", pa.int64()),
        ("thread_key", pa.int64()),
        ("end_thread_key", pa.int64()),
        ("style", DICT_STR),
    ]
)

# The normalized gpu_ops columns every reader produces.
GPU_OPS_SCHEMA = pa.schema(
    [
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("kind", DICT_STR),
        ("name", DICT_STR),
        ("short_name", DICT_STR),
        ("mangled_name", DICT_STR),
        ("device_id", pa.int64()),
        ("context_id", pa.int64()),
        ("stream_id", pa.int64()),
        ("process_key", pa.int64()),
        ("correlation_id", pa.int64()),
        ("bytes", pa.int64()),
        ("copy_kind", DICT_STR),
        ("src_kind", DICT_STR),
        ("dst_kind", DICT_STR),
        ("grid_x", pa.int64()),
        ("grid_y", pa.int64()),
        ("grid_z", pa.int64()),
        ("block_x", pa.int64()),
        ("block_y", pa.int64()),
        ("block_z", pa.int64()),
        ("registers_per_thread", pa.int64()),
        ("static_shared_bytes", pa.int64()),
        ("dynamic_shared_bytes", pa.int64()),
        ("graph_node_id", pa.int64()),
    ]
)

SourceKind = Literal["nsys", "nvprof"]
TimeBase = Literal["session", "epoch"]


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """What a reader detected about its input; recorded in the dataset's ``meta``."""

    source: str
    kind: SourceKind
    producer: str
    producer_version: str | None = None
    schema_version: str | None = None
    # nsys times count from the session start unless exported with --ts-normalize;
    # nvprof times are Unix-epoch nanoseconds.
    time_base: TimeBase = "session"
    session_start_utc_ns: int | None = None
    capture_end_ns: int | None = None
    # torchrun's RANK: from the capture's recorded environment (only that variable is read)
    # or from the file name (``rank3``, ``rank_3``, ``%q{RANK}`` patterns such as ``..._3``).
    rank: int | None = None
    # From emit_nvtx's rank marks (nvbridge.readers.nsys_rank_marks): the world size they agree
    # on, and for every process that recorded one, its rank as JSON ``{"<pid>": rank}`` (a
    # capture of several processes: one nsys session over torchrun or mp.spawn).
    world_size: int | None = None
    process_ranks: str | None = None
    # The profiler's own warnings and errors (nsys DIAGNOSTIC_EVENT, severity Warning or Error),
    # one per line, e.g. "No CUDA events collected. Does the process use CUDA?": what to show when
    # a capture holds nothing.
    diagnostics: str | None = None

    def describe(self) -> str:
        """One human phrase, e.g. ``Nsight Systems 2026.2.1.210 (export schema 3.25.0)``."""
        text = self.producer
        if self.producer_version:
            text += f" {self.producer_version}"
        if self.schema_version:
            text += f" (export schema {self.schema_version})"
        return text


@dataclass(frozen=True, slots=True)
class RawProfile:
    """A profile database normalized into Arrow tables (see the module docstring)."""

    info: SourceInfo
    ranges: pa.Table
    marks: pa.Table
    api_calls: pa.Table
    gpu_ops: pa.Table
    syncs: pa.Table
    threads: pa.Table
    devices: pa.Table
    rows_read: int = field(default=0)
    # nvbridge's allocator events (nvbridge.readers.memory_marks.MEMORY_EVENTS) in time order;
    # None: not split from ``marks`` yet (the window source does it).
    memory: pa.Table | None = None


def capture_end(info: SourceInfo, hi: int) -> int:
    """Where ranges never closed are clamped: the capture's end, or the latest time seen
    (``hi``: range starts, API call starts and ends), whichever is later."""
    return max(info.capture_end_ns if info.capture_end_ns is not None else hi, hi)


@dataclass(frozen=True, slots=True)
class Window:
    """One step of a conversion, complete: what a reader hands the engine.

    ``ranges``: every range that starts before ``cut`` and was in no earlier window (RANGES_SCHEMA
    columns; a later window's ranges all start at or after ``cut``). ``api_calls``: every API call
    starting before ``cut`` not in an earlier window, with its ``api_call_id`` (its place in the
    export's order). ``gpu_ops``: the GPU ops read since the last window (GPU_OPS_SCHEMA plus
    ``table_index`` and ``rowid``, which order equal starts), at least every one starting before
    the window's horizon, past ``cut`` and its calls' ends (a GPU op starts after its launch).
    ``cut`` None: the last window. ``rows_read``: the rows the reader had read by then.
    ``memory``: the allocator events (nvbridge.readers.memory_marks.MEMORY_EVENTS) at times before
    ``cut`` not in an earlier window, in time order (None: none).
    """

    ranges: pa.Table
    api_calls: pa.Table
    gpu_ops: pa.Table
    cut: int | None
    rows_read: int = 0
    memory: pa.Table | None = None


@dataclass(frozen=True, slots=True)
class Restart:
    """A report the windows chosen cannot carry: read it again another way (nvbridge.conversion
    decides how). ``horizon``: something came later than a horizon allows (a GPU op after its
    launch's window, a backward node after its forward op left the forward index), which longer
    horizons may carry; else an order the windows assumed does not hold (read by start)."""

    reason: str
    horizon: bool = False
    # nvbridge's allocator marks came after the rows the probe read (NvtxParts.has_memory), so
    # the ops' memory columns went out null: read again the same way, expecting them.
    marks: bool = False


@dataclass(frozen=True, slots=True)
class Tail:
    """What a reader knows once its last window is out: the marks, every thread (named) and the
    devices the report names."""

    marks: pa.Table
    threads: pa.Table
    devices: pa.Table


@dataclass(frozen=True, slots=True)
class TraceFacts:
    """What a trace written while converting needs before the rows: the devices the report names
    and those GPU ops ran on, per device the processes that used it (and, only when none did, the
    processes with ranges or CUDA calls), and the earliest start of any row."""

    devices: pa.Table
    gpu_devices: list[int]
    gpu_users: dict[int, set[int]]
    host_processes: list[int]
    first_ns: int | None


class WindowSource(Protocol):
    """A report read as windows (nvbridge.readers.open_windows): what it is, its syncs (whole: a
    few per step), where never-closed ranges end and whether it has memory events, then its
    windows, then its tail."""

    info: SourceInfo
    syncs: pa.Table
    capture_end_ns: int
    # Whether the report holds memory events at all (the ops' memory columns are null if not),
    # known before the first window.
    has_memory: bool

    def windows(self) -> Iterator[Window | Restart]: ...

    def tail(self) -> Tail: ...

    def trace_facts(self) -> TraceFacts | None:
        """Once the first window is out; None: known only from the rows (one window)."""
        ...
