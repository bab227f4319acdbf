"""Forward -> backward links: the forward ops a backward node may link to, across windows.

:class:`ForwardIndex` remembers the forward ops of earlier windows (nvbridge.engine.semantics hands it
one window at a time) and links each backward node by torch.profiler's rule; see
nvbridge.engine.semantics for the rule and where the link is exact or decided from evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from nvbridge.columns import dense_ids, np_col, one_chunk
from nvbridge.compiled import native
from nvbridge.engine import names

if TYPE_CHECKING:
    from nvbridge._native import Store

__all__ = ["SEQ_BITS", "ForwardIndex", "Links", "take_or_null"]

# A forward op is keyed by (process, thread or "any", seq) packed into one int64: a dense
# group number above SEQ_BITS bits of seq (torch's per-thread counter never gets near 2**40;
# a larger seq still links, checked against the stored seq).
SEQ_BITS = 40
_SEQ_MASK = (1 << SEQ_BITS) - 1
# A forward candidate's looked-up values: op_id, then pool ids of module path, input shapes and
# op name; more columns to carry to backward rows go after these (input dtypes).
_NAME_ROW = 3
_VALUES = 5  # the values a store keeps per forward op: op_id and the four pool ids
# Forward ops older than this many NVTX rows leave the index (a backward node comes in the same
# training step as its forward op; a step of a quarter million ranges is rare). A backward node that
# misses an op in its thread's evicted span of seqs is noticed (:attr:`ForwardIndex.late`), and
# the conversion is retried with a longer horizon: a link is never lost. Bounds the index at a real capture's size:
# every forward op of a torch 2 run has its own seq.
FORWARD_HORIZON_ROWS = 1 << 18


def take_or_null(values: pa.Array | pa.ChunkedArray, index: np.ndarray) -> pa.Array:
    """``values[index]`` where index >= 0, else null."""
    return one_chunk(values).take(pa.array(np.maximum(index, 0), mask=index < 0))


@dataclass(frozen=True, slots=True)
class Links:
    """Per row: the linked forward op (-1 none), the pool ids (:meth:`ForwardIndex.strings`; -1
    none) of its module path, input shapes and dtypes, and the link the row's own seq gave
    (evaluate-function wrappers take their node's instead); and the pool id of the dtypes the
    row's op computed in where a child op of its own name says so (autocast's re-dispatch,
    nvbridge.engine.semantics; -1 none). NumPy only: rows carried between windows and re-taken cost no
    string copies."""

    op_id: np.ndarray
    module: np.ndarray
    shapes: np.ndarray
    own: np.ndarray
    dtypes: np.ndarray
    inner_dtypes: np.ndarray

    def take(self, rows: np.ndarray) -> Links:
        return Links(*(getattr(self, f)[rows] for f in Links.__slots__))

    @staticmethod
    def concat(parts: list[Links]) -> Links:
        return Links(*(np.concatenate([getattr(p, f) for p in parts]) for f in Links.__slots__))


class ForwardIndex:
    """Forward ops of earlier windows that a backward node may link to: the latest per key, for
    ``horizon`` NVTX rows (module paths and shapes interned). :attr:`late` turns true once a
    backward node may link to a forward op older than the horizon (its links are then unsure).
    """

    def __init__(self, horizon: int = FORWARD_HORIZON_ROWS) -> None:
        self._horizon = horizon
        self.late = False
        self._evict_every = max(1, horizon // 4)  # each eviction scans the store once
        self._rows = 0  # NVTX rows linked so far: the stamp of this window's forward ops
        self._evicted_at = 0
        self._groups: dict[tuple[int, int], int] = {}
        self._strings: dict[str, int] = {}
        self._values: list[str] = []
        self._pool = pa.array([], pa.string())  # _values as Arrow, rebuilt only when it grows
        # Earlier windows' forward ops, all of them and the top-most ones of each seq.
        self._store = {top: native.Store(SEQ_BITS) if native is not None else SortedStore() for top in (True, False)}

    def _keys(self, pid: np.ndarray, thread: np.ndarray, seq: np.ndarray) -> np.ndarray:
        ids, count = dense_ids(pid, thread)
        first = np.zeros(count, np.int64)
        first[ids[::-1]] = np.arange(len(ids))[::-1]
        groups = np.array(
            [self._groups.setdefault((int(pid[i]), int(thread[i])), len(self._groups)) for i in first], np.int64
        )
        keys: np.ndarray = (groups[ids] << SEQ_BITS) | (seq & _SEQ_MASK)
        return keys

    def _intern(self, values: pa.Array) -> np.ndarray:
        """Pool ids of strings (-1 for null)."""
        enc = one_chunk(values)
        enc = enc if pa.types.is_dictionary(enc.type) else enc.dictionary_encode()
        ids = []
        for v in enc.dictionary.to_pylist():
            i = self._strings.get(v)
            if i is None:
                i = self._strings[v] = len(self._values)
                self._values.append(v)
            ids.append(i)
        pool = np.array(ids + [-1], np.int64)
        idx = np.asarray(enc.indices.fill_null(len(enc.dictionary)).to_numpy(zero_copy_only=False), np.int64)
        return pool[idx]

    def intern(self, values: pa.Array) -> np.ndarray:
        """Pool ids of strings (-1 for null), for values a row carries between windows."""
        return self._intern(values)

    def strings(self, ids: np.ndarray) -> pa.Array:
        """The pooled strings of ``ids`` (null for -1)."""
        if len(self._pool) != len(self._values):
            self._pool = pa.array(self._values, pa.string())
        return take_or_null(self._pool, ids)

    def link(
        self,
        pid: np.ndarray,
        tid: np.ndarray,
        start: np.ndarray,
        op_id: np.ndarray,
        parsed: pa.Table,
        seq: np.ndarray,
        top: np.ndarray,
        module: pa.Array,
        new_from: int,
    ) -> Links:
        """Links for rows ``new_from:`` (rows before it are carried, already linked), then remember
        this window's forward ops. ``seq`` is parsed's seq column (-1 for none); ``module`` is
        each row's inherited module path; ``top``: the op is not nested in one with its seq."""
        n = len(pid)
        is_bwd = np.asarray(parsed.column("is_backward").to_numpy(zero_copy_only=False))
        fwd_tid = np_col(parsed, "fwd_tid", fill=-1)
        is_new = np.arange(n) >= new_from
        cand = np.flatnonzero((seq >= 0) & ~is_bwd & is_new)
        query = np.flatnonzero((seq >= 0) & is_bwd & is_new)
        op_names = one_chunk(parsed.column("op_name"))
        c_keys = self._keys(pid[cand], tid[cand], seq[cand])
        c_vals = (
            op_id[cand],
            self._intern(module.take(pa.array(cand))),
            self._intern(one_chunk(parsed.column("input_shapes")).take(pa.array(cand))),
            self._intern(op_names.take(pa.array(cand))),
            self._intern(one_chunk(parsed.column("input_dtypes")).take(pa.array(cand))),
        )
        window = _Window(c_keys, start[cand], seq[cand], c_vals, self._store[False])
        is_top = top[cand]
        top_window = _Window(
            c_keys[is_top], start[cand][is_top], seq[cand][is_top], tuple(v[is_top] for v in c_vals), self._store[True]
        )
        found = np.full((len(c_vals), n), -1, np.int64)  # c_vals' columns of the linked op
        exact = query[fwd_tid[query] >= 0]
        if len(exact):  # the forward thread is named: torch's own rule on that thread
            found[:, exact] = window.latest(
                self._keys(pid[exact], fwd_tid[exact], seq[exact]), start[exact], seq[exact]
            )
        guess = query[fwd_tid[query] < 0]
        if len(guess):
            found[:, guess] = self._decide(guess, pid, tid, start, seq, op_names, (window, top_window))
        self.late |= window.late or top_window.late
        self._rows += n - new_from
        if len(cand):
            # Rows come in start order: a key's last row in this window is its latest op.
            values = np.stack(c_vals)
            self._store[False].put(c_keys, seq[cand], values, self._rows)
            self._store[True].put(
                c_keys[is_top], seq[cand][is_top], np.ascontiguousarray(values[:, is_top]), self._rows
            )
        if self._rows - self._evicted_at >= self._evict_every:
            for store in self._store.values():
                store.evict(self._rows - self._horizon)
            self._evicted_at = self._rows
        return Links(found[0], found[1], found[2], found[0], found[4], np.full(n, -1, np.int64))

    def _decide(
        self,
        q: np.ndarray,
        pid: np.ndarray,
        tid: np.ndarray,
        start: np.ndarray,
        seq: np.ndarray,
        op_names: pa.Array,
        windows: tuple[_Window, _Window],
    ) -> np.ndarray:
        """Backward nodes that do not name their forward thread (torch's own names): on each thread
        of the process, the latest op with their seq (torch's rule) or else the top-most op of
        that seq (torch 1.x nests ops sharing a seq: ``contiguous`` holds ``empty``), kept only if
        its name fits the node (AddmmBackward0 <-> addmm). One fitting thread links; several link
        only if one of them is the node's own thread; otherwise the link stays empty."""
        width = len(windows[0].vals)
        groups = [(g, p, t) for (p, t), g in self._groups.items()]
        if not groups:
            return np.full((width, len(q)), -1, np.int64)
        per_thread = np.full((len(groups), width, len(q)), -1, np.int64)
        node_ids = self._intern(op_names.take(pa.array(q)))
        for row, (g, p, _) in enumerate(groups):
            at = np.flatnonzero(pid[q] == p)
            if not len(at):
                continue
            keys = (np.int64(g) << SEQ_BITS) | (seq[q[at]] & _SEQ_MASK)
            for window in windows[::-1]:  # the latest op wins over the top-most one
                hit = window.latest(keys, start[q[at]], seq[q[at]])
                ok = self._fits(node_ids[at], hit[_NAME_ROW]) & (hit[0] >= 0)
                per_thread[row][:, at[ok]] = hit[:, ok]
        fits = per_thread[:, 0, :] >= 0
        own = np.array([[t for _, _, t in groups]], np.int64).T == tid[q][None, :]
        count = fits.sum(0)
        choice = np.where(count == 1, fits.argmax(0), np.where((fits & own).any(0), (fits & own).argmax(0), -1))
        out = np.full((width, len(q)), -1, np.int64)
        ok = np.flatnonzero(choice >= 0)
        out[:, ok] = per_thread[choice[ok], :, ok].T
        return out

    def _fits(self, node_ids: np.ndarray, fwd_ids: np.ndarray) -> np.ndarray:
        """names.fits for each (node, forward op) pair, evaluated once per distinct pair."""
        if not len(node_ids):
            return np.zeros(0, bool)
        pairs = np.stack([node_ids, fwd_ids], 1)
        distinct, inverse = np.unique(pairs, axis=0, return_inverse=True)
        ok = np.array([f >= 0 and names.fits(self._values[b], self._values[f]) for b, f in distinct.tolist()], bool)
        result: np.ndarray = ok[inverse.ravel()].reshape(fwd_ids.shape)
        return result


class SortedStore:
    """nvbridge._native.Store in NumPy (where it was not built): the latest entry per key, as
    sorted arrays merged once per window."""

    def __init__(self) -> None:
        self._keys = np.zeros(0, np.int64)
        self._seq = np.zeros(0, np.int64)
        self._stamp = np.zeros(0, np.int64)
        self._values = np.zeros((_VALUES, 0), np.int64)
        self._spans: dict[int, tuple[int, int]] = {}  # group -> (least, greatest) seq evicted

    def __len__(self) -> int:
        return len(self._keys)

    def put(self, keys: np.ndarray, seq: np.ndarray, values: np.ndarray, stamp: int = 0) -> None:
        """Rows in time order: each replaces its key's entry."""
        # Older entries first: a stable sort keeps a key's newest entry last.
        all_keys = np.concatenate([self._keys, keys])
        order = np.argsort(all_keys, kind="stable")
        k = all_keys[order]
        last = np.ones(len(k), bool)
        last[:-1] = k[1:] != k[:-1]
        keep = order[last]
        self._keys = k[last]
        self._seq = np.concatenate([self._seq, seq])[keep]
        self._stamp = np.concatenate([self._stamp, np.full(len(keys), stamp, np.int64)])[keep]
        self._values = np.concatenate([self._values, values], axis=1)[:, keep]

    def evict(self, before: int) -> int:
        """Drop the entries put with a stamp below ``before``; remember each group's span of seqs."""
        gone = self._stamp < before
        if not gone.any():
            return 0
        for g, s in zip((self._keys[gone] >> SEQ_BITS).tolist(), self._seq[gone].tolist()):
            lo, hi = self._spans.get(g, (s, s))
            self._spans[g] = (min(lo, s), max(hi, s))
        keep = ~gone
        self._keys, self._seq, self._stamp = self._keys[keep], self._seq[keep], self._stamp[keep]
        self._values = self._values[:, keep]
        return int(gone.sum())

    def evicted(self, keys: np.ndarray, seq: np.ndarray) -> np.ndarray:
        """1 where the key's group dropped seqs spanning this one."""
        spans = [self._spans.get(int(g), (1, 0)) for g in (keys >> SEQ_BITS).tolist()]
        return np.array([lo <= s <= hi for (lo, hi), s in zip(spans, seq.tolist())], np.uint8)

    def get(self, keys: np.ndarray, seq: np.ndarray) -> np.ndarray:
        """[5][m]: the entries whose key and seq match, -1 elsewhere."""
        out = np.full((_VALUES, len(keys)), -1, np.int64)
        if len(self._keys) and len(keys):
            pos = np.minimum(np.searchsorted(self._keys, keys), len(self._keys) - 1)
            ok = (self._keys[pos] == keys) & (self._seq[pos] == seq)
            out[:, ok] = self._values[:, pos[ok]]
        return out


class _Window:
    """Forward candidates of this window (by key and start) over the store of earlier ones."""

    def __init__(
        self,
        keys: np.ndarray,
        start: np.ndarray,
        seq: np.ndarray,
        vals: tuple[np.ndarray, ...],
        store: SortedStore | Store,
    ) -> None:
        self.keys, self.start, self.seq, self.vals, self.store = keys, start, seq, vals, store
        self.late = False  # a query's forward op may have left the store

    def latest(self, q_keys: np.ndarray, q_start: np.ndarray, q_seq: np.ndarray) -> np.ndarray:
        """(op_id, module, shapes, name) of the latest candidate with each key that started by
        the query's start (this window first, then earlier windows); -1 where none."""
        out = np.full((len(self.vals), len(q_keys)), -1, np.int64)
        miss = np.arange(len(q_keys))
        if len(self.keys):
            # One sort key per (key, start): a dense key number above the start's offset.
            gid, ngroups = dense_ids(np.concatenate([self.keys, q_keys]))
            g_c, g_q = gid[: len(self.keys)], gid[len(self.keys) :]
            lo = int(min(self.start.min(), q_start.min()))
            span = int(max(self.start.max(), q_start.max())) - lo + 1
            if ngroups * span >= 2**62:
                raise OverflowError("time span too wide to key forward candidates")
            composite = g_c * span + (self.start - lo)
            order = np.argsort(composite, kind="stable")
            pos = np.searchsorted(composite[order], g_q * span + (q_start - lo), "right") - 1
            hit = order[np.maximum(pos, 0)]
            ok = (pos >= 0) & (g_c[hit] == g_q) & (self.seq[hit] == q_seq)
            for i, col in enumerate(self.vals):
                out[i, ok] = col[hit[ok]]
            miss = np.flatnonzero(~ok)
        if len(miss):
            keys, seqs = np.ascontiguousarray(q_keys[miss]), np.ascontiguousarray(q_seq[miss])
            if len(self.store):
                out[:, miss] = np.frombuffer(self.store.get(keys, seqs), np.int64).reshape(_VALUES, len(miss))
            unfound = out[0, miss] < 0
            if unfound.any() and np.frombuffer(self.store.evicted(keys[unfound], seqs[unfound]), np.uint8).any():
                self.late = True
        return out
