"""Backward node ranges: a pre-hook on each autograd node, installed per backward call.

Why hooks and not a dispatch mode: a backward node is not an op; torch's engine calls its
``apply`` and the aten ops it runs nest inside. ``Node.register_prehook`` runs on the thread
executing the node, immediately before apply. Hooks are registered by walking the graph from the
roots when ``backward()``/``autograd.grad`` is called, and removed when it returns, so nothing
lingers on the graph.

One hook per node, not two: registering a hook and having the engine call it are the expensive
parts (about 2 us each on a 2-CPU machine, more than the NVTX calls), so a node's range is closed
by the next thing that happens on the backward call's own thread instead of by a post-hook: the
next node's pre-hook (which pops, then pushes its own), the graph task's first final callback
(queued by the first pre-hook, so it runs before callbacks such as DDP's), or the backward call
returning or raising. On that thread nodes never nest, so the ranges are the same sequence; each
one ends when the engine moves on rather than when apply returns, so it also covers the node's
post-hooks and the engine summing gradients that flow into the same input (torch's own
``autograd::engine::evaluate_function`` range covers those too). Nodes that run on other threads
(CUDA device threads) or in a nested graph task (reentrant backward inside a node) get an exact
post-hook, registered from their pre-hook.

Forward thread ids: ``tag_root_outputs`` marks the output nodes of each root module call with
the thread that ran it (one metadata write per call). While no thread but the one calling
``backward()`` ever marked nodes, every node's ``fwd_tid`` is that thread and nothing is read;
otherwise the marks are resolved here, as the walk of the node graph from each marked output in
the order the calls returned (see :func:`_forward_tids`).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable
from threading import get_ident
from typing import Any

import torch

from nvbridge.annotate._names import dtypes_text, sizes_text

__all__ = ["run_backward_with_ranges", "tag_root_outputs"]

ROOT_KEY = "nvbridge.root_call"  # node.metadata key: (call order, first seq, native tid)

_NO_SEQ = (1 << 64) - 1  # AccumulateGrad & co. carry UINT64_MAX: torch prints no seq for them

_graph_task_id: Callable[[], int] = torch._C._current_graph_task_id
_current_node: Callable[[], Any] = torch._C._current_autograd_node
_queue_callback: Callable[[Callable[[], None]], None] = torch.autograd.Variable._execution_engine.queue_callback
_root_calls = itertools.count()
# Native ids of the threads whose root module calls marked nodes. While it holds no thread but
# the one calling backward(), every node's fwd_tid is that thread and no metadata is read.
_tagging_tids: set[int] = set()


def _root_nodes(roots: Iterable[Any]) -> list[Any]:
    """Autograd nodes backward starts from: tensors' grad_fn, GradientEdges' node."""
    nodes = []
    for root in roots:
        if isinstance(root, (list, tuple)):
            nodes.extend(_root_nodes(root))
        elif isinstance(root, dict):
            nodes.extend(_root_nodes(list(root.values())))
        elif isinstance(root, torch.Tensor):
            if root.grad_fn is not None:
                nodes.append(root.grad_fn)
        elif getattr(root, "node", None) is not None:  # torch.autograd.graph.GradientEdge
            nodes.append(root.node)
    return nodes


def tag_root_outputs(output: Any, first_seq: int, tid: int) -> None:
    """Mark the nodes a root module call returned with its thread, for backward ranges' fwd_tid.

    Called when a root module's forward returns (grad mode on). Nodes created outside modules
    (the loss) carry no mark and default to the thread that calls backward().
    """
    _tagging_tids.add(tid)
    mark = (next(_root_calls), first_seq, tid)
    for node in _root_nodes([output]):
        node.metadata.setdefault(ROOT_KEY, mark)


def _walk(roots: Iterable[Any]) -> list[Any]:
    """Every node reachable from the roots, each once."""
    seen: set[int] = set()
    nodes: list[Any] = []
    stack = list(roots)
    while stack:
        node = stack.pop()
        key = id(node)
        if key in seen:
            continue
        seen.add(key)
        nodes.append(node)
        for next_node, _ in node.next_functions:
            if next_node is not None:
                stack.append(next_node)
    return nodes


def _forward_tids(nodes: list[Any]) -> dict[int, int]:
    """id(node) -> native id of the thread whose root module call made it, for marked calls.

    Root calls are taken in the order they returned; each claims the nodes reachable from its
    outputs that it created (seq at or above its first seq) and no earlier call claimed.
    """
    marked = []
    for node in nodes:
        mark = node.metadata.get(ROOT_KEY)
        if mark is not None:
            marked.append((mark, node))
    marked.sort(key=lambda item: item[0][0])
    claimed: dict[int, int] = {}
    for (_, first_seq, tid), root in marked:
        stack = [root]
        while stack:
            node = stack.pop()
            seq = node._sequence_nr()
            if seq < first_seq or seq >= _NO_SEQ or id(node) in claimed:
                continue
            claimed[id(node)] = tid
            for next_node, _ in node.next_functions:
                if next_node is not None:
                    stack.append(next_node)
    return claimed


def _node_label(node: Any, tid: int) -> bytes:
    """``AddmmBackward0, stashed seq = 5, fwd_tid = 123`` for one node, as ASCII bytes.

    Formatted here on bytes (the hot path); ``_names.backward_name`` documents the grammar.
    """
    seq = node._sequence_nr()
    name: bytes = node.name().encode("ascii", "replace")
    if seq < 0 or seq >= _NO_SEQ:
        return name
    return b"%s, stashed seq = %d, fwd_tid = %d" % (name, seq, tid)


def _sized(label: bytes, grad_outputs: Any) -> bytes:
    """A node's label plus the sizes and dtypes of the gradients flowing in (its inputs, as torch
    sizes a node's record); AccumulateGrad and other nodes without a seq stay bare."""
    if label.find(b", stashed seq = ") < 0:
        return label
    shapes = [list(g.shape) if isinstance(g, torch.Tensor) else [] for g in grad_outputs]
    return label + b", sizes = %s, dtypes = %s" % (sizes_text(shapes).encode(), dtypes_text(grad_outputs).encode())


def run_backward_with_ranges(
    func: Callable[..., Any],
    roots: Iterable[Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    push: Callable[[bytes], object],
    pop: Callable[[], object],
    record_shapes: bool = False,
) -> Any:
    """Call ``func(*args, **kwargs)``, a backward entry, with a range around every node it runs.

    Args:
        func: The engine entry (``torch.autograd._engine_run_backward``) or, in the fallback,
            ``Tensor.backward`` / ``autograd.backward`` / ``autograd.grad``.
        roots: Tensors or GradientEdges backward starts from (nested lists allowed).
        args: Positional arguments for ``func``.
        kwargs: Keyword arguments for ``func``.
        push: Pushes an NVTX range named by ASCII bytes on the calling thread.
        pop: Pops one.
        record_shapes: Append the node's inputs (its outputs' gradients) as ``sizes = [...]`` and
            ``dtypes = [...]``, as torch's records of nodes show them. The ops inside carry the
            node's exact cost then, and the converter costs the node from its forward op's shapes
            only where a node records no sizes (nvbridge.engine.semantics).

    Returns:
        Whatever ``func`` returns.
    """
    caller = get_ident()
    # [node range open on the caller thread, graph task id of this call]
    state: list[Any] = [False, None]
    exact: list[Any] = []  # handles of post-hooks added for nodes run elsewhere

    def close() -> None:
        """Final callback of the graph task: the last node's range ends with the engine's work."""
        if state[0] and get_ident() == caller:
            state[0] = False
            pop()

    def post(grad_inputs: Any, grad_outputs: Any) -> None:
        pop()

    handles = []
    try:
        default_tid = threading.get_native_id()
        nodes = _walk(_root_nodes(roots))
        tids = _forward_tids(nodes) if not _tagging_tids <= {default_tid} else {}
        for node in nodes:

            def pre(grad_outputs: Any, label: bytes = _node_label(node, tids.get(id(node), default_tid))) -> None:
                if record_shapes:
                    label = _sized(label, grad_outputs)
                if get_ident() == caller:
                    task = _graph_task_id()
                    if state[1] is None:
                        state[1] = task
                        _queue_callback(close)
                    if task == state[1]:
                        if state[0]:
                            pop()  # the previous node on this thread has finished
                        state[0] = True
                        push(label)
                        return
                push(label)
                exact.append(_current_node().register_hook(post))

            handles.append(node.register_prehook(pre))
        return func(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
        for handle in exact:
            handle.remove()
        if state[0]:
            state[0] = False
            pop()
