"""The RecordFunction observer (``_observer.cpp``): built on first use, cached, driven through ctypes.

Why C++: torch calls RecordFunction observers for exactly the ops torch.profiler records, without
a Python dispatch mode in the way (a mode changes what torch runs, see docs/annotate.md), for
about a microsecond per range. The extension is compiled with ``torch.utils.cpp_extension`` the
first time an annotated block starts under a collector, into a cache directory keyed by the
source, torch and Python versions (``$NVBRIDGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/nvbridge``,
else ``~/.cache/nvbridge``), so later runs only load it. It exposes C functions (no pybind11,
so the build takes seconds, not a minute). NVTX3 is header-only; the headers come from the
``nvidia-nvtx-cu12`` wheel, CUDA, or Nsight Systems' own copy.

When there is no compiler, no ninja or no NVTX header, :func:`load` returns None and says why
in :func:`unavailable_reason`; emit_nvtx then uses the python backend.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib
import os
import shutil
import sys
import threading
from pathlib import Path

import torch

__all__ = ["Observer", "load", "unavailable_reason"]

SOURCE = Path(__file__).with_name("_observer.cpp")
# The allocator reporter of profile_memory (_memory.cpp), built into the same library.
SOURCES = (SOURCE, Path(__file__).with_name("_memory.cpp"))
_NVTX_HEADER = Path("nvtx3") / "nvToolsExt.h"
# NDEBUG as torch's own build has it: without it, header-inlined RecordFunction accessors assert on
# state that a release libtorch never sets (inputs() raises "Called inputs() outside RecordFunction
# start callback" in every start callback).
_CFLAGS = ["-O2", "-DNDEBUG"]
_SYSTEM_NVTX_DIRS = (
    "/usr/local/cuda/include",
    "/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nvtx/include",
    "/opt/nvidia/nsight-systems/target-linux-x64/nvtx/include",
)


class Observer:
    """The loaded extension: start/stop the observer on the calling thread."""

    def __init__(self, lib: ctypes.CDLL, path: Path) -> None:
        self.path = path
        self._start = lib.nvbridge_observer_start
        self._start.argtypes = [ctypes.c_int]
        self._start.restype = ctypes.c_uint64
        self._stop = lib.nvbridge_observer_stop
        self._stop.argtypes = [ctypes.c_uint64]
        self._stop.restype = None
        for name in ("start", "stop", "active"):
            getattr(lib, f"nvbridge_memory_{name}").restype = ctypes.c_int
        lib.nvbridge_memory_events.restype = ctypes.c_uint64
        self.memory_start = lib.nvbridge_memory_start
        self.memory_stop = lib.nvbridge_memory_stop
        self.memory_active = lib.nvbridge_memory_active
        self.memory_events = lib.nvbridge_memory_events

    def start(self, record_shapes: bool) -> int:
        """Observe this thread (and the autograd threads it hands work to); returns a handle."""
        handle: int = self._start(int(record_shapes))
        return handle

    def stop(self, handle: int) -> None:
        """Stop the observer started with ``handle`` (on the thread that started it)."""
        self._stop(handle)


_lock = threading.Lock()
_loaded: Observer | None = None
_reason: str | None = None


def unavailable_reason() -> str | None:
    """Why the observer could not be loaded (None if it was, or was never tried)."""
    return _reason


def nvtx_include_dir() -> Path | None:
    """A directory holding ``nvtx3/nvToolsExt.h``: the nvidia-nvtx wheel first, then CUDA, nsys."""
    candidates: list[Path] = []
    try:
        package = importlib.import_module("nvidia.nvtx")  # optional wheel, untyped
        candidates += [Path(base) / "include" for base in package.__path__]
    except ImportError:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "include")
    candidates += [Path(d) for d in _SYSTEM_NVTX_DIRS]
    candidates.append(Path(torch.__file__).parent / "include")
    return next((d for d in candidates if (d / _NVTX_HEADER).is_file()), None)


def cache_dir() -> Path:
    """Where built extensions live, one subdirectory per source/torch/Python combination."""
    root = os.environ.get("NVBRIDGE_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "nvbridge"


def build_key() -> str:
    """Short hash of everything the binary depends on."""
    digest = hashlib.sha256()
    for source in SOURCES:
        digest.update(source.read_bytes())
    digest.update(f"{torch.__version__}|{sys.version}|{torch.compiled_with_cxx11_abi()}|{_CFLAGS}".encode())
    return digest.hexdigest()[:16]


def load() -> Observer | None:
    """The observer, building it on first use; None (see :func:`unavailable_reason`) if impossible."""
    global _loaded, _reason
    with _lock:
        if _loaded is not None or _reason is not None:
            return _loaded
        try:
            path = _build()
            _loaded = Observer(ctypes.CDLL(str(path)), path)
        except _Unavailable as exc:
            _reason = str(exc)
        except Exception as exc:  # a failed compile (cpp_extension raises RuntimeError & co.)
            _reason = f"building {SOURCE.name} failed: {type(exc).__name__}: {str(exc).strip()[-300:]}"
        return _loaded


class _Unavailable(Exception):
    """A prerequisite for the build is missing (no compiler, ninja or NVTX header)."""


def _build() -> Path:
    """Compile (or find already compiled) the extension; returns the shared library's path."""
    name = f"nvbridge_observer_{build_key()}"
    directory = cache_dir() / name
    lib = directory / f"{name}.so"
    if lib.is_file():
        return lib  # built before: no ninja or compiler needed to load it
    include = nvtx_include_dir()
    if include is None:
        raise _Unavailable("no NVTX3 header (pip install nvidia-nvtx-cu12)")
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        raise _Unavailable("no C++ compiler (install g++)")
    if shutil.which("ninja") is None:
        raise _Unavailable("ninja is not installed (pip install ninja)")
    from torch.utils import cpp_extension

    directory.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(
        name=name,
        sources=[str(source) for source in SOURCES],
        extra_cflags=_CFLAGS,
        extra_include_paths=[str(include)],
        extra_ldflags=["-ldl"],
        build_directory=str(directory),
        is_python_module=False,
        verbose=False,
    )
    if not lib.is_file():
        raise _Unavailable(f"the build left no {lib.name} in {directory}")
    return lib
