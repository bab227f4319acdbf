"""``nvbridge.annotate.range``: a named NVTX range of the user's own, like ``record_function``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from nvbridge.annotate import _nvtx_lib

__all__ = ["nvtx_range"]

F = TypeVar("F", bound=Callable[..., Any])


class nvtx_range:  # noqa: N801 - used as nvbridge.annotate.range, like record_function
    """A named NVTX range, as context manager or decorator (like ``torch.profiler.record_function``).

    Costs one check when no collector is attached.

    Args:
        label: The range's message.
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self._pushed = False

    def __enter__(self) -> nvtx_range:
        if _nvtx_lib.collector_attached():
            emitter = _nvtx_lib.load_emitter()
            emitter.push(self.label)
            self._pushed = True
            self._pop = emitter.pop
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pushed:
            self._pushed = False
            self._pop()

    def __call__(self, func: F) -> F:
        """Decorator form: the range wraps every call."""

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with nvtx_range(self.label):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
