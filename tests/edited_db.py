"""Edited copies of a sample export for the readers' tests (tests/test_readers_validation.py,
tests/test_readers_files.py): the sample, SQL naming its first kernel and first range, and a copy
with SQL applied."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from tests.conftest import SAMPLE_DB

GPU_SAMPLE = SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite"
K = "CUPTI_ACTIVITY_KIND_"
RANGE = 'eventType IN (59, 60, 70, 71) AND "end" IS NOT NULL'


def edited(tmp_path: Path, *sql: str, src: Path = GPU_SAMPLE, relax: str | None = None) -> Path:
    """A copy of ``src`` with ``sql`` applied; ``relax`` drops that table's NOT NULL constraints
    first (a damaged file can hold what the exporter's schema forbids)."""
    dst = tmp_path / src.name
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    if relax:
        cols = ", ".join(f'"{n}" {t}' for _, n, t, *_ in con.execute(f"PRAGMA table_info({relax})"))
        con.executescript(
            f"CREATE TABLE x ({cols}); INSERT INTO x SELECT * FROM {relax}; DROP TABLE {relax};"
            f"ALTER TABLE x RENAME TO {relax};"
        )
    for stmt in sql:
        con.execute(stmt)
    con.commit()
    con.close()
    return dst


FIRST_KERNEL = f"rowid = (SELECT min(rowid) FROM {K}KERNEL)"
FIRST_RANGE = f"rowid = (SELECT min(rowid) FROM NVTX_EVENTS WHERE {RANGE})"
