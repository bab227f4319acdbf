"""The correlation engine: NVTX ranges -> CUDA API calls -> GPU ops, columnar and pure.

No I/O, no SQLAlchemy, no torch. It takes windows (:class:`nvbridge.readers.raw.Window`) and hands
back finished rows (:class:`~nvbridge.engine.model.WindowRows`) or, where the reader's windows
cannot carry the report, a :class:`~nvbridge.readers.raw.Restart`. Modules, in the order a window
goes through them:

- ``keys``: GPU ops and syncs find their API call by (process, correlation id);
- ``window``: one window's steps as pure functions (order, nest, attribute, roll up, rows);
- ``correlator``: :class:`Correlator` keeps what carries between windows;
- ``activity``: API calls and GPU ops as they stream (GPU ops waiting for their launch's
  window, rows put back in table order);
- ``invariants``: what must hold before anything is written;
- ``tables``: the small tables; ``model``: the results and their flags;
- ``passes``: :func:`correlate`, the engine over a whole report as one window.
"""

from __future__ import annotations

from nvbridge.engine.correlator import Correlator, parse_names
from nvbridge.engine.invariants import check
from nvbridge.engine.model import BY_TIME, CROSS_THREAD, CROSSING, NO_API_CALL, OPEN_AT_END, Model, WindowRows
from nvbridge.engine.passes import correlate
from nvbridge.engine.tables import devices_table

__all__ = [
    "BY_TIME",
    "CROSSING",
    "CROSS_THREAD",
    "NO_API_CALL",
    "OPEN_AT_END",
    "Correlator",
    "Model",
    "WindowRows",
    "check",
    "correlate",
    "devices_table",
    "parse_names",
]
