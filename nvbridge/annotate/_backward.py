"""Backward node ranges: hooks around each autograd node's apply, installed per backward call.

Why hooks and not a dispatch mode: a backward node is not an op; torch's engine calls its
``apply`` and the aten ops it runs nest inside. ``Node.register_prehook`` and ``register_hook``
run on the thread executing the node, immediately around apply, so a push in the pre-hook and a
pop in the post-hook bracket exactly the node's work on the right thread. Hooks are registered by
walking the graph from the roots when ``backward()``/``autograd.grad`` is called, and removed when
it returns, so nothing lingers on the graph. The post-hook is skipped if apply raises; the ranges
left open on the calling thread are popped when the backward call unwinds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

import torch

from nvbridge.annotate._names import backward_name

__all__ = ["FWD_TID_KEY", "run_backward_with_ranges", "tag_new_nodes"]

FWD_TID_KEY = "nvbridge.fwd_tid"

_NO_SEQ = (1 << 64) - 1  # AccumulateGrad & co. carry UINT64_MAX: torch prints no seq for them


def _root_nodes(roots: Iterable[Any]) -> list[Any]:
    """Autograd nodes backward starts from: tensors' grad_fn, GradientEdges' node."""
    nodes = []
    for root in roots:
        if isinstance(root, (list, tuple)):
            nodes.extend(_root_nodes(root))
        elif isinstance(root, torch.Tensor):
            if root.grad_fn is not None:
                nodes.append(root.grad_fn)
        elif getattr(root, "node", None) is not None:  # torch.autograd.graph.GradientEdge
            nodes.append(root.node)
    return nodes


def tag_new_nodes(output: Any, first_seq: int, tid: int) -> None:
    """Record the creating thread on every node reachable from ``output`` made since first_seq.

    Called when a root module's forward returns; nodes created outside modules (the loss) are
    left untagged and default to the thread that calls backward().
    """
    stack = _root_nodes([output] if not isinstance(output, dict) else list(output.values()))
    while stack:
        node = stack.pop()
        seq = node._sequence_nr()
        if seq < first_seq or seq >= _NO_SEQ:
            continue
        metadata = node.metadata
        if FWD_TID_KEY in metadata:
            continue
        metadata[FWD_TID_KEY] = tid
        stack.extend(n for n, _ in node.next_functions if n is not None)


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
        stack.extend(n for n, _ in node.next_functions if n is not None)
    return nodes


def _node_label(node: Any, default_tid: int) -> str:
    """``AddmmBackward0, stashed seq = 5, fwd_tid = 123`` for one node."""
    seq = node._sequence_nr()
    if seq < 0 or seq >= _NO_SEQ:
        return backward_name(node.name(), None, None)
    tid = node.metadata.get(FWD_TID_KEY, default_tid)
    return backward_name(node.name(), seq, tid)


def run_backward_with_ranges(
    func: Callable[..., Any],
    roots: Iterable[Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    push: Callable[[str], object],
    pop: Callable[[], object],
) -> Any:
    """Call ``func(*args, **kwargs)``, a backward entry, with a range around every node it runs.

    Args:
        func: The engine entry (``torch.autograd._engine_run_backward``) or, in the fallback,
            ``Tensor.backward`` / ``autograd.backward`` / ``autograd.grad``.
        roots: Tensors or GradientEdges backward starts from (nested lists allowed).
        args: Positional arguments for ``func``.
        kwargs: Keyword arguments for ``func``.
        push: Pushes an NVTX range on the calling thread.
        pop: Pops one.

    Returns:
        Whatever ``func`` returns.
    """
    caller = threading.get_native_id()
    open_here = [0]  # ranges pushed on the calling thread and not yet popped

    def make_hooks(label: str) -> tuple[Callable[..., None], Callable[..., None]]:
        def pre(grad_outputs: Any) -> None:
            push(label)
            if threading.get_native_id() == caller:
                open_here[0] += 1

        def post(grad_inputs: Any, grad_outputs: Any) -> None:
            pop()
            if threading.get_native_id() == caller:
                open_here[0] -= 1

        return pre, post

    handles = []
    try:
        for node in _walk(_root_nodes(roots)):
            pre, post = make_hooks(_node_label(node, caller))
            handles.append(node.register_prehook(pre))
            handles.append(node.register_hook(post))
        return func(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
        for _ in range(open_here[0]):
            pop()
