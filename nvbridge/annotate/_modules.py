"""Module ranges through torch's global forward pre/post hooks.

Why global hooks: they cover every module without touching the user's model, and torch removes
them cleanly. Only forward hooks: full backward hooks insert BackwardHookFunction nodes, which
shift sequence numbers and break in-place ops. The post hook is registered with
``always_call=True`` so an exception inside ``forward`` still pops the range.

Paths: a module called while no module is running on its thread is a root; its
``named_modules()`` give every submodule its dotted path (``encoder.layers.0``), remembered in a
weak map so models that are freed are forgotten.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)
from torch.utils.hooks import RemovableHandle

from nvbridge.annotate._backward import tag_new_nodes
from nvbridge.annotate._names import module_name

_peek = torch._C._autograd._get_sequence_nr

__all__ = ["ModuleHooks"]


class ModuleHooks:
    """Installs the two global hooks; ``remove()`` uninstalls them."""

    def __init__(self, push: Callable[[str], object], pop: Callable[[], object]) -> None:
        self._push = push
        self._pop = pop
        self._labels: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()
        self._depth = threading.local()
        self._handles: list[RemovableHandle] = [
            register_module_forward_pre_hook(self._pre),
            register_module_forward_hook(self._post, always_call=True),
        ]

    def remove(self) -> None:
        """Uninstall both hooks (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _label(self, module: torch.nn.Module) -> str:
        """Range label for ``module``, naming a whole tree the first time its root runs."""
        label = self._labels.get(module)
        if label is not None:
            return label
        if getattr(self._depth, "value", 0) == 0:
            for path, sub in module.named_modules():
                self._labels.setdefault(sub, module_name(path, type(sub).__name__))
            return self._labels[module]
        # A module created on the fly inside another one's forward: no stable path is known.
        return module_name("", type(module).__name__)

    def _pre(self, module: torch.nn.Module, args: Any) -> None:
        self._push(self._label(module))
        depth = getattr(self._depth, "value", 0)
        if depth == 0:
            self._depth.first_seq = _peek()
        self._depth.value = depth + 1

    def _post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        depth = getattr(self._depth, "value", 1) - 1
        self._depth.value = depth
        self._pop()
        if depth == 0 and torch.is_grad_enabled():
            # The root module returned: remember which thread made its autograd nodes, so
            # backward ranges name the forward thread even when backward runs elsewhere.
            tag_new_nodes(output, self._depth.first_seq, threading.get_native_id())
