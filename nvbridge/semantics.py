"""PyTorch meaning on the op tree: parsed names, module paths, forward -> backward links.

Pure and columnar, like the correlation engine it follows.

Forward -> backward (DESIGN.md): a backward node carrying sequence number N is linked to the
forward op with seq N on the forward thread: the top-most op with that seq (not one nested in
another op of the same seq) that started last before the backward node. Where nvbridge's own
emit_nvtx recorded the forward thread (``fwd_tid``), the match uses it and is exact; otherwise
the candidates are every thread of the process. Backward nodes inherit the forward op's input
shapes and module path.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge import names
from nvbridge.readers._arrow import dense_ids, np_col


def _inherit_down(parent: np.ndarray, depth: np.ndarray, own: list[object | None]) -> list[object | None]:
    """Each op's nearest value of ``own`` on itself or its ancestors (one pass per depth)."""
    out = list(own)
    order = np.argsort(depth, kind="stable")
    for i in order[depth[order] > 0]:
        if out[i] is None:
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


def forward_links(ops: pa.Table, parsed: pa.Table) -> np.ndarray:
    """fwd_op_id for every row (-1 where none): see the module docstring."""
    n = ops.num_rows
    link = np.full(n, -1, np.int64)
    seq = np_col(parsed, "seq", fill=-1)
    is_bwd = np.asarray(parsed.column("is_backward").to_numpy(zero_copy_only=False))
    parent = np_col(ops, "parent_id", fill=-1)
    pid, tid = np_col(ops, "process_id"), np_col(ops, "thread_id", fill=-1)
    start = np_col(ops, "start_ns")
    fwd_tid = np_col(parsed, "fwd_tid", fill=-1)
    parent_seq = np.where(parent >= 0, seq[np.maximum(parent, 0)], -1)
    parent_tid = np.where(parent >= 0, tid[np.maximum(parent, 0)], -1)
    top = ~((parent_seq == seq) & (parent_tid == tid))
    cand = np.flatnonzero((seq >= 0) & ~is_bwd & top)
    query = np.flatnonzero((seq >= 0) & is_bwd)
    if not len(cand) or not len(query):
        return link
    lo = int(start.min())
    span = int(start.max()) - lo + 1
    for exact in (True, False):
        q = query[(fwd_tid[query] >= 0) == exact]
        if not len(q):
            continue
        thread_c = tid[cand] if exact else np.zeros(len(cand), np.int64)
        thread_q = fwd_tid[q] if exact else np.zeros(len(q), np.int64)
        gid, ngroups = dense_ids(np.concatenate([pid[cand], pid[q]]),
                                   np.concatenate([thread_c, thread_q]),
                                   np.concatenate([seq[cand], seq[q]]))
        if ngroups * span >= 2**62:
            raise OverflowError("time span too wide to key forward candidates")
        g_c, g_q = gid[: len(cand)], gid[len(cand):]
        keys = g_c * span + (start[cand] - lo)
        order = np.argsort(keys, kind="stable")
        pos = np.searchsorted(keys[order], g_q * span + (start[q] - lo), "right") - 1
        hit = order[np.maximum(pos, 0)]
        ok = (pos >= 0) & (g_c[hit] == g_q)
        link[q[ok]] = cand[hit[ok]]
    return link


def annotate(ops: pa.Table, parsed: pa.Table | None = None) -> pa.Table:
    """Append the PyTorch columns to ``ops`` (see docs/dataset.md).

    ``parsed`` is ``names.parse(ops["name"])`` when the caller already has it.
    """
    if parsed is None:
        parsed = names.parse(ops.column("name"))
    parent = np_col(ops, "parent_id", fill=-1)
    depth = np_col(ops, "depth")
    link = forward_links(ops, parsed)

    # Evaluate-function wrappers carry no seq: they take their node's link.
    is_eval = np.asarray(pc.starts_with(parsed.column("op_name"), names.EVALUATE).to_numpy(zero_copy_only=False))
    if is_eval.any():
        child_link = np.full(len(link), -1, np.int64)
        has = (parent >= 0) & (link >= 0)
        child_link[parent[has]] = link[has]
        link = np.where(is_eval & (link < 0), child_link, link)

    fwd = link >= 0
    module_col = parsed.column("module")
    if module_col.null_count < len(module_col):
        module_own = np.where(np.asarray(module_col.is_valid().to_numpy(zero_copy_only=False)),
                              np.arange(ops.num_rows), -1)
        module_src = _inherit_down_np(parent, depth, module_own)
        # Backward rows (and what runs inside them) take the forward op's module.
        module_src = np.where(fwd & (module_src < 0), module_src[np.maximum(link, 0)], module_src)
        module_path = pc.if_else(pa.array(module_src >= 0), module_col.take(pa.array(np.maximum(module_src, 0))),
                                 pa.scalar(None, pa.string()))
    else:
        module_path = module_col
    shapes = parsed.column("input_shapes")
    if fwd.any() and shapes.null_count < len(shapes):
        shapes = pc.if_else(pc.and_(pa.array(fwd), pc.is_null(shapes)), shapes.take(pa.array(np.maximum(link, 0))),
                            shapes)

    stack = parsed.column("stack")
    if stack.null_count < len(stack):
        inherited = _inherit_down(parent, depth, stack.to_pylist())
        stack = pa.array(inherited, pa.list_(pa.string()))
    step = parsed.column("step")
    if step.null_count < len(step):
        step_own = np.where(np.asarray(step.is_valid().to_numpy(zero_copy_only=False)), np.arange(ops.num_rows), -1)
        step_src = _inherit_down_np(parent, depth, step_own)
        step = pc.if_else(pa.array(step_src >= 0), step.take(pa.array(np.maximum(step_src, 0))),
                          pa.scalar(None, pa.int64()))

    out = ops
    for name in ("op_name", "seq", "torch_op_id", "input_op_ids", "fwd_tid", "is_backward"):
        out = out.append_column(name, parsed.column(name))
    out = out.append_column("input_shapes", shapes)
    out = out.append_column("module_path", module_path)
    out = out.append_column("fwd_op_id", pa.array(link, mask=link < 0))
    out = out.append_column("step", step)
    return out.append_column("stack", stack)
