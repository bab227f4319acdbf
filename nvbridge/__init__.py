"""nvbridge: PyTorch-level answers from Nsight Systems and nvprof profiles.

``convert`` turns a profiler database into a Parquet dataset; ``load`` opens one (or a
report directly) as Arrow/pandas tables; ``emit_nvtx`` (needs ``nvbridge[torch]``)
annotates a PyTorch run for the profiler.
"""

from __future__ import annotations

import os
import sys
from typing import Any

# Arrow's allocator (mimalloc) hands freed pages back to the system only after a delay: a
# streamed conversion frees a window's buffers every few milliseconds, and at 10M NVTX rows the
# delay kept 0.2-0.3 GB of them resident. Set before pyarrow loads, when nvbridge loads it.
if "pyarrow" not in sys.modules:
    os.environ.setdefault("MIMALLOC_PURGE_DELAY", "0")

from nvbridge._version import __version__
from nvbridge.analysis import Summary, summarize
from nvbridge.conversion import ConversionResult, convert
from nvbridge.dataset import Report, load
from nvbridge.errors import (
    CorrelationError,
    DamagedDatabase,
    DamagedDataset,
    ExportError,
    InputError,
    MissingDependency,
    MissingTable,
    NotAProfileDatabase,
    NvbridgeError,
)
from nvbridge.export.trace import export_chrome_trace

__all__ = [
    "ConversionResult",
    "CorrelationError",
    "DamagedDatabase",
    "DamagedDataset",
    "ExportError",
    "InputError",
    "MissingDependency",
    "MissingTable",
    "NotAProfileDatabase",
    "NvbridgeError",
    "Report",
    "Summary",
    "__version__",
    "convert",
    "emit_nvtx",
    "export_chrome_trace",
    "load",
    "load_nvprof",
    "summarize",
]


def __getattr__(name: str) -> Any:
    # emit_nvtx imports torch; keep `import nvbridge` free of it (PEP 562).
    if name == "load_nvprof":
        try:
            from nvbridge.torch_compat import load_nvprof
        except ImportError as exc:
            raise MissingDependency(
                f"nvbridge.load_nvprof needs torch ({exc}); install it with: pip install torch"
            ) from exc
        return load_nvprof
    if name == "emit_nvtx":
        try:
            from nvbridge.annotate import emit_nvtx
        except ImportError as exc:
            raise ImportError(
                f"nvbridge.emit_nvtx needs torch ({exc}); install it with: pip install 'nvbridge[torch]'"
            ) from exc
        return emit_nvtx
    raise AttributeError(f"module 'nvbridge' has no attribute {name!r}")
