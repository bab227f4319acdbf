"""Annotate a PyTorch run with NVTX ranges for Nsight Systems (the only part importing torch).

``emit_nvtx()`` makes every aten op, autograd backward node and ``nn.Module`` call an NVTX range
named in torch 2.x's grammar; ``range("label")`` adds your own; ``emit_nvtx().step()`` marks
``ProfilerStep#N``. Works on CPU-only builds of torch, where torch's own ``emit_nvtx`` fails.
"""

from __future__ import annotations

from nvbridge.annotate._memory import MemoryNotRecordedWarning
from nvbridge.annotate._nvtx_lib import NvtxDroppedWarning
from nvbridge.annotate._range import nvtx_range
from nvbridge.annotate._session import emit_nvtx

range = nvtx_range  # noqa: A001 - public name mirrors nvtx.annotate / record_function usage

__all__ = ["MemoryNotRecordedWarning", "NvtxDroppedWarning", "emit_nvtx", "range"]
