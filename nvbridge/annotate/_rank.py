"""The rank mark: which distributed rank this process is, written into the capture once.

Where one Nsight Systems session records several processes (``nsys profile torchrun ...``,
``mp.spawn``), nothing in the export says which process is which rank; the reader would have to
guess from GPU order. So emit_nvtx writes one NVTX mark in the ``nvbridge`` domain when it starts:
``rank <rank> <world_size> <local_rank>`` (decimal, ``-1`` for a field nobody knows), an ASCII
message (never a registered string). ``nvbridge.readers.nsys_rank_marks`` reads it back.

Sources, the first that names the rank wins and gives all three fields:

1. ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` (torchrun, torch.distributed.launch, most launchers);
2. ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID`` (``srun``);
3. ``OMPI_COMM_WORLD_RANK``/``_SIZE``/``_LOCAL_RANK`` (Open MPI), ``PMI_RANK``/``PMI_SIZE``/
   ``MPI_LOCALRANKID`` (MPICH, Intel MPI);
4. ``torch.distributed`` when it is initialized (``mp.spawn`` passes the rank as an argument,
   so only the process group knows it).

The mark is written again only if what it would say changed (a process that entered emit_nvtx
before ``init_process_group`` and again after it): the reader keeps each process's last mark
that names a rank.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import threading
from collections.abc import Mapping

from nvbridge.annotate import _nvtx_lib

__all__ = ["DOMAIN", "mark_rank", "rank_fields", "rank_message"]

DOMAIN = "nvbridge"
ENV_SOURCES = (
    ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
)

_lock = threading.Lock()
_last: str | None = None  # the message this process last wrote


def _int(text: str | None) -> int:
    return int(text) if text is not None and text.strip().isdigit() else -1


def _from_torch() -> tuple[int, int, int]:
    """The initialized process group's rank and size (no local rank: torch has none)."""
    try:
        dist = importlib.import_module("torch.distributed")
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size()), -1
    except (ImportError, RuntimeError, ValueError):
        pass
    return -1, -1, -1


def rank_fields(environ: Mapping[str, str] | None = None) -> tuple[int, int, int]:
    """(rank, world_size, local_rank) of this process, -1 for what is unknown."""
    env = os.environ if environ is None else environ
    for rank_var, size_var, local_var in ENV_SOURCES:
        rank = _int(env.get(rank_var))
        if rank >= 0:
            return rank, _int(env.get(size_var)), _int(env.get(local_var))
    return _from_torch()


def rank_message(fields: tuple[int, int, int]) -> str:
    return "rank {} {} {}".format(*fields)


class _Attributes(ctypes.Structure):
    """nvtxEventAttributes_t (NVTX 3, 48 bytes): an ASCII message, nothing else set."""

    _fields_ = [
        ("version", ctypes.c_uint16),
        ("size", ctypes.c_uint16),
        ("category", ctypes.c_uint32),
        ("colorType", ctypes.c_int32),
        ("color", ctypes.c_uint32),
        ("payloadType", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        ("payload", ctypes.c_uint64),
        ("messageType", ctypes.c_int32),
        ("message", ctypes.c_char_p),
    ]


_NVTX_VERSION = 3
_MESSAGE_TYPE_ASCII = 1


def _mark_ctypes(message: str) -> bool:
    """nvtxDomainCreateA + nvtxDomainMarkEx through the C API (the same library emit_nvtx uses)."""
    for path in _nvtx_lib._ctypes_candidates():
        try:
            lib = ctypes.CDLL(path)
            create, mark = lib.nvtxDomainCreateA, lib.nvtxDomainMarkEx
        except (OSError, AttributeError):
            continue
        create.restype = ctypes.c_void_p
        create.argtypes = [ctypes.c_char_p]
        mark.restype = None
        mark.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Attributes)]
        text = message.encode("ascii")
        attrs = _Attributes(_NVTX_VERSION, ctypes.sizeof(_Attributes), messageType=_MESSAGE_TYPE_ASCII, message=text)
        mark(create(DOMAIN.encode("ascii")), ctypes.byref(attrs))
        return True
    return False


def _mark_nvtx_package(message: str) -> bool:
    """The ``nvtx`` package's mark (one registered string per process: nothing grows)."""
    try:
        nvtx = importlib.import_module("nvtx")
    except ImportError:
        return False
    nvtx.mark(message=message, domain=DOMAIN)
    return True


def mark_rank() -> str | None:
    """Write the rank mark if a collector is attached and this process has not said the same
    already; returns the message written (None: nothing written)."""
    global _last
    if not _nvtx_lib.collector_attached():
        return None
    message = rank_message(rank_fields())
    with _lock:
        if message == _last:
            return None
        if not (_mark_ctypes(message) or _mark_nvtx_package(message)):
            return None
        _last = message
    return message
