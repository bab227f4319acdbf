"""The engine run on a whole report at once: :func:`correlate`, one window, in memory.

A conversion drives the engine window by window (nvbridge.conversion.pipeline); this is the same
engine over a report read whole, for callers that want the correlated tables and nothing written.
"""

from __future__ import annotations

from nvbridge.engine.correlator import Correlator
from nvbridge.engine.memory import no_rows as memory_rows
from nvbridge.engine.model import Model
from nvbridge.errors import CorrelationError
from nvbridge.readers.raw import RawProfile, Restart
from nvbridge.readers.whole import OneWindow


def correlate(profile: RawProfile) -> Model:
    """Build the op tree and attribute API calls and GPU ops to it, in one window.

    Args:
        profile: the normalized tables a reader produced.

    Returns:
        The model whose tables become the Parquet dataset.
    """
    source = OneWindow(profile)
    engine = Correlator(source.info, source.capture_end_ns, source.syncs, memory=source.has_memory)
    try:
        (window,) = source.windows()
        assert not isinstance(window, Restart), "a report read whole is one window"
        rows = engine.add(window)
        if isinstance(rows, Restart):  # one window holds every launch and forward op
            raise CorrelationError(f"one window could not be correlated: {rows.reason}")
        tables = engine.finish(source.tail())
    finally:
        engine.close()
    memory = rows.memory if rows.memory is not None else memory_rows()[0]
    return Model(profile.info, rows.ops, gpu_ops=rows.gpu_ops, api_calls=rows.api_calls, memory=memory, **tables)
