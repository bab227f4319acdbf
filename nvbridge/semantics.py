"""PyTorch meaning on the op tree: parsed names, module paths, forward -> backward links.

Pure and columnar, like the correlation engine it follows, and windowed like it: the engine
hands over one window of ops at a time (the ranges still open from earlier windows first),
and :class:`ForwardIndex` remembers the forward ops of earlier windows.

Forward -> backward (DESIGN.md): a backward node carrying sequence number N is linked to the
forward op with seq N on the forward thread: the top-most op with that seq (not one nested in
another op of the same seq) that started last before the backward node. Where nvbridge's own
emit_nvtx recorded the forward thread (``fwd_tid``), the match uses it and is exact; otherwise
the candidates are every thread of the process. Backward nodes inherit the forward op's input
shapes, dtypes and module path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge import flops, names
from nvbridge.columns import dense_ids, np_col, one_chunk

# A forward op is keyed by (process, thread or "any", seq) packed into one int64: a dense
# group number above SEQ_BITS bits of seq (torch's per-thread counter never gets near 2**40;
# a larger seq still links, checked against the stored seq).
SEQ_BITS = 40
_SEQ_MASK = (1 << SEQ_BITS) - 1
_ANY_THREAD = -1


def _inherit_down(parent: np.ndarray, depth: np.ndarray, own: list[object | None]) -> list[object | None]:
    """Each op's nearest value of ``own`` on itself or its ancestors (one pass per depth)."""
    out = list(own)
    order = np.argsort(depth, kind="stable")
    for i in order[depth[order] > 0]:
        if out[i] is None and parent[i] >= 0:
            out[i] = out[parent[i]]
    return out


def _inherit_down_np(parent: np.ndarray, depth: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Vectorized _inherit_down for an index column (-1 = none)."""
    out: np.ndarray = own.copy()
    for d in range(1, int(depth.max(initial=0)) + 1):
        at = np.flatnonzero((depth == d) & (out < 0))
        p = parent[at]
        ok = p >= 0
        out[at[ok]] = out[p[ok]]
    return out


def _take_or_null(values: pa.Array | pa.ChunkedArray, index: np.ndarray) -> pa.Array:
    """``values[index]`` where index >= 0, else null."""
    return one_chunk(values).take(pa.array(np.maximum(index, 0), mask=index < 0))


@dataclass(frozen=True, slots=True)
class Links:
    """Per row: the linked forward op (-1 none), its module path, input shapes and dtypes, and
    the link the row's own seq gave (evaluate-function wrappers take their node's instead)."""

    op_id: np.ndarray
    module: pa.Array
    shapes: pa.Array
    own: np.ndarray
    dtypes: pa.Array

    def take(self, rows: np.ndarray) -> Links:
        idx = pa.array(rows)
        return Links(self.op_id[rows], self.module.take(idx), self.shapes.take(idx), self.own[rows],
                     self.dtypes.take(idx))

    @staticmethod
    def concat(parts: list[Links]) -> Links:
        return Links(np.concatenate([p.op_id for p in parts]),
                     pa.concat_arrays([p.module for p in parts]),
                     pa.concat_arrays([p.shapes for p in parts]),
                     np.concatenate([p.own for p in parts]),
                     pa.concat_arrays([p.dtypes for p in parts]))


class ForwardIndex:
    """Forward ops of earlier windows that a backward node may link to: the latest per key.

    Kept as sorted NumPy arrays (merged once per window, a linear merge of two sorted runs),
    with module paths and shapes interned: memory grows with distinct keys, not with ops.
    """

    def __init__(self) -> None:
        self._groups: dict[tuple[int, int], int] = {}
        self._strings: dict[str, int] = {}
        self._values: list[str] = []
        self._pool = pa.array([], pa.string())  # _values as Arrow, rebuilt only when it grows
        self._store: dict[bool, tuple[np.ndarray, ...]] = {}

    def _keys(self, pid: np.ndarray, thread: np.ndarray, seq: np.ndarray) -> np.ndarray:
        ids, count = dense_ids(pid, thread)
        first = np.zeros(count, np.int64)
        first[ids[::-1]] = np.arange(len(ids))[::-1]
        groups = np.array([self._groups.setdefault((int(pid[i]), int(thread[i])), len(self._groups))
                           for i in first], np.int64)
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

    def _pooled(self, ids: np.ndarray) -> pa.Array:
        if len(self._pool) != len(self._values):
            self._pool = pa.array(self._values, pa.string())
        return _take_or_null(self._pool, ids)

    def link(self, pid: np.ndarray, tid: np.ndarray, start: np.ndarray, op_id: np.ndarray,
             parsed: pa.Table, seq: np.ndarray, top: np.ndarray, module: pa.Array, new_from: int) -> Links:
        """Links for rows ``new_from:`` (rows before it are carried, already linked), then remember
        this window's forward ops. ``seq`` is parsed's seq column (-1 for none); ``module`` is
        each row's inherited module path."""
        n = len(pid)
        is_bwd = np.asarray(parsed.column("is_backward").to_numpy(zero_copy_only=False))
        fwd_tid = np_col(parsed, "fwd_tid", fill=-1)
        is_new = np.arange(n) >= new_from
        cand = np.flatnonzero((seq >= 0) & ~is_bwd & top & is_new)
        query = np.flatnonzero((seq >= 0) & is_bwd & is_new)
        link = np.full(n, -1, np.int64)
        mod_id = np.full(n, -1, np.int64)
        shp_id = np.full(n, -1, np.int64)
        dtp_id = np.full(n, -1, np.int64)
        if len(cand):
            cand_mod = self._intern(module.take(pa.array(cand)))
            cand_shp = self._intern(one_chunk(parsed.column("input_shapes")).take(pa.array(cand)))
            cand_dtp = self._intern(one_chunk(parsed.column("input_dtypes")).take(pa.array(cand)))
        lo = int(start.min()) if n else 0
        span = int(start.max()) - lo + 1 if n else 1
        for exact in (True, False):
            c_keys = self._keys(pid[cand], tid[cand] if exact else np.full(len(cand), _ANY_THREAD), seq[cand])
            q = query[(fwd_tid[query] >= 0) == exact]
            if len(q):
                q_keys = self._keys(pid[q], fwd_tid[q] if exact else np.full(len(q), _ANY_THREAD), seq[q])
                found = np.full(len(q), -1, np.int64)
                if len(cand):
                    # This window: the latest candidate with the key that started by the node's start.
                    gid, ngroups = dense_ids(np.concatenate([c_keys, q_keys]))
                    if ngroups * span >= 2**62:
                        raise OverflowError("time span too wide to key forward candidates")
                    g_c, g_q = gid[: len(cand)], gid[len(cand):]
                    keys = g_c * span + (start[cand] - lo)
                    order = np.argsort(keys, kind="stable")
                    pos = np.searchsorted(keys[order], g_q * span + (start[q] - lo), "right") - 1
                    hit = order[np.maximum(pos, 0)]
                    ok = (pos >= 0) & (g_c[hit] == g_q) & (seq[cand[hit]] == seq[q])
                    found[ok] = hit[ok]
                    link[q[ok]] = op_id[cand[hit[ok]]]
                    mod_id[q[ok]], shp_id[q[ok]] = cand_mod[hit[ok]], cand_shp[hit[ok]]
                    dtp_id[q[ok]] = cand_dtp[hit[ok]]
                # Earlier windows: every stored op started before this window.
                miss = np.flatnonzero(found < 0)
                if len(miss) and exact in self._store:
                    s_keys, s_seq, s_op, s_mod, s_shp, s_dtp = self._store[exact]
                    pos = np.minimum(np.searchsorted(s_keys, q_keys[miss]), max(len(s_keys) - 1, 0))
                    ok = (s_keys[pos] == q_keys[miss]) & (s_seq[pos] == seq[q[miss]])
                    rows, pos = q[miss[ok]], pos[ok]
                    link[rows], mod_id[rows], shp_id[rows] = s_op[pos], s_mod[pos], s_shp[pos]
                    dtp_id[rows] = s_dtp[pos]
            if len(cand):
                self._remember(exact, c_keys, seq[cand], start[cand], op_id[cand], cand_mod, cand_shp, cand_dtp)
        return Links(link, self._pooled(mod_id), self._pooled(shp_id), link, self._pooled(dtp_id))

    def _remember(self, exact: bool, keys: np.ndarray, seq: np.ndarray, start: np.ndarray, op_id: np.ndarray,
                  mod: np.ndarray, shp: np.ndarray, dtp: np.ndarray) -> None:
        """Merge this window's candidates into the store, keeping the latest per key."""
        order = np.lexsort((start, keys))
        last = np.ones(len(order), bool)
        last[:-1] = keys[order][1:] != keys[order][:-1]
        new = [a[order][last] for a in (keys, seq, op_id, mod, shp, dtp)]
        if exact in self._store:
            # Older entries first: a stable sort keeps a key's newest entry last.
            merged = [np.concatenate([old, add]) for old, add in zip(self._store[exact], new)]
            order = np.argsort(merged[0], kind="stable")
            k = merged[0][order]
            last = np.ones(len(k), bool)
            last[:-1] = k[1:] != k[:-1]
            new = [a[order][last] for a in merged]
        self._store[exact] = tuple(new)


def annotate(parent: np.ndarray, depth: np.ndarray, pid: np.ndarray, tid: np.ndarray, start: np.ndarray,
             op_id: np.ndarray, parsed: pa.Table, index: ForwardIndex, carried: Links | None = None,
             ) -> tuple[dict[str, pa.Array | pa.ChunkedArray], pa.Table, Links]:
    """The PyTorch columns of one window of ops (see docs/dataset.md).

    Args:
        parent, depth: the window's tree (parent as a row index in the window, -1 none).
        pid, tid, start, op_id: per row.
        parsed: ``names.parse`` of the names; for the first ``len(carried)`` rows, ranges carried
            from earlier windows, the state this function returned for them then.
        index: forward ops of earlier windows; this window's are added.
        carried: the links of the carried rows.

    Returns:
        (columns to append to the ops, the parsed state to carry for still-open rows, links).
    """
    n = len(parent)
    k = 0 if carried is None else len(carried.op_id)
    seq = np_col(parsed, "seq", fill=-1)
    parent_seq = np.where(parent >= 0, seq[np.maximum(parent, 0)], -1)
    parent_tid = np.where(parent >= 0, tid[np.maximum(parent, 0)], -1)
    top = ~((parent_seq == seq) & (parent_tid == tid))

    # Module path from the op or its ancestors (before backward rows take their forward op's).
    module_col = one_chunk(parsed.column("module"))
    if module_col.null_count < n:
        module_own = np.where(np.asarray(module_col.is_valid().to_numpy(zero_copy_only=False)), np.arange(n), -1)
        module = _take_or_null(module_col, _inherit_down_np(parent, depth, module_own))
    else:
        module = module_col

    links = index.link(pid, tid, start, op_id, parsed, seq, top, module, k)
    if carried is not None and k:
        links = Links.concat([carried, links.take(np.arange(k, n))])

    # Evaluate-function wrappers carry no seq: they take their node's link (the last node
    # child with one; a carried wrapper keeps its earlier node's unless a new one arrives).
    op_name = parsed.column("op_name")
    is_eval = np.asarray(pc.starts_with(op_name, names.EVALUATE).to_numpy(zero_copy_only=False))
    link = links.op_id
    if is_eval.any():
        child = np.full(n, -1, np.int64)
        has = (parent >= 0) & (links.own >= 0)
        child[parent[has]] = np.flatnonzero(has)
        take = is_eval & (links.own < 0) & (child >= 0)
        if take.any():
            src = np.where(take, child, np.arange(n))
            links = Links(links.op_id[src], links.module.take(pa.array(src)), links.shapes.take(pa.array(src)),
                          links.own, links.dtypes.take(pa.array(src)))
            link = links.op_id

    fwd = pa.array(link >= 0)
    module_path = pc.if_else(pc.and_(fwd, pc.is_null(module)), links.module, module)
    shapes = one_chunk(parsed.column("input_shapes"))
    if shapes.null_count < n or links.shapes.null_count < n:
        shapes = pc.if_else(pc.and_(fwd, pc.is_null(shapes)), links.shapes, shapes)

    stack = one_chunk(parsed.column("stack"))
    if stack.null_count < n:
        stack = pa.array(_inherit_down(parent, depth, stack.to_pylist()), pa.list_(pa.string()))
    step = one_chunk(parsed.column("step"))
    if step.null_count < n:
        step_own = np.where(np.asarray(step.is_valid().to_numpy(zero_copy_only=False)), np.arange(n), -1)
        step = _take_or_null(step, _inherit_down_np(parent, depth, step_own))

    cols: dict[str, pa.Array | pa.ChunkedArray] = {
        name: parsed.column(name) for name in ("op_name", "seq", "torch_op_id", "input_op_ids", "fwd_tid",
                                               "is_backward")}
    cols["input_shapes"] = shapes
    dtypes = one_chunk(parsed.column("input_dtypes"))
    if dtypes.null_count < n or links.dtypes.null_count < n:
        dtypes = pc.if_else(pc.and_(fwd, pc.is_null(dtypes)), links.dtypes, dtypes)
    cols["input_dtypes"] = dtypes
    cols["input_values"] = parsed.column("input_values")
    cols.update(flops.cost_columns(one_chunk(op_name), one_chunk(shapes), one_chunk(dtypes),
                                   one_chunk(cols["input_values"])))
    cols["module_path"] = module_path
    cols["fwd_op_id"] = pa.array(link, mask=link < 0)
    cols["step"] = step
    cols["stack"] = stack
    # What a row still open at the window's end carries: values inherited so far count as its own.
    state = parsed.set_column(parsed.schema.get_field_index("module"), "module", module)
    state = state.set_column(state.schema.get_field_index("step"), "step", step)
    state = state.set_column(state.schema.get_field_index("stack"), "stack", stack)
    return cols, state, links
