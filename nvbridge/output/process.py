"""The command line's own process: Arrow's memory pool, malloc's arenas, pyarrow without pandas.

Set once, before the command's modules load (``nvbridge.__main__`` calls :func:`set_up_process`
before it imports ``nvbridge.cli``): modules loaded before the pools are set, the readers among
them, tripled a 2M-row conversion's page faults (docs/benchmarks.md). Only the command's own
process is changed; the library leaves a host program's pools alone.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys

_done = False


def set_up_process() -> None:
    """Arrow's pool and malloc's arenas set, pyarrow kept from importing pandas (once)."""
    global _done
    if _done:
        return
    _done = True
    _set_allocators()
    _skip_pandas_integration()


def _set_allocators() -> None:
    """Arrow's buffers from jemalloc, purged as soon as they are freed; glibc's malloc (NumPy's,
    the compiled reader's) with one arena.

    mimalloc, Arrow's default, backs its arenas with transparent huge pages and hands freed ones
    back to the kernel, so a conversion that allocates and frees hundreds of MB makes the kernel
    zero fresh 2 MB pages over and over (a third of all CPU time on a 2-core VM). In glibc's heap
    beside NumPy's arrays, Arrow's buffers fragmented it: at 50M NVTX rows the heap held 150-250
    MB free between live blocks (peak 620-700 MB). jemalloc keeps Arrow's apart: 575 MB, with a
    third fewer page faults (measured in docs/benchmarks.md). Where pyarrow was built without
    jemalloc, Arrow allocates through malloc. Only the command's own process is changed; the
    library leaves a host program's pool alone.
    """
    import pyarrow as pa

    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
        pa.jemalloc_set_decay_ms(0)
    except NotImplementedError:
        pa.set_memory_pool(pa.system_memory_pool())
    # One malloc arena for every thread: the reader threads' buffers, freed by the main
    # thread, are then reused by the next window instead of lingering in per-thread arenas
    # (at 10M NVTX rows: 12 s instead of 14-16 s, and 300 MB less peak memory).
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-8, 1)  # M_ARENA_MAX (glibc)


class _NoPandas(importlib.abc.MetaPathFinder):
    """An import hook that reports pandas as absent."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas":
            raise ModuleNotFoundError("pandas is not used by nvbridge's commands", name=name)


def _skip_pandas_integration() -> None:
    """Keep pyarrow from importing pandas in the command's process.

    pyarrow imports all of pandas, when it is installed, at its first array conversion, to
    recognise pandas objects: 0.4 s of CPU at every start and 40 MB (at 2M NVTX rows, 5.4 s of
    CPU for a conversion became 5.0 s). No command hands pandas objects to pyarrow. pyarrow
    asks once and keeps the answer; ``import pandas`` and ``to_pandas()`` still work after.
    """
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(finder)
