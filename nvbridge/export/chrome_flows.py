"""What a streamed Chrome trace keeps to draw its flows, in compact NumPy arrays.

``ac2g`` (API call -> GPU op) needs the launching call's thread and start when its GPU op is
written: per API call id, a thread code (int32) and a start (int64), 12 bytes a call. A GPU op
whose call has not arrived yet waits in a small pending list. ``fwdbwd`` (forward op -> backward
node) is drawn at the end, from the id, thread code and start of every kept op that can be a
forward op (it carries a sequence number: backward nodes are matched to it by that number) and
of every backward node.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col
from nvbridge.export.chrome_text import flow_lines

UNSEEN, NOT_KEPT = -2, -1  # API call codes besides a thread code >= 0
Arrays = tuple[np.ndarray, ...]


def _no_lines() -> pa.Array:
    return pa.array([], pa.string())  # built when needed: a pyarrow call at import would load pandas


class ThreadCodes:
    """Dense int32 codes for (process id, thread id) pairs; the pairs are the host tracks."""

    def __init__(self) -> None:
        self._index: dict[tuple[int, int], int] = {}
        self._pid: list[int] = []
        self._tid: list[int] = []

    def codes(self, pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
        if not len(pid):
            return np.zeros(0, np.int32)
        pairs: list[tuple[int, int]]
        if ((pid >= 0) & (pid < 1 << 31) & (tid >= 0) & (tid < 1 << 32)).all():
            uniq, inverse = np.unique((pid << 32) | tid, return_inverse=True)
            pairs = list(zip((uniq >> 32).tolist(), (uniq & 0xFFFFFFFF).tolist()))
        else:  # ids outside the packable range (synthetic input): pair them the slow way
            both, inverse = np.unique(np.stack([pid, tid], 1), axis=0, return_inverse=True)
            pairs = [(int(p), int(t)) for p, t in both.tolist()]
        table = np.array([self._code(p, t) for p, t in pairs], np.int32)
        return table[inverse.ravel()]

    def _code(self, pid: int, tid: int) -> int:
        code = self._index.get((pid, tid))
        if code is None:
            code = self._index[(pid, tid)] = len(self._pid)
            self._pid.append(pid)
            self._tid.append(tid)
        return code

    def pid_tid(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.array(self._pid, np.int64)[codes], np.array(self._tid, np.int64)[codes]

    def pairs(self) -> set[tuple[int, int]]:
        return set(self._index)


class FlowState:
    """The flows' memory: API calls by id, pending GPU ops, forward ops and backward nodes."""

    def __init__(self, threads: ThreadCodes) -> None:
        self.threads = threads
        self.gpu_rows = 0  # GPU op rows fed, kept or not: fwdbwd ids count from them
        self.counts = {"ac2g": 0, "fwdbwd": 0}
        self._api_code = np.zeros(0, np.int32)
        self._api_start = np.zeros(0, np.int64)
        self._pending: list[Arrays] = []
        self._fwd: list[Arrays] = []
        self._bwd: list[Arrays] = []

    def seen_api_calls(self, ids: np.ndarray) -> None:
        """Every API call id fed (kept or not): a GPU op launched by one not kept gets no flow."""
        if not len(ids):
            return
        need = int(ids.max()) + 1
        if need > len(self._api_code):
            size = max(need, 2 * len(self._api_code))
            self._api_code = np.concatenate([self._api_code, np.full(size - len(self._api_code), UNSEEN, np.int32)])
            self._api_start = np.concatenate([self._api_start, np.zeros(size - len(self._api_start), np.int64)])
        self._api_code[ids] = NOT_KEPT

    def add_api_calls(self, ids: np.ndarray, codes: np.ndarray, start: np.ndarray) -> None:
        self._api_code[ids] = codes
        self._api_start[ids] = start

    def ac2g(self, gpu: pa.Table, tid: np.ndarray, origin: int) -> pa.Array:
        """Flows to these kept GPU ops (drawn on tracks ``tid``) from their kept launching calls."""
        return self._ac2g(
            (
                np_col(gpu, "gpu_op_id"),
                np_col(gpu, "api_call_id", fill=-1),
                np_col(gpu, "device_id", fill=0),
                tid,
                np_col(gpu, "start_ns"),
            ),
            origin,
            hold=True,
        )

    def ac2g_pending(self, origin: int, final: bool) -> pa.Array:
        """Flows to GPU ops that arrived before their API call; at the end, drop what never came."""
        if not self._pending:
            return _no_lines()
        parts, self._pending = self._pending, []
        return self._ac2g(tuple(np.concatenate(c) for c in zip(*parts)), origin, hold=not final)

    def _ac2g(self, gpu: Arrays, origin: int, hold: bool) -> pa.Array:
        ids, api_of, dev, tid, start = gpu
        inside = (api_of >= 0) & (api_of < len(self._api_code))
        code = np.full(len(ids), NOT_KEPT, np.int32)
        code[inside] = self._api_code[api_of[inside]]
        unseen = (api_of >= len(self._api_code)) | (code == UNSEEN)
        if hold and unseen.any():
            self._pending.append(tuple(a[unseen] for a in gpu))
        ok = code >= 0
        if not ok.any():
            return _no_lines()
        self.counts["ac2g"] += int(ok.sum())
        pid, api_tid = self.threads.pid_tid(code[ok])
        return flow_lines(
            "ac2g",
            ids[ok] + 1,
            pid,
            api_tid,
            self._api_start[api_of[ok]] - origin,
            dev[ok],
            tid[ok],
            start[ok] - origin,
        )

    def add_ops(self, ops: pa.Table, codes: np.ndarray) -> None:
        """Kept ops; ``codes``: thread code, -1 for a range drawn on an extra track (known at the end)."""
        op_id, start = np_col(ops, "op_id"), np_col(ops, "start_ns")
        forward = np.asarray(pc.is_valid(ops.column("seq")).to_numpy(zero_copy_only=False))
        if forward.any():
            self._fwd.append((op_id[forward], codes[forward], start[forward]))
        fwd = np_col(ops, "fwd_op_id", fill=-1)
        backward = fwd >= 0
        if backward.any():
            self._bwd.append((op_id[backward], fwd[backward], codes[backward], start[backward]))

    def fwdbwd(self, origin: int, gpu_rows: int | None, unnested: Arrays) -> pa.Array:
        """Flows from each kept forward op to its kept backward nodes, in backward op_id order.

        Args:
            gpu_rows: rows of the whole gpu_ops table (default: the rows fed).
            unnested: (op_id sorted, pid, tid) of the ranges drawn on extra tracks.
        """
        if not self._bwd or not self._fwd:
            return _no_lines()
        f_id, f_code, f_start = (np.concatenate(c) for c in zip(*self._fwd))
        b_id, b_fwd, b_code, b_start = (np.concatenate(c) for c in zip(*self._bwd))
        order = np.argsort(f_id, kind="stable")
        f_id, f_code, f_start = f_id[order], f_code[order], f_start[order]
        pos = np.minimum(np.searchsorted(f_id, b_fwd), len(f_id) - 1)
        found = f_id[pos] == b_fwd
        order = np.argsort(b_id[found], kind="stable")
        pos = pos[found][order]
        b_id, b_code, b_start = b_id[found][order], b_code[found][order], b_start[found][order]
        self.counts["fwdbwd"] = len(b_id)
        pid_s, tid_s = self._where(f_code[pos], f_id[pos], unnested)
        pid_f, tid_f = self._where(b_code, b_id, unnested)
        first = self.gpu_rows if gpu_rows is None else gpu_rows
        return flow_lines(
            "fwdbwd", first + 1 + b_id, pid_s, tid_s, f_start[pos] - origin, pid_f, tid_f, b_start - origin
        )

    def _where(self, codes: np.ndarray, op_id: np.ndarray, unnested: Arrays) -> tuple[np.ndarray, np.ndarray]:
        """(pid, tid) of each op's track: its thread, or the extra track it was drawn on."""
        pid, tid = np.zeros(len(codes), np.int64), np.zeros(len(codes), np.int64)
        known = codes >= 0
        pid[known], tid[known] = self.threads.pid_tid(codes[known])
        if not known.all():
            u_id, u_pid, u_tid = unnested
            at = np.searchsorted(u_id, op_id[~known])
            pid[~known], tid[~known] = u_pid[at], u_tid[at]
        return pid, tid
