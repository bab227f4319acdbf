"""nvbridge: PyTorch-level answers from Nsight Systems and nvprof profiles.

``convert`` turns a profiler database into a Parquet dataset; ``load`` opens one (or a
report directly) as Arrow/pandas tables; ``emit_nvtx`` (needs ``nvbridge[torch]``)
annotates a PyTorch run for the profiler.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from nvbridge._version import __version__
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

if TYPE_CHECKING:
    from nvbridge.analysis.report import Report, load
    from nvbridge.analysis.summarize import Summary, summarize
    from nvbridge.conversion.many import convert
    from nvbridge.conversion.memory import export_chrome_trace
    from nvbridge.conversion.result import ConversionResult
    from nvbridge.page import report

# Loaded at first use (PEP 562): `import nvbridge` stays cheap, so a training script that only
# annotates does not load pyarrow, and the command line can take Ctrl-C quietly from its first
# instant (nvbridge/__main__.py) instead of printing a traceback from inside an import.
_LAZY = {
    "Summary": "nvbridge.analysis.summarize",
    "summarize": "nvbridge.analysis.summarize",
    "ConversionResult": "nvbridge.conversion.result",
    "convert": "nvbridge.conversion.many",
    "Report": "nvbridge.analysis.report",
    "load": "nvbridge.analysis.report",
    "export_chrome_trace": "nvbridge.conversion.memory",
    "report": "nvbridge.page",
}

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
    "report",
    "summarize",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        if "IPython" in sys.modules:  # a notebook: Report, Summary, findings and Diff display as pages
            importlib.import_module("nvbridge.page")  # registers the renderers (nvbridge/output/rich.py)
        globals()[name] = value
        return value
    # emit_nvtx imports torch; keep `import nvbridge` free of it (PEP 562).
    if name == "load_nvprof":
        try:
            from nvbridge.analysis.torch_compat import load_nvprof
        except ImportError as exc:
            raise MissingDependency(
                f"nvbridge.load_nvprof needs torch ({exc}); install it with: pip install torch"
            ) from exc
        return load_nvprof
    if name == "emit_nvtx":
        try:
            from nvbridge.annotate import emit_nvtx
        except ImportError as exc:
            raise MissingDependency(
                f"nvbridge.emit_nvtx needs torch ({exc}); install it with: pip install 'nvbridge[torch]'"
            ) from exc
        return emit_nvtx
    raise AttributeError(f"module 'nvbridge' has no attribute {name!r}")
