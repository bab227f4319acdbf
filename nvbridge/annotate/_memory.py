"""``emit_nvtx(profile_memory=True)``: torch's allocator events as NVTX marks, and sharing with torch.profiler.

The events come from ``_memory.cpp`` (built into the observer's library): a reporter in the
thread's profiler slot (c10's ``PROFILER_STATE`` debug info, the hook torch.profiler's
``profile_memory`` uses) that marks each allocation and free in the ``nvbridge`` NVTX domain as
``mem <device> <address> <bytes> <total_allocated> <total_reserved>``.

A thread has one profiler slot, and torch's profiler reads whatever sits in it as its own state,
so the two cannot both hold it:

- torch.profiler (or torch's emit_nvtx) already running when the block starts: nvbridge records
  no allocator events in that block (one :class:`MemoryNotRecordedWarning`); torch's profiler
  keeps its own (``profile_memory=True`` there still gives torch's memory columns).
- torch.profiler started inside the block: nvbridge steps aside while it runs (its allocator
  events go to torch's profiler, one warning) and takes the slot back when it stops. This works
  through ``torch.autograd.profiler._enable_profiler`` / ``_disable_profiler``, which
  ``torch.profiler.profile``, ``torch.autograd.profiler.profile``, ``emit_nvtx`` and ``emit_itt``
  call; those functions are wrapped while any recorder is active.

The python backend cannot reach c10 (the hook is a C++ virtual call), so it records nothing and
warns once; so does torch's native NVTX backend (its reporter ignores memory events).
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch.autograd
import torch.autograd.profiler

from nvbridge.annotate._observer import Observer

__all__ = ["MemoryNotRecordedWarning", "MemoryRecorder", "warn_not_recorded"]

_WRAPPED = ("_enable_profiler", "_disable_profiler")


class MemoryNotRecordedWarning(UserWarning):
    """``profile_memory=True`` asked for allocator events that this run does not record."""


_warned: set[str] = set()


def warn_not_recorded(key: str, message: str, stacklevel: int = 4) -> None:
    """Warn once per process per ``key`` (the cause), naming what is lost and the fix."""
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(
        f"nvbridge.emit_nvtx(profile_memory=True): {message}", MemoryNotRecordedWarning, stacklevel=stacklevel
    )


class _Local(threading.local):
    recorder: MemoryRecorder | None = None


_local = _Local()


class MemoryRecorder:
    """The allocator reporter of one emit_nvtx instance, on the thread that entered it."""

    def __init__(self, observer: Observer) -> None:
        self._observer = observer
        self.recording = False  # our reporter holds (or will take back) this thread's slot
        self.suspended = False  # torch.profiler holds the slot for now

    def start(self) -> bool:
        """Take this thread's profiler slot; False (with a warning) when torch's profiler holds it."""
        code = self._observer.memory_start()
        if code != 1:
            cause = "taken" if code == 0 else "refused"
            warn_not_recorded(
                cause,
                "no allocator events are recorded in this block: "
                + (
                    "torch.profiler (or torch's emit_nvtx) already runs on this thread and a thread has one "
                    "profiler slot; torch's profiler keeps its own memory events (profile_memory=True there), "
                    "or start emit_nvtx first"
                    if code == 0
                    else "torch refused the reporter"
                ),
                stacklevel=5,  # the user's ``with emit_nvtx(...)``
            )
            return False
        self.recording = True
        _local.recorder = self
        _HOOKS.acquire()
        return True

    def stop(self) -> None:
        """Give the slot back (or stay off if torch.profiler took it and still runs)."""
        if not self.recording:
            return
        self.recording = False
        if _local.recorder is self:
            _local.recorder = None
        if not self.suspended and self._observer.memory_stop() != 1:
            warn_not_recorded("stuck", "the reporter was not the thread's newest debug info at exit; it stays")
        _HOOKS.release()

    def events(self) -> int:
        """Allocator events marked so far in this process."""
        count: int = self._observer.memory_events()
        return count

    def suspend(self) -> None:
        """torch's profiler is starting on this thread: hand it the slot."""
        if self.recording and not self.suspended and self._observer.memory_stop() == 1:
            self.suspended = True
            warn_not_recorded(
                "inside",
                "torch.profiler started inside the block: nvbridge records no allocator events while it runs "
                "(they go to torch.profiler's profile_memory); recording resumes when it stops",
            )

    def resume(self) -> None:
        """torch's profiler stopped: take the slot back."""
        if self.suspended:
            self.suspended = False
            if self._observer.memory_start() != 1:
                self.recording = False  # another profiler state took the slot meanwhile


class _Hooks:
    """Wrappers around torch's profiler enable/disable, installed while any recorder is active."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.originals: dict[str, Any] = {}

    def acquire(self) -> None:
        with self.lock:
            self.users += 1
            if self.users > 1:
                return
            for name in _WRAPPED:
                original = getattr(torch.autograd.profiler, name, None)
                if callable(original):
                    self.originals[name] = original
                    wrap = _wrapped_enable if name == "_enable_profiler" else _wrapped_disable
                    setattr(torch.autograd.profiler, name, wrap(original))

    def release(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users > 0:
                return
            for name, original in self.originals.items():
                setattr(torch.autograd.profiler, name, original)
            self.originals.clear()


_HOOKS = _Hooks()


def _wrapped_enable(enable: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(enable)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        recorder = _local.recorder
        if recorder is not None:
            recorder.suspend()
        try:
            return enable(*args, **kwargs)
        except BaseException:
            if recorder is not None:
                recorder.resume()
            raise

    return wrapper


def _wrapped_disable(disable: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(disable)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return disable(*args, **kwargs)
        finally:
            recorder = _local.recorder
            if recorder is not None:
                recorder.resume()

    return wrapper
