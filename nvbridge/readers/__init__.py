"""Profiler database readers: detect the schema from the tables, then read it.

The file extension means nothing (nvprof writes the same SQLite as .nvvp, .prof or .sql),
so detection looks only at table names, as NVIDIA's PyProf did.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pyarrow as pa

from nvbridge.errors import NotAProfileDatabase
from nvbridge.readers.raw import RawProfile, SourceKind
from nvbridge.readers.sources import estimate_rows, exported

if TYPE_CHECKING:
    from nvbridge.readers._db import Database

# The readers load only when a database is opened: reading a converted dataset (``nvbridge
# summary out/``) never pays for them; a local file never loads SQLAlchemy or ConnectorX.
__all__ = ["detect", "estimate_rows", "exported", "read_profile"]


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
    from nvbridge.readers import nsys, nvprof
    from nvbridge.readers._db import Database

    with Database(source) as db:
        kind = detect(db)
        with db.translate_errors():
            profile = nvprof.read(db) if kind == "nvprof" else nsys.read(db)
    # Give the read buffers back to the OS: NumPy's allocations cannot reuse Arrow's pool.
    pa.default_memory_pool().release_unused()
    return profile
