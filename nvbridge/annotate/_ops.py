"""Forward op ranges from Python: a TorchDispatchMode below autograd, a TorchFunctionMode above it.

Why two modes: the dispatch mode sees every aten op that reaches a kernel, forward and backward,
with its real aten name (``aten::addmm``), which is what torch's own NVTX ranges show. It cannot
see ``backward()`` being called; the function mode can, and on torch older than 2.3 (no
``torch.autograd._engine_run_backward`` to wrap, see ``_session.py``) that is where backward node
hooks are installed (see ``_backward.py``).

Cost: torch's own work to call a Python dispatch mode (box the arguments, find the mode, parse
them again when the op is called from Python) is most of the price of an op range, 3-8 us on a
2-CPU machine, and nothing here can lower it. What the mode adds on top is kept small: names are
formatted as bytes from prefixes computed once per overload and handed straight to the ctypes
``nvtxRangePushA``, the per-overload cache is keyed by ``id()`` (an OpOverload hashes in Python),
and the op is called through ``OpOverload._op``, skipping ``OpOverload.__call__``'s frame.

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

from nvbridge.annotate._names import dtypes_text, sizes_text, values_text, wants_values

__all__ = ["OpDispatchMode", "input_sizes", "next_op_id"]

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
    """Per-overload facts computed once: name prefixes, argument names and defaults, seq eligibility."""

    __slots__ = (
        "arg_names",
        "call",
        "defaults",
        "func",
        "kind",
        "name",
        "plain_prefix",
        "seq_capable",
        "seq_prefix",
        "with_values",
    )

    def __init__(self, func: torch._ops.OpOverload) -> None:
        schema = func._schema
        self.func = func  # keeps the overload alive, so its id() stays this entry's key
        # OpOverload.__call__ is ``self._op(*args, **kwargs)``; calling _op skips that Python
        # frame. Subclasses that override __call__ (TorchBindOpOverload) are called as they are.
        plain = type(func).__call__ is torch._ops.OpOverload.__call__ and hasattr(func, "_op")
        self.call: Callable[..., Any] = func._op if plain else func
        self.name: str = schema.name
        encoded = self.name.encode("ascii", "replace")
        self.seq_prefix = encoded + b", seq = "
        self.plain_prefix = encoded + b", op_id = "
        self.arg_names = [a.name for a in schema.arguments]
        self.defaults = [a.default_value if a.has_default_value() else None for a in schema.arguments]
        base = self.name.split("::", 1)[-1]
        self.seq_capable = not (base.endswith("_like") or base in _BELOW_AUTOGRAD_FROM_PYTHON)
        self.kind = _SPECIAL.get(self.name, _PLAIN)
        self.with_values = wants_values(self.name)

    def values(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The arguments in schema order, positional then keyword, defaults filled in, tensor
        lists flattened (one entry per tensor): what torch's inputSizes walks."""
        values = [
            args[i] if i < len(args) else kwargs.get(name, self.defaults[i]) for i, name in enumerate(self.arg_names)
        ]
        return flat_inputs(values)


def flat_inputs(values: Any) -> list[Any]:
    """A list's tensors one entry each (``stack([a, b], 0)`` -> ``[a, b, 0]``; the Nones of an
    optional tensor list left out), other arguments (and lists holding no tensor) as they are, as
    torch's ``inputSizes(fn, flatten_list_enabled=true)`` walks them."""
    out: list[Any] = []
    for value in values:
        tensors = [v for v in value if isinstance(v, _Tensor)] if isinstance(value, (list, tuple)) else ()
        if tensors:
            out.extend(tensors)
        else:
            out.append(value)
    return out


def input_sizes(values: Any) -> list[list[int]]:
    """Shapes as torch's ``inputSizes(fn, flatten_list_enabled=true)``: a tensor's sizes, a tensor
    list's tensors one entry each (``stack([a, b], 0)`` -> ``[[2, 3], [2, 3], []]``), else ``[]``."""
    return [_shape(value) for value in flat_inputs(values)]


# Keyed by id(): hashing an OpOverload runs a Python __hash__ on every op. Each entry holds its
# overload, and torch never frees overloads anyway, so an id is never reused for another one.
_schemas: dict[int, _SchemaInfo] = {}
_schema_for = _schemas.get


def _new_schema(func: torch._ops.OpOverload) -> _SchemaInfo:
    info = _schemas[id(func)] = _SchemaInfo(func)
    return info


class OpDispatchMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """One aten op = one NVTX range, named in torch's grammar. One instance per thread.

    Args:
        push: Pushes a range named by ASCII bytes (the ctypes ``nvtxRangePushA`` itself).
        pop: Pops it.
        record_shapes: Append ``sizes = [...]`` to every op name.
        push_text: Pushes a range named by a str (record_function labels); default: ``push``
            after encoding.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Wrapping __torch_dispatch__ to skip dynamo imports torch._dynamo (~1.8 s) on first use
        # and costs ~1 us per op; this mode never runs under torch.compile tracing.
        return False

    def __init__(
        self,
        push: Callable[[bytes], object],
        pop: Callable[[], object],
        record_shapes: bool,
        push_text: Callable[[str], object] | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._push = push
        self._pop = pop
        self._push_text = push_text or (lambda text: push(text.encode("ascii", "replace")))
        self._record_shapes = record_shapes
        self.record_shapes = record_shapes
        self.last_peek = _peek()

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        # Hot path (runs for every op): formatting is inlined and works on bytes; forward_name()
        # documents the grammar.
        info = _schema_for(id(func)) or _new_schema(func)
        if info.kind:
            return self._scope(info.kind, func, args, kwargs or {})
        if (
            info.seq_capable
            and _grad_enabled()
            and ((args and isinstance(args[0], _Tensor)) or _has_tensor(args, kwargs or {}))
        ):
            peek = _peek()
            name = b"%s%d, op_id = %d" % (info.seq_prefix, peek - 1 if peek > self.last_peek else peek, next_op_id())
        else:
            name = b"%s%d" % (info.plain_prefix, next_op_id())
        if self._record_shapes:
            # sizes and dtypes: one entry per input torch sizes, so entry i of each is one tensor
            values = info.values(args, kwargs or {})
            name += b", sizes = " + sizes_text([_shape(v) for v in values]).encode()
            name += b", dtypes = " + dtypes_text(values).encode()
            if info.with_values:
                name += b", values = " + values_text(values).encode("ascii", "backslashreplace")
        self._push(name)
        try:
            return info.call(*args, **kwargs) if kwargs else info.call(*args)
        finally:
            self._pop()
            self.last_peek = _peek()

    def _scope(self, kind: int, func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """record_function scopes become one range named by their label."""
        if kind == _SCOPE_ENTER:
            result = func(*args, **kwargs)
            self._push_text(str(args[0]) if args else "record_function")
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
