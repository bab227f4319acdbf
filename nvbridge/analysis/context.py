"""What every advise detector needs of a report, as NumPy columns built once.

Lanes: one per (process, GPU) pair that ran GPU work; a lane is that rank's GPU timeline, and
time at stake is wall time on a lane. Steps are ``ProfilerStep#N`` ranges, per process.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.analysis import spans
from nvbridge.columns import np_col, one_chunk
from nvbridge.dataset.ranks import Ranks, ranks_of
from nvbridge.dataset.report import DatasetTables
from nvbridge.dataset.timeline import owning_process
from nvbridge.errors import InputError

# Copy directions as small codes: a finding's group, so a .cuda() and a .cpu() in one op are
# two findings with two fixes.
HTOD, DTOH, DTOD, OTHER_COPY = 1, 2, 3, 4


def codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[str | None]]:
    """Strings as (int codes, distinct values); nulls get the code of None."""
    arr = one_chunk(column)
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr)
    values: list[str | None] = arr.dictionary.to_pylist() + [None]
    idx = np.asarray(arr.indices.fill_null(len(values) - 1).to_numpy(zero_copy_only=False)).astype(np.int64)
    return idx, values


@dataclass(frozen=True)
class Context:
    """A report's columns for the detectors (ops rows are in op_id order: row == op_id)."""

    report: DatasetTables
    t0: int
    op_name: np.ndarray  # code per op row
    op_names: list[str | None]
    module: np.ndarray
    modules: list[str | None]
    op_parent: np.ndarray
    op_start: np.ndarray
    op_end: np.ndarray
    op_thread: np.ndarray
    op_step: np.ndarray  # -1: none
    op_step_range: np.ndarray  # bool: the op is a ProfilerStep#N range
    lane_process: np.ndarray  # per lane
    lane_device: np.ndarray
    gpu_lane: np.ndarray  # per gpu op
    busy: spans.Spans  # union of GPU ops per lane, encoded
    step_lane: np.ndarray  # per lane step window, sorted by encoded start
    step_number: np.ndarray
    step_start: np.ndarray  # encoded
    step_end: np.ndarray

    def enc(self, lane: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Absolute times on lanes -> encoded times."""
        out: np.ndarray = lane.astype(np.int64) * spans.LANE_NS + (t - self.t0)
        return out

    def lane_of(self, process: np.ndarray, device: np.ndarray) -> np.ndarray:
        """Lane index of (process, device) pairs, -1 where no GPU op ran there."""
        key = self.lane_process * (1 << 20) + self.lane_device  # sorted: lanes come from np.unique
        want = process * (1 << 20) + device
        if not len(key):
            return np.full(len(want), -1, np.int64)
        pos = np.clip(np.searchsorted(key, want), 0, len(key) - 1)
        out: np.ndarray = np.where(key[pos] == want, pos, -1).astype(np.int64)
        return out

    @cached_property
    def gpu_kind(self) -> np.ndarray:
        """Each GPU op's kind (kernel, memcpy, memset, ...) as strings."""
        idx, values = codes(self.report.gpu_ops.column("kind"))
        out: np.ndarray = np.asarray(values, dtype=object)[idx]
        return out

    @cached_property
    def nccl(self) -> np.ndarray:
        """GPU ops that are NCCL kernels (communication: the name contains ``nccl``), each
        distinct name matched once."""
        idx, values = codes(self.report.gpu_ops.column("name"))
        named = np.array(["nccl" in (v or "").lower() for v in values], bool)
        out: np.ndarray = (self.gpu_kind == "kernel") & named[idx]
        return out

    @cached_property
    def compute(self) -> np.ndarray:
        """GPU ops that compute: every GPU op but copies and NCCL kernels (kernels, memsets,
        graph launches); what hides other GPU time."""
        out: np.ndarray = (self.gpu_kind != "memcpy") & ~self.nccl
        return out

    @cached_property
    def direction(self) -> np.ndarray:
        """HTOD, DTOH, DTOD or OTHER_COPY per GPU op (0: not a copy)."""
        idx, values = codes(self.report.gpu_ops.column("copy_kind"))
        by_value = np.array([{"HtoD": HTOD, "DtoH": DTOH, "DtoD": DTOD}.get(v or "", OTHER_COPY) for v in values])
        out: np.ndarray = np.where(self.gpu_kind == "memcpy", by_value[idx], 0)
        return out

    def main_lane(self, process: np.ndarray) -> np.ndarray:
        """Per process, its lane that ran the most GPU ops (-1: the process ran none)."""
        ops = np.bincount(self.gpu_lane, minlength=len(self.lane_process))
        out = np.full(len(process), -1, np.int64)
        for k in np.argsort(ops, kind="stable").tolist():  # the busiest lane of a process last: it wins
            out[process == self.lane_process[k]] = k
        return out

    @cached_property
    def ranks(self) -> Ranks:
        """Which rank each process is (nvbridge.dataset.ranks: the rule summary's --rank uses)."""
        return ranks_of(self.report.ops, self.report.gpu_ops, self.report.recorded_ranks)

    def lane_label(self, lane: int) -> str:
        """``rank R GPU d`` for a lane of a report of several ranks, or of one whose rank was
        recorded; ``pid P GPU d`` otherwise."""
        process = int(self.lane_process[lane])
        rank = self.ranks.rank_of(process)
        named = rank is not None and (len(self.ranks.ranks) > 1 or self.report.rank is not None)
        who = f"rank {rank}" if named else f"pid {process}"
        return f"{who} GPU {int(self.lane_device[lane])}"


def _step_ranges(code: np.ndarray, names: list[str | None]) -> tuple[np.ndarray, np.ndarray]:
    """Per op (by its name's code), whether it is a ``ProfilerStep#N`` range and its N (-1: not
    one): matched once per distinct name, not on every row's string (10M ops: 0.2 GB of them)."""
    step_m = pc.extract_regex(pa.array(names, pa.string()), r"^ProfilerStep#(?P<n>\d+)$")
    is_step = np.asarray(pc.is_valid(step_m).to_numpy(zero_copy_only=False))
    step_n = np.asarray(pc.struct_field(step_m, "n").cast(pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False))
    return is_step[code], step_n[code]


def build(report: DatasetTables) -> Context:
    """Columns, lanes, GPU busy time and step windows of one report."""
    ops, gpu = report.ops, report.gpu_ops
    if not np.array_equal(np_col(ops, "op_id"), np.arange(ops.num_rows)):
        ops = ops.sort_by("op_id")
    starts = [np_col(t, "start_ns") for t in (ops, gpu, report.api_calls)]
    t0 = min((int(s.min()) for s in starts if len(s)), default=0)
    op_name, op_names = codes(ops.column("op_name"))
    module, modules = codes(ops.column("module_path"))
    g_dev = np_col(gpu, "device_id", fill=-1)
    g_proc = owning_process(np_col(gpu, "process_id", fill=-1), g_dev)  # the one timeline's lanes
    pairs = np.unique(np.stack([g_proc, g_dev], axis=1), axis=0) if len(g_proc) else np.zeros((0, 2), np.int64)
    lane_process, lane_device = pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
    key = lane_process * (1 << 20) + lane_device
    gpu_lane = np.searchsorted(key, g_proc * (1 << 20) + g_dev).astype(np.int64)
    g_end = np_col(gpu, "end_ns") - t0
    if len(g_end) and int(g_end.max()) >= spans.LANE_NS:
        raise InputError(
            f"{report.meta.get('source')} spans more than 4.9 hours of GPU work, more than advise "
            "reads at once; cut it with `nsys export` time ranges or convert a shorter capture."
        )
    enc = gpu_lane * spans.LANE_NS + (np_col(gpu, "start_ns") - t0), gpu_lane * spans.LANE_NS + g_end
    is_step, step_n = _step_ranges(op_name, op_names)
    op_proc, op_start, op_end = np_col(ops, "process_id"), np_col(ops, "start_ns"), np_col(ops, "end_ns")
    rows = np.flatnonzero(is_step)
    w_lane, w_rows = [], []
    for lane, proc in enumerate(lane_process.tolist()):
        mine = rows[op_proc[rows] == proc]
        w_lane.append(np.full(len(mine), lane, np.int64))
        w_rows.append(mine)
    wl = np.concatenate(w_lane) if w_lane else np.zeros(0, np.int64)
    wr = np.concatenate(w_rows) if w_rows else np.zeros(0, np.int64)
    ws = wl * spans.LANE_NS + (op_start[wr] - t0)
    order = np.argsort(ws, kind="stable")
    return Context(
        report=report,
        t0=t0,
        op_name=op_name,
        op_names=op_names,
        module=module,
        modules=modules,
        op_parent=np_col(ops, "parent_id", fill=-1),
        op_start=op_start,
        op_end=op_end,
        op_thread=np_col(ops, "thread_id"),
        op_step=np_col(ops, "step", fill=-1),
        op_step_range=is_step,
        lane_process=lane_process,
        lane_device=lane_device,
        gpu_lane=gpu_lane,
        busy=spans.union(*enc),
        step_lane=wl[order],
        step_number=step_n[wr][order],
        step_start=ws[order],
        step_end=(wl * spans.LANE_NS + (op_end[wr] - t0))[order],
    )
