"""``emit_nvtx``: turn annotation on for a block, on the entering thread, and off again cleanly.

Backends: the C++ RecordFunction observer (``_observer.py``; ``auto``'s first choice), torch's
native NVTX state (CUDA builds), or the python modes and hooks (``_ops.py``, ``_backward.py``).

What is per thread and what is global: the observer's callback and TorchDispatchMode stacks are
thread-local, so each thread that should be annotated enters its own ``emit_nvtx`` (a second
Python thread does ``with nvbridge.emit_nvtx(): ...`` in its body). The ``Module.__call__``,
``autograd.Function.apply`` and backward-engine wrappers are process-wide; they are
reference-counted across active instances so two threads do not install them twice.

When no collector is attached (``NVTX_INJECTION64_PATH`` unset) nothing is installed at all:
entering costs a dictionary lookup and ops run at full speed.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal, TypeVar

import torch

from nvbridge.annotate import _memory, _nvtx_lib, _observer, _rank
from nvbridge.annotate._backward import run_backward_with_ranges
from nvbridge.annotate._modules import ModuleRanges
from nvbridge.annotate._names import forward_name, step_name
from nvbridge.annotate._ops import BackwardCallMode, OpDispatchMode, input_sizes, next_op_id

__all__ = ["Backend", "emit_nvtx"]

Backend = Literal["auto", "observer", "python", "native"]
F = TypeVar("F", bound=Callable[..., Any])

_REENTRY = "NVTX annotation context manager is not reentrant"


class _Globals:
    """Process-wide hooks shared by all active emit_nvtx instances, reference-counted."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.module_users = 0
        self.module_ranges: ModuleRanges | None = None
        self.apply_users = 0
        self.original_apply: Any = None
        self.original_engine: Any = None
        self.thread_modes = threading.local()

    def acquire(self, modules: bool, python: bool, emitter: _nvtx_lib.Emitter) -> None:
        """Install module ranges (if asked) and, for the python backend, the apply/engine wrappers."""
        with self.lock:
            if modules:
                if self.module_users == 0:
                    self.module_ranges = ModuleRanges(emitter.ascii_push(), emitter.pop)
                self.module_users += 1
            if not python:
                return  # torch's native ranges cover custom Functions and backward nodes
            if self.apply_users == 0:
                # A classmethod in torch <= 2.13, a C classmethod_descriptor from 2.14 on: keep
                # the exact object to put back, and call it through the descriptor protocol.
                self.original_apply = torch.autograd.Function.__dict__["apply"]
                torch.autograd.Function.apply = classmethod(  # type: ignore[method-assign,assignment]
                    _wrapped_apply(self.original_apply, emitter, self.thread_modes)
                )
                if ENGINE_HOOKABLE:
                    self.original_engine = getattr(torch.autograd, _ENGINE_ATTR)
                    wrapped = _wrapped_engine(self.original_engine, emitter, self.thread_modes)
                    setattr(torch.autograd, _ENGINE_ATTR, wrapped)
            self.apply_users += 1

    def release(self, modules: bool, python: bool) -> None:
        """Undo :meth:`acquire`; the last user uninstalls."""
        with self.lock:
            if modules:
                self.module_users -= 1
                if self.module_users == 0 and self.module_ranges is not None:
                    self.module_ranges.remove()
                    self.module_ranges = None
            if not python:
                return
            self.apply_users -= 1
            if self.apply_users == 0:
                torch.autograd.Function.apply = self.original_apply  # type: ignore[method-assign]
                self.original_apply = None
                if self.original_engine is not None:
                    setattr(torch.autograd, _ENGINE_ATTR, self.original_engine)
                    self.original_engine = None


# Tensor.backward, autograd.backward and autograd.grad all end in this module-level function of
# torch.autograd (torch >= 2.3); wrapping it sees every backward call for free, where a
# TorchFunctionMode would cost 1-3 us on every torch call. Older torch falls back to the mode.
ENGINE_HOOKABLE = callable(getattr(torch.autograd, "_engine_run_backward", None))
_ENGINE_ATTR = "_engine_run_backward"


def _wrapped_engine(
    engine: Callable[..., Any], emitter: _nvtx_lib.Emitter, thread_modes: threading.local
) -> Callable[..., Any]:
    """Backward calls on annotated threads get a range per node; other threads pass through."""
    peek = torch._C._autograd._get_sequence_nr
    push, pop = emitter.ascii_push(), emitter.pop

    @functools.wraps(engine)
    def wrapper(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
        mode = getattr(thread_modes, "dispatch", None)
        if mode is None:
            return engine(t_outputs, *args, **kwargs)
        try:
            return run_backward_with_ranges(
                engine, [t_outputs], (t_outputs, *args), kwargs, push, pop, mode.record_shapes
            )
        finally:
            mode.last_peek = peek()

    return wrapper


def _wrapped_apply(apply: Any, emitter: _nvtx_lib.Emitter, thread_modes: threading.local) -> Callable[..., Any]:
    """Custom autograd.Function calls get ``MyFn, seq = N, op_id = K`` like torch's record."""
    peek = torch._C._autograd._get_sequence_nr
    bind = apply.__get__  # classmethod or classmethod_descriptor: bind(None, cls) -> bound apply

    @functools.wraps(getattr(apply, "__func__", apply))
    def wrapper(cls: type, *args: Any, **kwargs: Any) -> Any:
        mode = getattr(thread_modes, "dispatch", None)
        if mode is None:  # thread not annotated by the python backend (native emits its own)
            return bind(None, cls)(*args, **kwargs)
        sizes = input_sizes(args) if mode.record_shapes else None  # torch records every argument
        emitter.push(forward_name(cls.__name__, peek(), next_op_id(), sizes))
        try:
            return bind(None, cls)(*args, **kwargs)
        finally:
            emitter.pop()
            mode.last_peek = peek()

    return wrapper


_GLOBALS = _Globals()


def _thread_annotated() -> bool:
    """An emit_nvtx instance (python mode or torch's native state) already covers this thread."""
    local = _GLOBALS.thread_modes
    return (
        getattr(local, "dispatch", None) is not None
        or bool(getattr(local, "native", False))
        or bool(getattr(local, "observer", False))
    )


def _native_available() -> bool:
    """torch's own NVTX profiler state works only in CUDA builds."""
    return torch.version.cuda is not None


class emit_nvtx:  # noqa: N801 - named like torch.autograd.profiler.emit_nvtx on purpose
    """Make every op, backward node and module call an NVTX range while the block runs.

    Use as ``with nvbridge.emit_nvtx(): ...`` or as a decorator. Each thread to be annotated
    enters its own instance. Ranges follow torch 2.x's grammar (see ``_names.py``).

    Args:
        enabled: False makes this a true no-op.
        record_shapes: Add ``sizes = [[...], ...]`` (one entry per schema argument).
        profile_memory: Mark every allocation and free of torch's allocators in the ``nvbridge``
            NVTX domain (observer backend only; the others warn once and record none). See
            docs/annotate.md, "Memory".
        modules: Add ``nn.Module: <path> (<Class>)`` ranges around module calls.
        backend: ``"observer"`` (a C++ RecordFunction observer built on first use: torch's
            exact op names plus the forward thread, every build), ``"python"`` (dispatch mode
            and node hooks; no compiler needed), ``"native"`` (torch's C++ NVTX ranges, CUDA
            builds only) or ``"auto"`` (observer, else native where available, else python).
            nvbridge adds module and step ranges to each.

    Raises:
        RuntimeError: On entering an instance that is already active.
        ValueError: On an unknown backend, ``native`` on a build without CUDA, or ``observer``
            where the extension cannot be built (the message says why).
    """

    def __init__(
        self,
        enabled: bool = True,
        record_shapes: bool = False,
        modules: bool = True,
        backend: Backend = "auto",
        profile_memory: bool = False,
    ) -> None:
        if backend not in ("auto", "observer", "python", "native"):
            raise ValueError(f"backend must be 'auto', 'observer', 'python' or 'native', not {backend!r}")
        if backend == "native" and enabled and not _native_available():
            raise ValueError("backend='native' needs a CUDA build of torch; use 'python' or 'auto'")
        self.enabled = enabled
        self.record_shapes = record_shapes
        self.modules = modules
        self.backend: Backend = backend
        self.profile_memory = profile_memory
        self._memory: _memory.MemoryRecorder | None = None
        self.active_backend: str = "off"
        self._entered = False
        self._emitter = _nvtx_lib.NOOP
        self._modes: list[Any] = []
        self._native_on = False
        self._observer: tuple[_observer.Observer, int] | None = None
        self._step = 0
        self._step_open = False
        self._globals_held = False
        self._python_held = False

    def __enter__(self) -> emit_nvtx:
        if not self.enabled:
            return self
        if self._entered:
            raise RuntimeError(_REENTRY)
        self._entered = True
        if not _nvtx_lib.collector_attached():
            return self  # nothing would record: stay free
        _rank.mark_rank()  # which rank this process is, for a capture of many processes
        if _thread_annotated():
            # Another instance already annotates this thread (e.g. a decorated function called
            # inside a ``with`` block): a second mode (or a python mode under torch's native
            # ranges) would emit every op twice. Only step() does anything here.
            self._emitter = _nvtx_lib.load_emitter()
            self.active_backend = "nested"
            return self
        self._emitter = _nvtx_lib.load_emitter()
        if self._emitter is _nvtx_lib.NOOP:
            return self
        try:
            self._install()
        except BaseException:
            self._uninstall()
            self._entered = False
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.enabled or not self._entered:
            return
        try:
            self._uninstall()
        finally:
            self._entered = False

    def __call__(self, func: F) -> F:
        """Decorator form: a fresh, equally configured instance around every call."""

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with emit_nvtx(self.enabled, self.record_shapes, self.modules, self.backend, self.profile_memory):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    @property
    def memory_recording(self) -> bool:
        """Allocator events of this thread are being marked now (profile_memory with the observer)."""
        return self._memory is not None and self._memory.recording and not self._memory.suspended

    def step(self) -> None:
        """Close the previous ``ProfilerStep#N`` range and open the next one.

        Call it at the top of each training iteration, outside any other range, on the thread
        that entered this instance; the last step range closes on exit.
        """
        if self.active_backend == "off":
            self._step += 1
            return
        if self._step_open:
            self._emitter.pop()
        self._emitter.push(step_name(self._step))
        self._step_open = True
        self._step += 1

    def _install(self) -> None:
        """Turn on the chosen backend on this thread, plus the process-wide hooks."""
        if self.backend in ("auto", "observer"):
            observer = _observer.load()
            if observer is None and self.backend == "observer":
                raise ValueError(f"backend='observer' is unavailable: {_observer.unavailable_reason()}; use 'auto'")
            if observer is not None:
                self._observer = (observer, observer.start(self.record_shapes))
                if self.profile_memory:
                    self._memory = _memory.MemoryRecorder(observer)
                    self._memory.start()
                _GLOBALS.thread_modes.observer = True
                self.active_backend = "observer"
                _GLOBALS.acquire(self.modules, False, self._emitter)
                self._globals_held = True
                return
        if self.profile_memory:
            why = _observer.unavailable_reason() or f"backend={self.backend!r}"
            _memory.warn_not_recorded("backend", f"only the observer backend records allocator events ({why})")
        use_native = self.backend == "native" or (self.backend == "auto" and _native_available())
        if use_native:
            self._native_on = _enable_native(self.record_shapes)
            self.active_backend = "native" if self._native_on else "python"
            _GLOBALS.thread_modes.native = self._native_on
        else:
            self.active_backend = "python"
        if not self._native_on:
            emitter = self._emitter
            dispatch = OpDispatchMode(emitter.ascii_push(), emitter.pop, self.record_shapes, emitter.push)

            if not ENGINE_HOOKABLE:

                def on_backward(
                    func: Callable[..., Any], roots: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]
                ) -> Any:
                    return run_backward_with_ranges(
                        func, roots, args, kwargs, emitter.ascii_push(), emitter.pop, dispatch.record_shapes
                    )

                function = BackwardCallMode(on_backward, dispatch)
                function.__enter__()  # type: ignore[no-untyped-call]
                self._modes.append(function)
            dispatch.__enter__()  # type: ignore[no-untyped-call]
            self._modes.append(dispatch)
            _GLOBALS.thread_modes.dispatch = dispatch
        self._python_held = not self._native_on
        _GLOBALS.acquire(self.modules, self._python_held, self._emitter)
        self._globals_held = True

    def _uninstall(self) -> None:
        """Undo everything :meth:`_install` did, in reverse order, even after an exception."""
        if self._step_open:
            self._step_open = False
            self._emitter.pop()
        if self._globals_held:
            self._globals_held = False
            _GLOBALS.release(self.modules, self._python_held)
        if self._memory is not None:
            self._memory.stop()
            self._memory = None
        if self._observer is not None:
            observer, handle = self._observer
            self._observer = None
            _GLOBALS.thread_modes.observer = False
            observer.stop(handle)
        if self._modes:
            _GLOBALS.thread_modes.dispatch = None
        while self._modes:
            self._modes.pop().__exit__(None, None, None)
        if self._native_on:
            self._native_on = False
            _GLOBALS.thread_modes.native = False
            getattr(torch.autograd, "_disable_profiler")()  # noqa: B009 - private torch API
        self.active_backend = "off"


def _enable_native(record_shapes: bool) -> bool:
    """Start torch's NVTX profiler state (CUDA builds); False if this torch refuses."""
    # Private torch API (as used by torch.autograd.profiler.emit_nvtx), looked up dynamically.
    from torch.autograd import profiler as torch_profiler

    config_cls: Any = getattr(torch_profiler, "ProfilerConfig")  # noqa: B009
    state: Any = getattr(torch_profiler, "ProfilerState")  # noqa: B009
    experimental: Any = getattr(torch_profiler, "_ExperimentalConfig")  # noqa: B009
    enable: Any = getattr(torch_profiler, "_enable_profiler")  # noqa: B009
    try:
        config = config_cls(state.NVTX, record_shapes, False, False, False, False, experimental())
        enable(config, set())
    except RuntimeError:
        return False
    return True
