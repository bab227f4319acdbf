"""The correlation engine: NVTX ranges -> CUDA API calls -> GPU ops, columnar and pure.

No I/O, no SQLAlchemy, no torch. Modules, in the order a window goes through them:

- ``keys``: GPU ops and syncs find their API call by (process, correlation id);
- ``window``: one window's steps as pure functions (order, nest, attribute, roll up, rows);
- ``correlator``: :class:`Correlator` keeps what carries between windows;
- ``passes``: :func:`stream` feeds it windows, :func:`correlate` gives it the whole report as one;
- ``activity``: API calls and GPU ops as they stream (GPU ops waiting for their launch's
  window, rows put back in table order);
- ``invariants``: what must hold before anything is written;
- ``tables``: API calls, GPU ops and the small tables; ``model``: the result and its flags.
"""

from __future__ import annotations

from nvbridge.engine.correlator import Correlator, capture_end, with_parsed_names
from nvbridge.engine.invariants import check
from nvbridge.engine.model import BY_TIME, CROSS_THREAD, CROSSING, NO_API_CALL, OPEN_AT_END, Model
from nvbridge.engine.passes import correlate, stream, whole_activity
from nvbridge.engine.tables import devices_table, other_tables

__all__ = [
    "BY_TIME",
    "CROSSING",
    "CROSS_THREAD",
    "NO_API_CALL",
    "OPEN_AT_END",
    "Correlator",
    "Model",
    "capture_end",
    "check",
    "correlate",
    "devices_table",
    "other_tables",
    "stream",
    "whole_activity",
    "with_parsed_names",
]
