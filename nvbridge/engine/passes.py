"""The two ways the engine is run: :func:`stream` feeds it windows as a streamed conversion
reads them, :func:`correlate` gives it a whole report as one window."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col
from nvbridge.engine.correlator import Correlator, capture_end
from nvbridge.engine.model import Model
from nvbridge.engine.tables import other_tables
from nvbridge.readers.raw import RANGES_SCHEMA, RawProfile

# fetch(cut): the API calls starting before ``cut`` (None: all) not fetched before, and the GPU
# ops read since (through the window's horizon, :mod:`nvbridge.engine.activity`).
Fetch = Callable[[int | None], tuple[pa.Table, pa.Table]]


def stream(engine: Correlator, windows: Iterable[pa.Table], fetch: Fetch) -> Iterator[pa.Table]:
    """Feed windows of ranges read in export order to ``engine``, with the API calls and GPU
    ops ``fetch`` gives for each cut; yields finished ops rows.

    Each window is cut at its latest start: the ranges starting there wait for the next
    window, so equal starts are never split (ties order by thread, which the engine sorts).
    The engine's worker stops however the stream ends.

    Raises:
        NotStreamable: a window holds a range that starts before an earlier window's cut.
    """
    try:
        held: pa.Table | None = None
        for part in windows:
            if held is not None and held.num_rows:
                # Two chunks, not a copy of the window: the engine makes one chunk per column as
                # it prepends the ranges it carries, one copy for both.
                part = pa.concat_tables([held.cast(part.schema), part])
            if part.num_rows == 0:
                continue
            start = np_col(part, "start_ns")
            cut = int(start.max())
            later = start == cut
            tail = int(later.sum())
            if tail == len(start):
                held = part
                continue
            if later[-tail:].all():  # the usual case, sorted rows: slices, no copies
                now, held = part.slice(0, len(start) - tail), part.slice(len(start) - tail)
            else:
                now, held = part.filter(pa.array(~later)), part.filter(pa.array(later))
            yield engine.add(now, cut, *fetch(cut))
        yield engine.add(held if held is not None else RANGES_SCHEMA.empty_table(), None, *fetch(None))
        engine.finish()
    finally:
        engine.close()


def whole_activity(api: pa.Table, gpu: pa.Table) -> tuple[pa.Table, pa.Table]:
    """A reader's whole API call and GPU op tables as one window takes them: ids in table order."""
    api = api.append_column("api_call_id", pa.array(np.arange(api.num_rows, dtype=np.int64)))
    gpu = gpu.append_column("table_index", pa.array(np.zeros(gpu.num_rows, np.int64)))
    return api, gpu.append_column("rowid", pa.array(np.arange(gpu.num_rows, dtype=np.int64)))


def correlate(profile: RawProfile) -> Model:
    """Build the op tree and attribute API calls and GPU ops to it, in one window.

    Args:
        profile: the normalized tables a reader produced.

    Returns:
        The model whose tables become the Parquet dataset.
    """
    r, api = profile.ranges, profile.api_calls
    times = [np_col(r, "start_ns"), np_col(api, "start_ns"), np_col(api, "end_ns")]
    hi = int(max((int(t.max()) for t in times if len(t)), default=0))
    engine = Correlator(profile.info, capture_end(profile.info, hi), profile.syncs)
    try:
        ops = engine.add(r, None, *whole_activity(api, profile.gpu_ops))
        engine.finish()
        api_calls, gpu_ops = engine.finished()
    finally:
        engine.close()
    return Model(
        profile.info,
        ops,
        gpu_ops=pa.concat_tables(gpu_ops) if gpu_ops else engine.no_gpu_ops(),
        api_calls=api_calls if api_calls is not None else engine.no_api_calls(),
        **other_tables(engine, profile.marks, profile.threads, profile.devices),
    )
