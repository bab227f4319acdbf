"""Profiler database readers: detect the schema from the tables, then read it.

The file extension means nothing (nvprof writes the same SQLite as .nvvp, .prof or .sql),
so detection looks only at table names, as NVIDIA's PyProf did.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pyarrow as pa

from nvbridge.errors import NotAProfileDatabase
from nvbridge.readers import nsys, nvprof
from nvbridge.readers import whole as one_window
from nvbridge.readers._db import Database
from nvbridge.readers.nsys_source import NsysWindows
from nvbridge.readers.nsys_tables import require_columns
from nvbridge.readers.raw import RawProfile, SourceKind, WindowSource
from nvbridge.readers.sources import estimate_rows, exported

# A local file never loads SQLAlchemy or ConnectorX. The command line sets its memory pools
# before it imports any of these (nvbridge.__main__, nvbridge.output.process): loaded before
# them, they tripled a conversion's page faults (docs/benchmarks.md).
__all__ = ["detect", "estimate_rows", "exported", "open_windows", "read_profile"]


def detect(db: Database) -> SourceKind:
    """``"nvprof"`` or ``"nsys"`` from the tables of ``db``.

    Raises:
        NotAProfileDatabase: neither schema's tables are present.
    """
    if db.has("StringTable") and db.has("CUPTI_ACTIVITY_KIND_MARKER"):
        return "nvprof"
    if db.has("StringIds"):
        return "nsys"
    raise NotAProfileDatabase(
        f"{db.name} has neither nvprof tables (StringTable, CUPTI_ACTIVITY_KIND_MARKER) nor "
        "Nsight Systems tables (StringIds, NVTX_EVENTS); convert a .nsys-rep with "
        "`nsys export --type sqlite`."
    )


def read_profile(source: str | os.PathLike[str]) -> RawProfile:
    """Open ``source`` read-only, detect its schema and read it into Arrow tables.

    Args:
        source: a file path or an SQLAlchemy URL.

    Returns:
        The normalized profile, with what was detected in ``.info``.

    Raises:
        InputError: the source is not a readable nvprof or Nsight Systems database.
    """
    with Database(source) as db:
        kind = detect(db)
        with db.translate_errors():
            profile = nvprof.read(db) if kind == "nvprof" else nsys.read(db)
    # Give the read buffers back to the OS: NumPy's allocations cannot reuse Arrow's pool.
    pa.default_memory_pool().release_unused()
    return profile


@contextlib.contextmanager
def open_windows(
    source: str | os.PathLike[str],
    window_rows: int,
    *,
    by_start: bool = False,
    horizons: int = 1,
    whole: bool = False,
    marks: bool = False,
) -> Iterator[WindowSource]:
    """Open ``source`` read-only and read it as windows, the strategy chosen up front: a local
    Nsight Systems file streams (:class:`~nvbridge.readers.nsys_source.NsysWindows`: NVTX rows
    in rowid windows of ``window_rows`` rows, or ``by_start`` in slabs of starts; the GPU op
    horizon ``horizons`` times the usual), unless its API calls cannot be numbered a slab at a
    time; anything else, or ``whole``, is read whole as one window
    (:class:`~nvbridge.readers.whole.OneWindow`). ``marks``: the report holds nvbridge's allocator
    marks (a stream's Restart said so), no probe needed.

    Raises:
        InputError: the source is not a readable nvprof or Nsight Systems database.
    """
    with Database(source) as db:
        kind = detect(db)
        with db.translate_errors():
            if kind == "nsys" and db.path is not None and not whole:
                require_columns(db)
                stream = NsysWindows(db, window_rows, by_start=by_start, horizons=horizons, marks=marks)
                if stream.streamable():
                    yield stream
                    return
            profile = nvprof.read(db) if kind == "nvprof" else nsys.read(db)
            # Give the read buffers back to the OS: NumPy's allocations cannot reuse Arrow's pool.
            pa.default_memory_pool().release_unused()
            yield one_window.OneWindow(profile)
