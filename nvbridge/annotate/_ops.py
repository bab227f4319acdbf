"""Forward op ranges from Python: a TorchDispatchMode below autograd, a TorchFunctionMode above it.

Why two modes: the dispatch mode sees every aten op that reaches a kernel, forward and backward,
with its real aten name (``aten::addmm``), which is what torch's own NVTX ranges show. It cannot
see ``backward()`` being called; the function mode can, and that is where backward node hooks are
installed (see ``_backward.py``) and where nodes learn which thread created them.

Sequence numbers must equal torch's (``Dispatcher::sequenceNumberForRunningRecordFunction``): an
op gets ``seq = peek()`` taken *before* its autograd kernel ran, if the call's dispatch keys hold
an autograd key and grad mode is on. Inside ``__torch_dispatch__`` the autograd kernel has already
created the op's node, so peek is one ahead exactly when a node was made for this op. The mode
remembers the counter at the end of the previous op on this thread: if it moved since, this op
made a node and its seq is ``peek - 1``; otherwise ``peek``. Ops with no tensor argument, and the
``*_like`` factories (torch's Python bindings call them below autograd), get no seq, as in torch.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from nvbridge.annotate._names import sizes_text

__all__ = ["OpDispatchMode", "next_op_id"]

_peek: Callable[[], int] = torch._C._autograd._get_sequence_nr
_grad_enabled: Callable[[], bool] = torch.is_grad_enabled
_Tensor = torch.Tensor

# torch's op_id is one counter per process; ours too, shared by every thread and range kind.
_op_ids = itertools.count(1)
next_op_id: Callable[[], int] = _op_ids.__next__


# torch's Python bindings call these below autograd (torch.tensor -> lift_fresh), so no seq.
_BELOW_AUTOGRAD_FROM_PYTHON = frozenset({"lift", "lift_fresh", "lift_fresh_copy"})

# record_function(label) runs these two ops; torch's NVTX mode shows the label as a range
# (``Optimizer.step#SGD.step``), so the enter op pushes the label and the exit op pops it.
_PLAIN, _SCOPE_ENTER, _SCOPE_EXIT = 0, 1, 2
_SPECIAL = {
    "profiler::_record_function_enter_new": _SCOPE_ENTER,
    "profiler::_record_function_enter": _SCOPE_ENTER,
    "profiler::_record_function_exit": _SCOPE_EXIT,
}


def _has_tensor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """True if any argument is a tensor or a list of tensors (the call then has autograd keys)."""
    for value in itertools.chain(args, kwargs.values()):
        if isinstance(value, _Tensor):
            return True
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], _Tensor):
            return True
    return False


def _shape(value: Any) -> list[int]:
    """Sizes of a tensor argument; ``[]`` for anything else, like torch's record_shapes."""
    return list(value.shape) if isinstance(value, _Tensor) else []


class _SchemaInfo:
    """Per-overload facts computed once: name, argument names and defaults, seq eligibility."""

    __slots__ = ("arg_names", "defaults", "kind", "name", "seq_capable")

    def __init__(self, func: torch._ops.OpOverload) -> None:
        schema = func._schema
        self.name: str = schema.name
        self.arg_names = [a.name for a in schema.arguments]
        self.defaults = [a.default_value if a.has_default_value() else None for a in schema.arguments]
        base = self.name.split("::", 1)[-1]
        self.seq_capable = not (base.endswith("_like") or base in _BELOW_AUTOGRAD_FROM_PYTHON)
        self.kind = _SPECIAL.get(self.name, _PLAIN)

    def sizes(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[list[int]]:
        """One shape per schema argument, positional then keyword, defaults filled in."""
        out: list[list[int]] = []
        for i, name in enumerate(self.arg_names):
            if i < len(args):
                out.append(_shape(args[i]))
            else:
                out.append(_shape(kwargs.get(name, self.defaults[i])))
        return out


_schemas: dict[Any, _SchemaInfo] = {}


class OpDispatchMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """One aten op = one NVTX range, named in torch's grammar. One instance per thread."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Wrapping __torch_dispatch__ to skip dynamo imports torch._dynamo (~1.8 s) on first use
        # and costs ~1 us per op; this mode never runs under torch.compile tracing.
        return False

    def __init__(self, push: Callable[[str], object], pop: Callable[[], object], record_shapes: bool) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._push = push
        self._pop = pop
        self._record_shapes = record_shapes
        self.last_peek = _peek()

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        # Hot path (runs for every op): formatting is inlined; forward_name() documents it.
        if kwargs is None:
            kwargs = {}
        info = _schemas.get(func)
        if info is None:
            info = _schemas[func] = _SchemaInfo(func)
        if info.kind != _PLAIN:
            return self._scope(info.kind, func, args, kwargs)
        if (
            info.seq_capable
            and _grad_enabled()
            and ((args and isinstance(args[0], _Tensor)) or _has_tensor(args, kwargs))
        ):
            peek = _peek()
            seq = peek - 1 if peek > self.last_peek else peek
            name = f"{info.name}, seq = {seq}, op_id = {next_op_id()}"
        else:
            name = f"{info.name}, op_id = {next_op_id()}"
        if self._record_shapes:
            name += ", sizes = " + sizes_text(info.sizes(args, kwargs))
        self._push(name)
        try:
            return func(*args, **kwargs)
        finally:
            self._pop()
            self.last_peek = _peek()

    def _scope(self, kind: int, func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """record_function scopes become one range named by their label."""
        if kind == _SCOPE_ENTER:
            result = func(*args, **kwargs)
            self._push(str(args[0]) if args else "record_function")
            return result
        self._pop()
        return func(*args, **kwargs)


class BackwardCallMode(TorchFunctionMode):
    """Fallback for torch builds without ``torch.autograd._engine_run_backward``: sees
    ``backward()``/``autograd.grad`` calls at the Python API level (costs ~1-3 us per torch call,
    which is why the engine hook in ``_session.py`` is preferred)."""

    def __init__(
        self,
        on_backward: Callable[[Callable[..., Any], list[Any], tuple[Any, ...], dict[str, Any]], Any],
        dispatch_mode: OpDispatchMode,
    ) -> None:
        super().__init__()
        self._on_backward = on_backward
        self._dispatch_mode = dispatch_mode

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if kwargs is None:
            kwargs = {}
        if func not in _BACKWARD_ENTRY_POINTS:
            return func(*args, **kwargs)
        roots = args[0] if args else kwargs.get("tensors", kwargs.get("outputs", kwargs.get("self")))
        try:
            return self._on_backward(func, [roots], args, kwargs)
        finally:
            self._dispatch_mode.last_peek = _peek()


_BACKWARD_ENTRY_POINTS = frozenset({torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad})
