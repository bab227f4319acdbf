"""PyTorch meaning on the op tree: parsed names, module paths, forward -> backward links.

Pure and columnar, like the correlation engine it follows, and windowed like it: the engine
hands over one window of ops at a time (the ranges still open from earlier windows first),
and :class:`ForwardIndex` remembers the forward ops of earlier windows.

Forward -> backward (docs/architecture.md): a backward node carrying sequence number N is linked to the
forward op with seq N on the forward thread that started last before the node, as torch.profiler
links them (AddmmBackward0 -> aten::addmm, not the aten::linear holding it). Where nvbridge's
emit_nvtx recorded the forward thread (``fwd_tid``), that thread is used and the link is exact.
Otherwise (torch's own names) seq numbers of different threads collide, so a link is made only
where the evidence decides (:meth:`ForwardIndex._decide`: names that fit, the node's own thread)
and is left empty where it does not. Backward nodes inherit the forward op's input shapes,
dtypes and module path.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import np_col, one_chunk
from nvbridge.engine import names
from nvbridge.engine.costs import flops
from nvbridge.engine.forward_links import FORWARD_HORIZON_ROWS, ForwardIndex, Links, take_or_null

__all__ = ["FORWARD_HORIZON_ROWS", "ForwardIndex", "Links", "annotate"]


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


def annotate(
    parent: np.ndarray,
    depth: np.ndarray,
    pid: np.ndarray,
    tid: np.ndarray,
    start: np.ndarray,
    op_id: np.ndarray,
    parsed: pa.Table,
    index: ForwardIndex,
    carried: Links | None = None,
    kernel_dtype: pa.Array | None = None,
) -> tuple[dict[str, pa.Array | pa.ChunkedArray], pa.Table, Links]:
    """The PyTorch columns of one window of ops (see docs/dataset.md).

    Args:
        parent, depth: the window's tree (parent as a row index in the window, -1 none).
        pid, tid, start, op_id: per row.
        parsed: ``names.parse`` of the names; for the first ``len(carried)`` rows, ranges carried
            from earlier windows, the state this function returned for them then.
        index: forward ops of earlier windows; this window's are added.
        carried: the links of the carried rows.
        kernel_dtype: per row, the compute dtype its kernels' names carry (nvbridge.engine.costs.kernel_dtypes;
            null: none), which its cost takes where no dtype was recorded.

    Returns:
        (columns to append to the ops, the parsed state to carry for still-open rows, links).
    """
    n = len(parent)
    k = 0 if carried is None else len(carried.op_id)
    seq = np_col(parsed, "seq", fill=-1)
    module = _module_paths(parent, depth, parsed)

    parent_seq = np.where(parent >= 0, seq[np.maximum(parent, 0)], -1)
    parent_tid = np.where(parent >= 0, tid[np.maximum(parent, 0)], -1)
    top = ~((parent_seq == seq) & (parent_tid == tid))
    parsed, is_eval = _mark_evaluated(parent, seq, parsed)
    links = index.link(pid, tid, start, op_id, parsed, seq, top, module, k)
    if carried is not None and k:
        links = Links.concat([carried, links.take(np.arange(k, n))])
    links = _wrapper_links(parent, is_eval, links)
    links = _redispatched(parent, parsed, links, index)
    return _columns(parent, depth, parsed, module, links, index, is_eval, kernel_dtype)


def _module_paths(parent: np.ndarray, depth: np.ndarray, parsed: pa.Table) -> pa.Array:
    """Module path from the op or its ancestors (before backward rows take their forward op's)."""
    n = len(parent)
    module_col = one_chunk(parsed.column("module"))
    if module_col.null_count < n:
        module_own = np.where(np.asarray(module_col.is_valid().to_numpy(zero_copy_only=False)), np.arange(n), -1)
        module = take_or_null(module_col, _inherit_down_np(parent, depth, module_own))
    else:
        module = module_col
    return module


def _mark_evaluated(parent: np.ndarray, seq: np.ndarray, parsed: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """``parsed`` with nodes run by torch's engine marked backward, and which rows are
    evaluate-function wrappers."""
    # A node torch's engine runs sits in its evaluate_function range, whatever its class name
    # (torch::autograd::CopySlices): backward, so never a forward candidate.
    is_eval = np.asarray(pc.starts_with(parsed.column("op_name"), names.EVALUATE).to_numpy(zero_copy_only=False))
    in_eval = (parent >= 0) & is_eval[np.maximum(parent, 0)] & (seq >= 0)
    if in_eval.any():
        at = parsed.schema.get_field_index("is_backward")
        is_bwd = np.asarray(parsed.column(at).to_numpy(zero_copy_only=False)) | in_eval
        parsed = parsed.set_column(at, "is_backward", pa.array(is_bwd))
    return parsed, is_eval


def _wrapper_links(parent: np.ndarray, is_eval: np.ndarray, links: Links) -> Links:
    """Evaluate-function wrappers carry no seq: they take their node's link (the last node
    child with one; a carried wrapper keeps its earlier node's unless a new one arrives)."""
    n = len(parent)
    if is_eval.any():
        child = np.full(n, -1, np.int64)
        has = (parent >= 0) & (links.own >= 0)
        child[parent[has]] = np.flatnonzero(has)
        take = is_eval & (links.own < 0) & (child >= 0)
        if take.any():
            src = np.where(take, child, np.arange(n))
            links = Links(
                links.op_id[src], links.module[src], links.shapes[src], links.own, links.dtypes[src], links.inner_dtypes
            )
    return links


def _redispatched(parent: np.ndarray, parsed: pa.Table, links: Links, index: ForwardIndex) -> Links:
    """Ops that call themselves again on the same shapes with other dtypes compute in the inner
    call's dtypes: autocast's ``aten::linear`` (float32 arguments) holds the casts and an
    ``aten::linear`` on bfloat16 tensors, which is what ran. The outer op keeps its recorded
    ``input_dtypes``; its cost takes the inner call's (``Links.inner_dtypes``, carried with the
    row while it stays open, so a child in an earlier window still counts)."""
    child = np.flatnonzero(parent >= 0)
    if not len(child):
        return links
    dtypes = one_chunk(parsed.column("input_dtypes"))
    if dtypes.null_count == len(dtypes):
        return links
    up, down = pa.array(parent[child]), pa.array(child)
    names_col, shapes = one_chunk(parsed.column("op_name")), one_chunk(parsed.column("input_shapes"))
    same = pc.and_(pc.equal(names_col.take(down), names_col.take(up)), pc.equal(shapes.take(down), shapes.take(up)))
    inner = dtypes.take(down)
    other = pc.or_kleene(pc.is_null(dtypes.take(up)), pc.not_equal(inner, dtypes.take(up)))
    found = np.asarray(
        pc.fill_null(pc.and_(pc.and_(same, pc.is_valid(inner)), other), False).to_numpy(zero_copy_only=False)
    )
    if not found.any():
        return links
    ids = links.inner_dtypes.copy()
    ids[parent[child[found]]] = index.intern(inner.filter(pa.array(found)))
    return Links(links.op_id, links.module, links.shapes, links.own, links.dtypes, ids)


def _inherit(
    own: pa.Array, linked: np.ndarray, pooled: np.ndarray, index: ForwardIndex, replace: bool = False
) -> pa.Array:
    """``own``, where a linked (backward) row has none (``replace``: any linked row) taking its
    forward op's value: the pooled strings of ``pooled`` (-1 none)."""
    if not (linked & (pooled >= 0)).any():
        return own
    take = pa.array(linked) if replace else pc.and_(pa.array(linked), pc.is_null(own))
    return pc.if_else(take, index.strings(pooled), own)


def _cost_shapes(parsed: pa.Table, own: pa.Array, shapes: pa.Array, is_eval: np.ndarray) -> pa.Array:
    """The shapes a row is costed by: a backward node costs its forward op's shapes (twice a
    matmul's, ...) only where it records no sizes of its own. Where it does (torch's and
    nvbridge's names with record_shapes: its outputs' gradients), the ops inside it record
    theirs, and their cost is exact (a first layer's node runs no input gradient); evaluate-
    function wrappers, which exist only in those names, never cost their node's forward."""
    is_bwd = np.asarray(parsed.column("is_backward").to_numpy(zero_copy_only=False), bool)
    has_own = np.asarray(own.is_valid().to_numpy(zero_copy_only=False), bool)
    unpriced = is_eval | (is_bwd & has_own)
    if not unpriced.any():
        return shapes
    return pc.if_else(pa.array(unpriced), pa.scalar(None, pa.string()), shapes)


def _columns(
    parent: np.ndarray,
    depth: np.ndarray,
    parsed: pa.Table,
    module: pa.Array,
    links: Links,
    index: ForwardIndex,
    is_eval: np.ndarray,
    kernel_dtype: pa.Array | None,
) -> tuple[dict[str, pa.Array | pa.ChunkedArray], pa.Table, Links]:
    """The window's PyTorch columns, with backward rows filled from their forward op, and the
    state to carry; see annotate."""
    n = len(parent)
    link = links.op_id
    linked = link >= 0
    module_path = _inherit(module, linked, links.module, index)
    own_shapes = one_chunk(parsed.column("input_shapes"))
    shapes = _inherit(own_shapes, linked, links.shapes, index)

    stack = one_chunk(parsed.column("stack"))
    if stack.null_count < n:
        stack = pa.array(_inherit_down(parent, depth, stack.to_pylist()), pa.list_(pa.string()))
    step = one_chunk(parsed.column("step"))
    if step.null_count < n:
        step_own = np.where(np.asarray(step.is_valid().to_numpy(zero_copy_only=False)), np.arange(n), -1)
        step = take_or_null(step, _inherit_down_np(parent, depth, step_own))

    cols: dict[str, pa.Array | pa.ChunkedArray] = {
        name: parsed.column(name)
        for name in ("op_name", "seq", "torch_op_id", "input_op_ids", "fwd_tid", "is_backward")
    }
    cols["input_shapes"] = shapes
    dtypes = _inherit(one_chunk(parsed.column("input_dtypes")), linked, links.dtypes, index)
    cols["input_dtypes"] = dtypes
    cols["input_values"] = parsed.column("input_values")
    inner = links.inner_dtypes >= 0  # autocast's outer calls compute in their inner call's dtypes
    cols.update(
        flops.cost_columns(
            one_chunk(parsed.column("op_name")),
            _cost_shapes(parsed, own_shapes, shapes, is_eval),
            _inherit(dtypes, inner, links.inner_dtypes, index, replace=True),
            one_chunk(cols["input_values"]),
            kernel_dtype,
        )
    )
    cols["module_path"] = module_path
    cols["fwd_op_id"] = pa.array(link, mask=link < 0)
    cols["step"] = step
    cols["stack"] = stack
    # What a row still open at the window's end carries: values inherited so far count as its own.
    state = parsed.set_column(parsed.schema.get_field_index("module"), "module", module)
    state = state.set_column(state.schema.get_field_index("step"), "step", step)
    state = state.set_column(state.schema.get_field_index("stack"), "stack", stack)
    return cols, state, links
