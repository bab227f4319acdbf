"""A table without the columns that carry its meaning is refused (issue 24, item 6).

With ``NVTX_EVENTS.text`` renamed away, a conversion exited 0 with 16,693 ops whose names were
null; without a correlation id or a process, every GPU op read as launched by nothing. The
classes, for every table nvbridge reads: the times (start, end), what names a row (NVTX text and
textId, the API call's nameId or cbid, the kernel's name id), the thread or process it belongs
to, the correlation id that links a GPU op to its launch, the device and stream it ran on, and a
copy's size and direction. Dropping any one of them must give the one-line refusal naming table
and column, from the whole-file reader and from convert's streamed path, and write nothing.

The lists below are this test's own reading of the schemas (docs/dataset.md, SCHEMA.md), not
the readers' Column tables. Columns older exporters lack (KERNEL.mangledName before 2023,
RUNTIME.eventClass in 2019) stay optional: test_readers_validation.py reads files without them.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import nvbridge
from nvbridge.errors import MissingTable
from nvbridge.readers import read_profile
from tests.conftest import real_db

K = "CUPTI_ACTIVITY_KIND_"
NSYS = "nsys-2024.2-pyprof-markers.sqlite"  # every table below, each with rows
NVPROF = "nvprof-2020-pytorch14-pyprof-lm.sqlite"
DRIVER = "nvprof-2021-mxnet-driver.nvvp"  # the one export with driver API rows
GPU = ["start", "end", "deviceId", "streamId", "correlationId"]
API = ["start", "end", "correlationId"]
REQUIRED: dict[str, dict[str, list[str]]] = {
    NSYS: {
        "NVTX_EVENTS": ["start", "end", "eventType", "text", "textId", "globalTid"],
        K + "RUNTIME": [*API, "nameId", "globalTid"],
        K + "KERNEL": [*GPU, "globalPid", "demangledName"],
        K + "MEMCPY": [*GPU, "globalPid", "bytes", "copyKind"],
        K + "MEMSET": [*GPU, "globalPid", "bytes"],
        K + "SYNCHRONIZATION": ["start", "end", "correlationId", "globalPid"],
        "StringIds": ["id", "value"],
        "ThreadNames": ["nameId", "globalTid"],
    },
    NVPROF: {
        K + "MARKER": ["flags", "timestamp", "id", "objectId", "name"],
        K + "RUNTIME": [*API, "cbid", "processId", "threadId"],
        K + "CONCURRENT_KERNEL": [*GPU, "name"],
        K + "MEMCPY": [*GPU, "bytes", "copyKind"],
        K + "MEMSET": [*GPU, "bytes"],
        K + "SYNCHRONIZATION": ["start", "end", "correlationId"],
        K + "NAME": ["objectKind", "objectId", "name"],
        K + "DEVICE": ["id", "name"],
        "StringTable": ["_id_", "value"],
    },
    DRIVER: {K + "DRIVER": [*API, "cbid", "processId", "threadId"]},
}
CASES = [(base, table, col) for base, tables in REQUIRED.items() for table, cols in tables.items() for col in cols]


def without(src: Path, dst: Path, table: str, column: str) -> Path:
    """A copy of ``src`` whose ``table`` lacks ``column`` (the table rebuilt from its other
    columns: DROP COLUMN refuses columns an index or constraint names)."""
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    try:
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
        assert column in cols and con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] > 0
        keep = ", ".join(f'"{c}"' for c in cols if c != column)
        con.executescript(
            f'CREATE TABLE nvb_x AS SELECT {keep} FROM "{table}"; DROP TABLE "{table}"; '
            f'ALTER TABLE nvb_x RENAME TO "{table}";'
        )
        con.commit()
    finally:
        con.close()
    return dst


@pytest.mark.parametrize(("base", "table", "column"), CASES)
def test_a_table_without_a_column_that_carries_its_meaning_is_refused(
    base: str, table: str, column: str, tmp_path: Path
) -> None:
    path = without(real_db(base), tmp_path / base, table, column)
    message = f"{base}: table {table} has no column {column}; "
    with pytest.raises(MissingTable) as err:
        read_profile(path)
    assert str(err.value).startswith(message)
    out = tmp_path / "ds"
    with pytest.raises(MissingTable) as err:
        nvbridge.convert(path, out)  # nsys: the streamed path
    assert str(err.value).startswith(message)
    assert sorted(p.name for p in tmp_path.iterdir()) == [base]  # nothing written


def test_the_cli_refuses_a_missing_nvtx_text_in_one_line(tmp_path: Path) -> None:
    """The issue's case: NVTX_EVENTS.text renamed away; exit 0 with null names before."""
    path = real_db(NSYS)
    copy = tmp_path / NSYS
    shutil.copyfile(path, copy)
    con = sqlite3.connect(copy)
    con.execute("ALTER TABLE NVTX_EVENTS RENAME COLUMN text TO text_gone")
    con.commit()
    con.close()
    proc = subprocess.run(
        [sys.executable, "-m", "nvbridge", "convert", str(copy), "-o", str(tmp_path / "ds")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert proc.stderr == (
        f"Error: {NSYS}: table NVTX_EVENTS has no column text; this export is incomplete, export it again "
        "without --tables filters.\n"
    )
    assert not (tmp_path / "ds").exists()
