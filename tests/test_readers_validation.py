"""Validation at read (issue #14): impossible rows refused with one line naming table, column and
row count; special files; NVTX rowid gaps; NVTX domains; damage the fuzzer found and non-UTF-8
schemas. WAL, locked and hot-journal databases and exported reports: tests/test_readers_files.py.

Every damaged input is made here, from a copy of a sample_db/ recording (never a real export,
never committed): the damage is synthetic, the expected answer follows from the edit.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import nvbridge
from nvbridge.errors import DamagedDatabase, MissingTable, NotAProfileDatabase
from nvbridge.readers import read_profile
from scripts.hostile.fuzz_readers import apply
from tests.conftest import SAMPLE_DB, raw, real_db
from tests.edited_db import FIRST_KERNEL, FIRST_RANGE, GPU_SAMPLE, RANGE, K, edited

DOMAINS = SAMPLE_DB / "nvtx_domains.sqlite"

# (edit, table to relax or None, the exact message after "<file>: ")
REFUSED = [
    (
        f'UPDATE {K}KERNEL SET "end" = start - 1000 WHERE {FIRST_KERNEL}',
        None,
        f"{K}KERNEL.end is before start in 1 row; the export is damaged or was edited; export the report again.",
    ),
    (
        f"UPDATE {K}KERNEL SET start = -5 WHERE {FIRST_KERNEL}",
        None,
        f"{K}KERNEL.start is negative or beyond 2^62 ns (year 2116) in 1 row; the export is damaged or was edited; "
        "export the report again.",
    ),
    (
        f'UPDATE {K}RUNTIME SET "end" = 9223372036854775807 WHERE rowid <= 8',
        None,
        f"{K}RUNTIME.end is negative or beyond 2^62 ns (year 2116) in 8 rows; the export is damaged or was edited; "
        "export the report again.",
    ),
    (
        f"INSERT INTO {K}KERNEL SELECT * FROM {K}KERNEL WHERE {FIRST_KERNEL}",
        None,
        f"{K}KERNEL holds 1 row duplicated (same device, stream and times); the export is damaged or was edited; "
        "export the report again.",
    ),
    (
        f'UPDATE {K}MEMCPY SET start = 0, "end" = 4611686018427387903',
        None,
        f"{K}MEMCPY: 4 rows last more than 2^50 ns (13 days), longer than any capture; the export is damaged or "
        "was edited; export the report again.",
    ),
    (
        f'UPDATE NVTX_EVENTS SET start = "end", "end" = start WHERE {RANGE} AND "end" > start',
        None,
        "NVTX_EVENTS.end is before start in 210 rows; the export is damaged or was edited; export the report again.",
    ),
    (
        f"UPDATE NVTX_EVENTS SET start = NULL WHERE {FIRST_RANGE}",
        "NVTX_EVENTS",
        "NVTX_EVENTS.start is empty (NULL) in 1 row; the export is damaged or was edited; export the report again.",
    ),
    (
        f"UPDATE NVTX_EVENTS SET eventType = NULL WHERE {FIRST_RANGE}",
        "NVTX_EVENTS",
        "NVTX_EVENTS.eventType is empty (NULL) in 1 row; the export is damaged or was edited; export the report again.",
    ),
    (
        f"UPDATE {K}KERNEL SET correlationId = NULL WHERE {FIRST_KERNEL}",
        None,
        f"{K}KERNEL.correlationId is empty (NULL) in 1 row; the export is damaged or was edited; export the report "
        "again.",
    ),
    (
        f"UPDATE {K}KERNEL SET start = 'soon' WHERE {FIRST_KERNEL}",
        None,
        f"{K}KERNEL.start holds text, a real or a BLOB instead of an integer in 1 row; the export is damaged or was "
        "edited; export the report again.",
    ),
    (
        f"UPDATE {K}RUNTIME SET start = x'00ff' WHERE rowid = 1",
        None,
        f"{K}RUNTIME.start holds text, a real or a BLOB instead of an integer in 1 row; the export is damaged or "
        "was edited; export the report again.",
    ),
    (
        f"UPDATE {K}RUNTIME SET nameId = 987654321 WHERE rowid = 1",
        None,
        f"{K}RUNTIME.nameId names a string that StringIds lacks in 1 row (e.g. id 987654321); the export is "
        "damaged or was edited; export the report again.",
    ),
    (
        f"UPDATE NVTX_EVENTS SET text = NULL, textId = 987654321 WHERE {FIRST_RANGE}",
        None,
        "NVTX_EVENTS.textId names a string that StringIds lacks in 1 row (e.g. id 987654321); the export is "
        "damaged or was edited; export the report again.",
    ),
    (
        "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 'n/a'",
        None,
        "TARGET_INFO_SESSION_START_TIME.utcEpochNs holds 'n/a' instead of an integer; the export is damaged or was "
        "edited; export the report again.",
    ),
]


@pytest.mark.parametrize(("sql", "relax", "message"), REFUSED, ids=[m.split(" ")[0] for _, _, m in REFUSED])
def test_impossible_rows_are_refused_naming_table_column_and_rows(
    tmp_path: Path, sql: str, relax: str | None, message: str
) -> None:
    path = edited(tmp_path, sql, relax=relax)
    with pytest.raises(DamagedDatabase) as err:
        read_profile(path)
    assert str(err.value) == f"{path.name}: {message}"
    # The streamed conversion (convert's path for nsys files) refuses the same way, writing nothing.
    with pytest.raises(DamagedDatabase, match="export the report again"):
        nvbridge.convert(path, tmp_path / "ds")
    assert not (tmp_path / "ds").exists() and not list(tmp_path.glob(".ds.*"))


def test_the_cli_refuses_in_one_line(tmp_path: Path) -> None:
    path = edited(tmp_path, f'UPDATE {K}KERNEL SET "end" = start - 1 WHERE {FIRST_KERNEL}')
    out = subprocess.run(
        [sys.executable, "-m", "nvbridge", "convert", str(path), "-o", str(tmp_path / "ds")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SAMPLE_DB.parent)},
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"Error: {path.name}: {K}KERNEL.end is before start in 1 row; the "
        "export is damaged or was edited; export the report again."
    ]


def test_nvtx_without_end_column_is_refused(tmp_path: Path) -> None:
    path = edited(tmp_path, 'ALTER TABLE NVTX_EVENTS DROP COLUMN "end"')
    with pytest.raises(MissingTable, match="table NVTX_EVENTS has no column end"):
        read_profile(path)


def test_never_closed_ranges_still_read(tmp_path: Path) -> None:
    """NULL end is a range the program never closed, not damage: read, end left null."""
    path = edited(tmp_path, f'UPDATE NVTX_EVENTS SET "end" = NULL WHERE {FIRST_RANGE}')
    assert read_profile(path).ranges.column("end_ns").null_count == 1


def test_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.sqlite"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []
    worker = threading.Thread(
        target=lambda: outcome.append(pytest.raises(NotAProfileDatabase, read_profile, fifo).value), daemon=True
    )
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock the reader so the test run can end, then fail
        with open(fifo, "wb"):
            pass
        pytest.fail("reading a FIFO blocked")
    assert str(outcome[0]) == (
        "pipe.sqlite is not a regular file (a pipe or device); save the export to a file and pass that."
    )


def _tables(folder: Path) -> dict[str, object]:
    return {p.name: pq.read_table(p) for p in sorted(folder.glob("*.parquet")) if p.name != "meta.parquet"}


def test_nvtx_rowid_gap_converts_to_the_same_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rowids with gaps (rows past 100 moved up by 2^40, the last row to 2^62): windows follow rows
    (the rowid span would be 2^45 windows), so with 64-row windows the dataset is the original's."""
    monkeypatch.setattr(importlib.import_module("nvbridge.conversion.pipeline"), "WINDOW_ROWS", 64)
    path = edited(
        tmp_path,
        "UPDATE NVTX_EVENTS SET rowid = rowid + 1099511627776 WHERE rowid > 100",
        "UPDATE NVTX_EVENTS SET rowid = 4611686018427387904 WHERE rowid = (SELECT max(rowid) FROM NVTX_EVENTS)",
    )
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(nvbridge.convert(path, tmp_path / "gap")), daemon=True)
    worker.start()
    worker.join(60)
    assert result, "converting an export with NVTX rowid gaps did not finish in 60 s"
    nvbridge.convert(GPU_SAMPLE, tmp_path / "ref")
    assert _tables(tmp_path / "gap") == _tables(tmp_path / "ref")


def _domain_variants(tmp_path: Path) -> dict[str, Path]:
    """Every domain shape, from the real recording: as recorded (default + named domains, registered
    and inline strings), named domains only, default domain only, and domains whose creation
    rows are missing (a windowed capture)."""
    shapes = {
        "recorded": [],
        "named-only": ["DELETE FROM NVTX_EVENTS WHERE domainId = 0 AND eventType != 75"],
        "default-only": ["DELETE FROM NVTX_EVENTS WHERE domainId != 0"],
        "uncreated": ["DELETE FROM NVTX_EVENTS WHERE eventType = 75"],
    }
    out = {}
    for name, sql in shapes.items():
        folder = tmp_path / name
        folder.mkdir()
        out[name] = edited(folder, *sql, src=DOMAINS)
    return out


def test_every_nvtx_domain_shape_converts(tmp_path: Path) -> None:
    for shape, path in _domain_variants(tmp_path).items():
        nvbridge.convert(path, tmp_path / f"{shape}.ds")
        ops = pq.read_table(tmp_path / f"{shape}.ds" / "ops.parquet").sort_by("start_ns")
        # Independent reference: names through StringIds and domain names from the creation rows.
        expected = raw(
            path,
            """
            SELECT coalesce(e.text, s.value), d.text FROM NVTX_EVENTS e
            LEFT JOIN StringIds s ON s.id = e.textId
            LEFT JOIN NVTX_EVENTS d ON d.eventType = 75 AND d.domainId = e.domainId AND e.domainId != 0
            WHERE e.eventType IN (59, 60, 70, 71) AND e."end" IS NOT NULL ORDER BY e.start""",
        )
        got = list(zip(ops.column("name").to_pylist(), ops.column("domain").to_pylist()))
        assert got == [tuple(r) for r in expected], shape
        assert len(got) == {"recorded": 22, "named-only": 12, "default-only": 10, "uncreated": 22}[shape]


def test_domains_of_the_recording(tmp_path: Path) -> None:
    report = nvbridge.load(DOMAINS)
    by_domain: dict[object, set[object]] = {}
    for name, domain in zip(report.ops.column("name").to_pylist(), report.ops.column("domain").to_pylist()):
        by_domain.setdefault(domain, set()).add(name)
    assert by_domain["cuBLAS"] == {"cublasSgemm_v2", "cublasSaxpy_v2"}
    assert by_domain["NCCL"] == {"ncclAllReduce", "ncclKernel window"}
    assert "setup (registered, default domain)" in by_domain[None]
    assert report.marks.column("domain").to_pylist() == ["cuBLAS"] * 3


@pytest.mark.parametrize("name", ["nsys-2024.2-pyprof-markers.sqlite", "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"])
def test_diagnostics_are_the_profilers_warnings_and_errors(name: str) -> None:
    path = real_db(name)
    texts = [
        str(r[0]).strip()
        for r in raw(path, "SELECT text FROM DIAGNOSTIC_EVENT WHERE severity IN (2, 3) ORDER BY timestamp")
    ]
    info = read_profile(path).info
    assert (info.diagnostics or "").splitlines() == list(dict.fromkeys(texts))
    if name.startswith("nsys-2024.2"):  # this capture warned (no CPU sampling, no MMAP events)
        assert info.diagnostics and len(texts) >= 2


REGRESS = sorted((Path(__file__).parent / "regress").glob("*.json"))


@pytest.mark.parametrize("case", REGRESS, ids=[p.stem for p in REGRESS])
def test_fuzz_regressions_read_or_refuse_in_one_line(tmp_path: Path, case: Path) -> None:
    """Each file is a crash scripts/hostile/fuzz_readers.py found (a sample_db/ seed and SQL edits): reading
    the edited copy must succeed or raise an NvbridgeError, never anything else."""
    spec = json.loads(case.read_text())
    path = tmp_path / spec["seed"]
    assert apply(SAMPLE_DB / spec["seed"], spec["sql"], path) == spec["sql"]  # every edit still applies
    try:
        read_profile(path)
    except nvbridge.NvbridgeError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(path.name)


def test_optional_columns_an_exporter_lacks_still_read(tmp_path: Path) -> None:
    """Absent columns read as their defaults (older exporters: no KERNEL.mangledName in 2021, no
    RUNTIME.eventClass in 2019); only NULLs stored in a present column are damage."""
    drops = (("KERNEL", "mangledName"), ("KERNEL", "shortName"), ("RUNTIME", "eventClass"), ("RUNTIME", "returnValue"))
    path = edited(tmp_path, *(f"ALTER TABLE {K}{table} DROP COLUMN {column}" for table, column in drops))
    profile = read_profile(path)
    assert (
        profile.gpu_ops.num_rows
        == raw(GPU_SAMPLE, f"SELECT (SELECT count(*) FROM {K}KERNEL) + (SELECT count(*) FROM {K}MEMCPY)")[0][0]
    )
    assert profile.api_calls.num_rows == raw(GPU_SAMPLE, f"SELECT count(*) FROM {K}RUNTIME")[0][0]


def test_a_schema_that_is_not_utf8_reads_or_refuses_without_a_panic(tmp_path: Path) -> None:
    """A byte flip inside a column declaration made ConnectorX panic (pyo3's PanicException, a
    BaseException that slipped past every handler as a traceback); the cursor path reads it."""
    data = bytearray(DOMAINS.read_bytes())
    data[206610] ^= 0xFF  # found by scripts/hostile/inputs.py (flip/nvtx_domains/206610)
    path = tmp_path / "flipped.sqlite"
    path.write_bytes(bytes(data))
    try:
        read_profile(path)
    except nvbridge.NvbridgeError as exc:
        assert str(exc).startswith("flipped.sqlite") and "\n" not in str(exc)


def test_schema_text_that_is_not_utf8_is_damage(tmp_path: Path) -> None:
    """A flipped byte inside sqlite_master's text (found by scripts/hostile/inputs.py) was an
    internal UnicodeDecodeError."""
    data = bytearray((SAMPLE_DB / "advise_cpu.sqlite").read_bytes())
    data[482162] ^= 0xFF
    bad = tmp_path / "flip.sqlite"
    bad.write_bytes(bytes(data))
    with pytest.raises(DamagedDatabase, match="schema holds text that is not UTF-8"):
        nvbridge.convert(bad, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flip.sqlite"]
