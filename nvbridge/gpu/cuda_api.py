"""What a CUDA API call does to the calling thread, read from its name.

A call's name is stable across profiler versions (nsys adds a ``_vNNNNN`` suffix, nvprof stores a
callback id that the nvprof reader turns into the same name); the codes exports attach to
synchronization records are not (SCHEMA.md 1.5: a 2022.1 export stores cudaStreamWaitEvent and
cudaStreamSynchronize both as 3, a 2025.1 export 0 on every row). So whether the host blocked
is decided here, by the call, once per distinct name:

- ``SYNC``: waits for the GPU (device, context, stream or event synchronize). The thread was
  blocked for the call's duration.
- ``SYNC_COPY``: a synchronous memcpy (``cudaMemcpy``, ``cudaMemcpy2D``, ``cuMemcpyDtoH_v2``, ...,
  not ``*Async``): it returns when the copy is done (the CUDA runtime's "API synchronization
  behavior"; peer copies excepted: ``cudaMemcpyPeer`` is asynchronous to the host).
- ``ASYNC_COPY``: ``*MemcpyAsync`` and peer copies; they block only when the host side is
  pageable memory, which is a fact of the copy, not of the name.
- ``LAUNCH``: puts GPU work in a stream (kernel, graph or host-function launches, memsets).
- ``SETUP``: creates a context or loads code (``cuInit``, ``cuCtxCreate``,
  ``cuDevicePrimaryCtxRetain``, ``cuModuleLoad*``, ``cuLibraryLoad*``, ``cuLink*``): start-up.
- ``NO_WAIT``: looks like a sync but does not block the host: ``cudaStreamWaitEvent`` makes a
  stream wait for an event on the GPU, ``cudaEventQuery``/``cudaStreamQuery`` only poll.
- ``OTHER``: everything else (``cudaGetDevice``, ``cudaMalloc``, ``cudaEventRecord``, an nvprof
  callback id the reader has no name for).
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nvbridge.columns import one_chunk

OTHER, SYNC, SYNC_COPY, ASYNC_COPY, LAUNCH, SETUP, NO_WAIT = range(7)
CLASS_NAMES = ("other", "sync", "sync copy", "async copy", "launch", "setup", "no wait")

# nsys: cudaStreamSynchronize_v3020, cudaLaunchKernel_ptsz_v7000; the driver's own _v2 goes too.
_SUFFIX = re.compile(r"(?:_v\d+|_ptsz|_ptds)+$")
_SYNC = re.compile(r"^(?:cuda(?:Device|Thread|Stream|Event)Synchronize|cu(?:Ctx|Stream|Event)Synchronize)$")
_NO_WAIT = re.compile(r"^cu(?:da)?(?:StreamWaitEvent|EventQuery|StreamQuery)$")
_COPY = re.compile(r"^cu(?:da)?Memcpy")
_LAUNCH = re.compile(r"^cu(?:da)?(?:Launch|GraphLaunch)|^cu(?:da)?Memset")
_SETUP = re.compile(r"^cu(?:Init|CtxCreate|DevicePrimaryCtxRetain|ModuleLoad|LibraryLoad|Link(?:Create|Add|Complete))")


def base_name(name: str) -> str:
    """``cudaStreamSynchronize_v3020`` -> ``cudaStreamSynchronize`` (what nvprof calls it)."""
    return _SUFFIX.sub("", name)


def classify(name: str | None) -> int:
    """The class of one API name (see the module docstring)."""
    if not name:
        return OTHER
    base = base_name(name)
    if _SYNC.match(base):
        return SYNC
    if _NO_WAIT.match(base):
        return NO_WAIT
    if _COPY.match(base):
        return ASYNC_COPY if "Async" in base or "Peer" in base else SYNC_COPY
    if _LAUNCH.match(base):
        return LAUNCH
    if _SETUP.match(base):
        return SETUP
    return OTHER


def classes(names: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Class of each name (int8), classifying each distinct name once."""
    arr = one_chunk(names)
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr.cast(pa.string()))
    by_value = np.array([classify(v) for v in arr.dictionary.to_pylist()] + [OTHER], np.int8)
    idx = arr.indices.fill_null(len(by_value) - 1).to_numpy(zero_copy_only=False)
    out: np.ndarray = by_value[np.asarray(idx, np.int64)]
    return out


def base_names(names: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Each name without its version suffix, as a NumPy object array (per distinct name)."""
    arr = one_chunk(names)
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr.cast(pa.string()))
    values = np.array([base_name(v) if v else "" for v in arr.dictionary.to_pylist()] + [""], dtype=object)
    idx = arr.indices.fill_null(len(values) - 1).to_numpy(zero_copy_only=False)
    out: np.ndarray = values[np.asarray(idx, np.int64)]
    return out


def blocks_host(cls: np.ndarray) -> np.ndarray:
    """Calls during which the host waited for the GPU, by name alone: syncs and synchronous
    copies."""
    out: np.ndarray = (cls == SYNC) | (cls == SYNC_COPY)
    return out
