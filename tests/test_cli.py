"""The command line: the summary, exact one-line errors, exit status 1, no partial output."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from nvbridge.cli import cli
from tests.conftest import raw as raw_sql
from tests.conftest import real_db, require_nsys

FSDP = "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_convert_prints_summary_and_writes_dataset(tmp_path: Path) -> None:
    src = real_db(FSDP)
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    code, out, err = run("convert", str(src), "-o", str(tmp_path / "out"))
    assert code == 0, err
    assert out.startswith(f"Read {FSDP}: Nsight Systems 2026.2.1.210 (export schema 3.25.0)")
    assert "17,113 ops (NVTX ranges)" in out and "3,587 kernels" in out
    assert "16 of them because their launching API call is not in the capture" in out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        f"{t}.parquet"
        for t in ("ops", "gpu_ops", "api_calls", "marks", "syncs", "threads", "devices", "memory", "meta")
    )
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before  # the input is never modified


def test_quiet_prints_nothing(tmp_path: Path) -> None:
    code, out, err = run("convert", str(real_db(FSDP)), "-o", str(tmp_path / "o"), "--quiet")
    assert (code, out, err) == (0, "", "")


def _expect_error(tmp_path: Path, src: Path, message: str) -> None:
    out_dir = tmp_path / "out"
    code, out, err = run("convert", str(src), "-o", str(out_dir))
    assert code == 1
    assert err == f"Error: {message}\n"
    assert not out_dir.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


def test_missing_file(tmp_path: Path) -> None:
    _expect_error(tmp_path, tmp_path / "nope.sqlite", "nope.sqlite: no such file; check the path.")


def test_directory(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    _expect_error(tmp_path, tmp_path / "d", "d is a directory, not a profiler database; pass the .sqlite file itself.")


def test_not_sqlite(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    _expect_error(
        tmp_path,
        bad,
        "notes.txt is not an SQLite database; nvbridge reads the SQLite export of "
        "Nsight Systems (`nsys export --type sqlite`) or nvprof (`nvprof -o profile.sqlite`).",
    )


def test_nsys_rep(tmp_path: Path) -> None:
    """A report is exported with nsys first; a damaged one is named in one line (with nsys missing,
    the line names the install step: tests/test_readers_validation.py)."""
    require_nsys()
    rep = tmp_path / "run1.nsys-rep"
    rep.write_bytes(b"\x00\x01QDSTRM not sqlite")
    code, _, err = run("convert", str(rep), "-o", str(tmp_path / "out"))
    assert code == 1 and err.count("\n") == 1
    assert err.startswith("Error: nsys could not read run1.nsys-rep (") and "the report may be damaged" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run1.nsys-rep"]


def test_sqlite_of_another_program(tmp_path: Path) -> None:
    other = tmp_path / "app.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE users(id INTEGER, name TEXT)")
    con.commit()
    con.close()
    _expect_error(
        tmp_path,
        other,
        "app.db has neither nvprof tables (StringTable, CUPTI_ACTIVITY_KIND_MARKER) "
        "nor Nsight Systems tables (StringIds, NVTX_EVENTS); convert a .nsys-rep with "
        "`nsys export --type sqlite`.",
    )


def test_truncated_database(tmp_path: Path) -> None:
    src = real_db(FSDP)
    cut = tmp_path / "cut.sqlite"
    data = src.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    _expect_error(
        tmp_path, cut, f"cut.sqlite is truncated ({len(data) // 2} of {len(data)} bytes); copy or export it again."
    )


def test_corrupted_pages(tmp_path: Path) -> None:
    """A file whose header is intact but whose pages are garbage fails with one line, too."""
    src = real_db(FSDP)
    bad = tmp_path / "bad.sqlite"
    data = bytearray(src.read_bytes())
    data[4096 : len(data)] = b"\xff" * (len(data) - 4096)
    bad.write_bytes(bytes(data))
    code, out, err = run("convert", str(bad), "-o", str(tmp_path / "out"))
    assert code == 1
    assert err.startswith("Error: bad.sqlite ") and err.endswith("export it again.\n")
    assert err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_existing_output_needs_force(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    assert run("convert", str(real_db(FSDP)), "-o", str(out_dir), "-q")[0] == 0
    (out_dir / "ops.parquet").write_bytes(b"stale")  # replaced by --force, never by a plain run
    code, _, err = run("convert", str(real_db(FSDP)), "-o", str(out_dir))
    assert code == 1
    assert err == f"Error: {out_dir} already exists; choose another output directory or pass --force to replace it.\n"
    assert (out_dir / "ops.parquet").read_bytes() == b"stale"
    code, _, err = run("convert", str(real_db(FSDP)), "-o", str(out_dir), "--force", "-q")
    assert code == 0, err
    assert pq.read_table(out_dir / "ops.parquet").num_rows == 17113


def test_failed_force_keeps_the_old_dataset(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    assert run("convert", str(real_db(FSDP)), "-o", str(out_dir), "-q")[0] == 0
    bad = tmp_path / "bad.txt"
    bad.write_text("x")
    code, _, _ = run("convert", str(bad), "-o", str(out_dir), "--force")
    assert code == 1
    assert pq.read_table(out_dir / "ops.parquet").num_rows == 17113


def test_several_reports_partition_by_report(tmp_path: Path) -> None:
    a, b = real_db(FSDP), real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite")
    code, out, err = run("convert", str(a), str(b), "-o", str(tmp_path / "ds"), "-q")
    assert code == 0, err
    parts = sorted(p.name for p in (tmp_path / "ds").iterdir())
    assert parts == ["report=nsys-2026.2-pytorch2-fsdp-2gpu", "report=nvprof-2020-pytorch14-pyprof-lm"]
    duckdb = pytest.importorskip("duckdb")
    rows = duckdb.sql(
        f"SELECT report, count(*) FROM read_parquet('{tmp_path}/ds/*/ops.parquet', hive_partitioning = true) "
        "GROUP BY report ORDER BY report"
    ).fetchall()
    assert rows == [("nsys-2026.2-pytorch2-fsdp-2gpu", 17113), ("nvprof-2020-pytorch14-pyprof-lm", 683)]


def test_python_module_entry_point(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "nvbridge", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("nvbridge, version ")
    assert shutil.which("nvbridge") is not None


def test_commands_leave_pandas_unimported(tmp_path: Path) -> None:
    """pyarrow imports pandas at its first array conversion unless told it is absent (0.4 s of
    CPU per conversion); the commands never need it, and a later explicit use still works."""
    import subprocess
    import sys

    sample = Path(__file__).parents[1] / "sample_db" / "cnn_cpu.sqlite"
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "nvbridge",
            "convert",
            str(sample),
            "-o",
            str(tmp_path / "out"),
            "-q",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    # A refused import is listed too (as "pandas", in microseconds); a real one loads its modules.
    assert "pyarrow.lib" in imported and not any(name.startswith("pandas.") for name in imported)
    after = (
        "import sys, pyarrow as pa, nvbridge.output.process as c; c._skip_pandas_integration(); "
        "pa.array([1]); assert 'pandas' not in sys.modules; "
        "print(type(pa.table({'a': [1]}).to_pandas()).__name__)"
    )
    proc = subprocess.run([sys.executable, "-c", after], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "DataFrame", proc.stderr


def test_progress_reports_stages_and_rows(tmp_path: Path) -> None:
    """The terminal display gets every stage, and the rows it advances add up to the estimate,
    which is the exact event-row count for an unfiltered export."""
    import nvbridge
    from nvbridge.readers import estimate_rows

    src = real_db(FSDP)
    tables = (
        "NVTX_EVENTS",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    )
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    counted = sum(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables)
    con.close()
    assert estimate_rows(src) == counted
    seen: list[tuple[str, int]] = []
    nvbridge.convert(src, tmp_path / "out", progress=lambda stage, rows: seen.append((stage, rows)))
    stages = [s for i, (s, _) in enumerate(seen) if i == 0 or seen[i - 1][0] != s]  # one per window
    assert stages == ["reading", "correlating", "writing", "done"]
    assert sum(r for _, r in seen) == counted
    assert estimate_rows(tmp_path / "nothing.sqlite") == 0


def test_untyped_columns_read_like_declared_ones(tmp_path: Path) -> None:
    """NVTX_EVENTS declared without column types (textId is NULL in its first rows): ConnectorX
    cannot type it, the stdlib driver reads it, and the dataset equals the original's."""
    src = tmp_path / "untyped.sqlite"
    shutil.copy(real_db(FSDP), src)
    con = sqlite3.connect(src)
    cols = [r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")]
    con.execute(f"CREATE TABLE untyped ({', '.join(cols)})")  # no declared types at all
    con.execute(f"INSERT INTO untyped SELECT {', '.join(cols)} FROM NVTX_EVENTS")
    con.execute("DROP TABLE NVTX_EVENTS")
    con.execute("ALTER TABLE untyped RENAME TO NVTX_EVENTS")
    con.commit()
    con.close()
    assert run("convert", str(real_db(FSDP)), "-o", str(tmp_path / "a"), "--quiet")[0] == 0
    code, _, err = run("convert", str(src), "-o", str(tmp_path / "b"), "--quiet")
    assert code == 0, err
    a, b = pq.read_table(tmp_path / "a" / "ops.parquet"), pq.read_table(tmp_path / "b" / "ops.parquet")
    assert b.num_rows == 17_113 and b.equals(a)


def test_odd_file_names(tmp_path: Path) -> None:
    """Spaces, '#', '?' and '%' in the path survive the read-only URI the bulk reader opens."""
    odd = tmp_path / "a b#c?d" / "r 100%20.sqlite"
    odd.parent.mkdir()
    shutil.copy(real_db(FSDP), odd)
    before = hashlib.sha256(odd.read_bytes()).hexdigest()
    code, out, err = run("convert", str(odd), "-o", str(tmp_path / "o"))
    assert code == 0, err
    assert "17,113 ops (NVTX ranges)" in out
    assert hashlib.sha256(odd.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in odd.parent.iterdir()) == [odd.name]  # no journal or WAL left beside it


def test_convert_names_the_graph_launches(tmp_path: Path) -> None:
    """issue 25, item 15: on a CUDA-graph export the paragraph listed 30 kernels, then '40 GPU ops'
    without naming the 10 graph launches. Planted here: 8 of the nvFuser export's kernels moved
    into CUPTI_ACTIVITY_KIND_GRAPH_TRACE (one row per whole-graph launch, SCHEMA.md), keeping their
    times and correlation ids."""
    db = tmp_path / "graphs.sqlite"
    shutil.copyfile(real_db("nsys-2024.6-nvfuser-cpp-nvtx.sqlite"), db)
    con = sqlite3.connect(db)
    con.executescript(
        """CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL, end INTEGER NOT NULL,
        deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
        correlationId INTEGER, globalPid INTEGER, graphId INTEGER NOT NULL, graphExecId INTEGER NOT NULL);
        INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE SELECT start, end, deviceId, contextId, NULL, streamId,
        correlationId, globalPid, 1 + rowid % 3, 1 + rowid % 3 FROM CUPTI_ACTIVITY_KIND_KERNEL
        ORDER BY start LIMIT 8;
        DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId IN
        (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE);"""
    )
    con.commit()
    con.close()
    K = "CUPTI_ACTIVITY_KIND_"
    [(kernels, graphs, copies, sets)] = raw_sql(
        db,
        f"SELECT (SELECT count(*) FROM {K}KERNEL), (SELECT count(*) FROM {K}GRAPH_TRACE), "
        f"(SELECT count(*) FROM {K}MEMCPY), (SELECT count(*) FROM {K}MEMSET)",
    )
    code, out, err = run("convert", str(db), "-o", str(tmp_path / "out"))
    assert code == 0, err
    assert graphs == 8 and kernels == 11
    assert f"; {kernels} kernels, {copies} memcpy, {sets} memset, 8 CUDA graph launches (each one GPU op). " in out
    assert f" of the {kernels + copies + sets + graphs} GPU ops (" in out
