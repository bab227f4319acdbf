"""Push and pop NVTX ranges from Python at the lowest cost that still records everywhere.

Why not simply ``nvtx.push_range``? Two traps measured with Nsight Systems 2022.4:

1. ``nvtx`` 0.2.12 and newer build a domain only if ``nvtxDomainIsEnabled`` says so; nsys 2022.4
   does not implement that call, so every range silently vanishes.
2. ``nvtx`` caches every distinct message as a registered string forever (about 490 bytes each);
   op names carry a sequence number and an op id, so every message is distinct and a long run
   grows without bound.

So the preferred emitter calls the plain C API ``nvtxRangePushA`` / ``nvtxRangePop`` through
ctypes (``libnvtx3interop.so.1`` from the ``nvidia-nvtx-cu12`` wheel, which every CUDA build of
torch already depends on; or a system ``libnvToolsExt``): ASCII messages, nothing cached, no
domain check. The fallback drives the ``nvtx`` package's low-level ``_lib`` functions with a
fresh registered string per message (module-level ``push_range`` skips the domain check in every
release) and keeps no reference to it, so Python memory stays flat.

Whether anything records is decided by the collector: NVTX loads the library named in
``NVTX_INJECTION64_PATH`` (nsys sets it). Without it every call is a no-op in C, and the
annotation layer does not even install its hooks; see :func:`collector_attached`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import importlib.metadata
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Emitter", "NvtxDroppedWarning", "collector_attached", "load_emitter"]

_INJECTION_VARS = ("NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH")


class NvtxDroppedWarning(UserWarning):
    """NVTX ranges are being lost: a collector is attached but nothing can reach it."""


@dataclass(frozen=True)
class Emitter:
    """The calls the annotation layer needs, plus where they come from (for messages).

    ``push_ascii`` takes the message already encoded as ASCII bytes; with the C API it is the
    ctypes function itself, so the hot paths (ops, modules, backward nodes) call C with no
    Python frame in between. Emitters without one get a decoding wrapper from :meth:`ascii_push`.
    """

    push: Callable[[str], object]
    pop: Callable[[], object]
    source: str
    push_ascii: Callable[[bytes], object] | None = None

    def ascii_push(self) -> Callable[[bytes], object]:
        """Push taking ASCII bytes: ``push_ascii`` when there is one, else ``push`` after decoding."""
        if self.push_ascii is not None:
            return self.push_ascii
        push = self.push

        def push_decoded(message: bytes) -> object:
            return push(message.decode("ascii", "replace"))

        return push_decoded


def collector_attached() -> bool:
    """True when a tool (nsys, or a test injection library) will receive NVTX calls."""
    return any(os.environ.get(var) for var in _INJECTION_VARS)


def _ctypes_candidates() -> list[str]:
    """Shared libraries exporting the NVTX C API, most likely first."""
    found: list[str] = []
    try:
        package = importlib.import_module("nvidia.nvtx")  # optional wheel, untyped
        for base in package.__path__:
            lib = Path(base) / "lib" / "libnvtx3interop.so.1"
            if lib.exists():
                found.append(str(lib))
    except ImportError:
        pass
    for name in ("nvtx3interop", "nvToolsExt"):
        path = ctypes.util.find_library(name)
        if path:
            found.append(path)
    return found


def _ctypes_emitter() -> Emitter | None:
    """Bind nvtxRangePushA / nvtxRangePop from the first loadable NVTX library."""
    for path in _ctypes_candidates():
        try:
            lib = ctypes.CDLL(path)
            push_a = lib.nvtxRangePushA
            pop_fn = lib.nvtxRangePop
        except (OSError, AttributeError):
            continue
        # No argtypes: ctypes passes bytes as char* directly, and skipping the converters is
        # measurably cheaper on a call made twice per op.
        push_a.restype = ctypes.c_int
        pop_fn.restype = ctypes.c_int

        def push(message: str, _push: Callable[[bytes], int] = push_a) -> int:
            return _push(message.encode("ascii", "replace"))

        return Emitter(push=push, pop=pop_fn, source=f"ctypes:{path}", push_ascii=push_a)
    return None


def _nvtx_package_emitter() -> Emitter | None:
    """Drive nvtx._lib directly: no domain-enabled check, no message cache."""
    try:
        nvtx_lib = importlib.import_module("nvtx._lib.lib")  # optional, untyped Cython module
    except ImportError:
        return None
    domain = nvtx_lib.DomainHandle(None)  # NULL handle: the global domain, like nvtxRangePushA
    event_attributes = nvtx_lib.EventAttributes
    string_handle = nvtx_lib.StringHandle
    push_range = nvtx_lib.push_range
    pop_range = nvtx_lib.pop_range

    class _Message:
        """Duck-types nvtx's RegisteredString (it only reads ``.handle``) without caching it."""

        __slots__ = ("handle",)

        def __init__(self, text: str) -> None:
            self.handle = string_handle(domain, text)

    def push(message: str) -> None:
        push_range(event_attributes(_Message(message), "white"), domain)

    def pop() -> None:
        pop_range(domain)

    version = _dist_version("nvtx")
    return Emitter(push=push, pop=pop, source=f"nvtx=={version} (low-level API)")


def _dist_version(name: str) -> str:
    """Installed version of a distribution, or '?' when unknown."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _noop(*_args: object) -> None:
    """Stands in for push/pop when nothing can emit."""


NOOP = Emitter(push=_noop, pop=_noop, source="none", push_ascii=_noop)

_cached: Emitter | None = None
_warned = False


def warn_dropped(reason: str) -> None:
    """Warn once per process, loudly, that ranges are not reaching the collector."""
    global _warned
    if _warned:
        return
    _warned = True
    warnings.warn(
        f"nvbridge.emit_nvtx: NVTX ranges are being DROPPED: {reason}",
        NvtxDroppedWarning,
        stacklevel=3,
    )


def load_emitter(prefer: str = "auto") -> Emitter:
    """Return the process-wide emitter, choosing it on first use.

    Args:
        prefer: ``"auto"`` (ctypes C API, then the nvtx package), ``"ctypes"`` or ``"nvtx"``.

    Returns:
        An :class:`Emitter`; :data:`NOOP` if no NVTX library is importable. When a collector is
        attached in that case, :class:`NvtxDroppedWarning` is issued once.
    """
    global _cached
    if _cached is not None and prefer == "auto":
        return _cached
    order = {"auto": ("ctypes", "nvtx"), "ctypes": ("ctypes",), "nvtx": ("nvtx",)}[prefer]
    emitter: Emitter | None = None
    for kind in order:
        emitter = _ctypes_emitter() if kind == "ctypes" else _nvtx_package_emitter()
        if emitter is not None:
            break
    if emitter is None:
        if collector_attached():
            warn_dropped(
                "a collector is attached but no NVTX library could be loaded; "
                "install 'nvidia-nvtx-cu12' (C API, preferred) or 'nvtx'"
            )
        emitter = NOOP
    if prefer == "auto":
        _cached = emitter
    return emitter
