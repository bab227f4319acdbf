"""A user's files are never lost: --force, races, signals, many inputs, permissions.

Each test here failed before nvbridge/output/publish.py existed (convert deleted any directory under
--force, two runs both "won", a SIGTERM left a staging directory, a bad second input left the
first one's partition, folders were created 0700).
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import nvbridge
from nvbridge.errors import ExportError
from nvbridge.output import publish as outputs
from tests.conftest import ROOT, SAMPLE_DB, real_db

FSDP = "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"
SAMPLE = SAMPLE_DB / "cnn_cpu.sqlite"


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # This checkout's code wherever the command runs (from another folder, `python -m` would
    # import the installed nvbridge).
    return subprocess.run(
        [sys.executable, "-m", "nvbridge", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_force_never_replaces_a_directory_that_is_not_a_dataset(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    report = proj / "report.sqlite"
    report.write_bytes(SAMPLE.read_bytes())
    (proj / "notes.txt").write_text("three weeks of notes")
    before = _tree(proj)
    proc = _cli("convert", str(report), "-o", str(proj), "--force")
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "inside the output directory" in proc.stderr
    assert _tree(proj) == before
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    proc = _cli("convert", str(report), "-o", str(other), "--force")
    assert proc.returncode == 1 and "is not an nvbridge dataset" in proc.stderr
    assert (other / "notes.txt").read_text() == "mine"


def test_force_refuses_a_dataset_holding_a_foreign_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    nvbridge.convert(SAMPLE, out)
    (out / "analysis.ipynb").write_text("{}")
    with pytest.raises(ExportError, match="not an nvbridge dataset"):
        nvbridge.convert(SAMPLE, out, force=True)
    assert (out / "analysis.ipynb").exists() and (out / "meta.parquet").exists()
    (out / "analysis.ipynb").unlink()
    (out / ".ipynb_checkpoints").mkdir()  # hidden, and still not ours to delete
    with pytest.raises(ExportError, match="not an nvbridge dataset"):
        nvbridge.convert(SAMPLE, out, force=True)
    assert (out / ".ipynb_checkpoints").is_dir() and (out / "meta.parquet").exists()


def test_force_replaces_a_dataset_and_an_empty_directory_is_free(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()  # an empty folder made beforehand holds nothing to lose
    nvbridge.convert(SAMPLE, out)
    first = pq.read_table(out / "ops.parquet")
    nvbridge.convert(SAMPLE, out, force=True)
    assert pq.read_table(out / "ops.parquet").equals(first)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging or old copies left


def test_publishing_is_exclusive(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with outputs.staging(out) as first:
        (first / "meta.parquet").write_text("first")
        with outputs.staging(out) as second:
            (second / "meta.parquet").write_text("second")
            outputs.publish(first, out, force=False)
            with pytest.raises(ExportError, match="created by another run"):
                outputs.publish(second, out, force=False)
    assert (out / "meta.parquet").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_two_runs_racing_to_one_new_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "nvbridge", "convert", str(real_db(FSDP)), "-o", str(out), "-q"]
    procs = [subprocess.Popen(argv, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    results = [(p.returncode, err) for p, err in zip(procs, errs)]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 1], results
    [err] = [err for code, err in results if code == 1]
    assert "another run" in err or "already exists" in err
    assert pq.read_table(out / "ops.parquet").num_rows == 17113
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# A conversion held open after its tables are written, so a signal lands mid-run.
_SLOW = (
    "import sys, time; import nvbridge.conversion.report as r; f = r._convert_into; "
    "r._convert_into = lambda *a: (f(*a), time.sleep(60))[0]; "
    "from nvbridge.cli import main; sys.argv[0] = 'nvbridge'; main()"
)


def _start_slow(out: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW, "convert", str(SAMPLE), "-o", str(out)], stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not any((p / "meta.parquet").exists() for p in out.parent.glob(f".{out.name}.nvbridge-staging*")):
        assert time.monotonic() < deadline and proc.poll() is None, "the conversion never got under way"
        time.sleep(0.05)
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_leaves_nothing_and_exits_at_once(tmp_path: Path, sig: signal.Signals) -> None:
    out = tmp_path / "out"
    proc = _start_slow(out)
    sent = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 2.0
    assert proc.returncode == 128 + sig
    assert "unfinished output was removed" in err
    assert list(tmp_path.iterdir()) == []


def test_a_killed_run_is_cleaned_up_by_the_next(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _start_slow(out)
    proc.kill()
    proc.communicate(timeout=30)
    assert [p.name.startswith(".out.nvbridge-staging") for p in tmp_path.iterdir()] == [True]
    assert _cli("convert", str(SAMPLE), "-o", str(out), "-q").returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_every_input_is_checked_before_anything_is_written(tmp_path: Path) -> None:
    good, missing = SAMPLE, tmp_path / "missing.sqlite"
    proc = _cli("convert", str(good), str(missing), "-o", str(tmp_path / "ds"))
    assert proc.returncode == 1 and "missing.sqlite: no such file" in proc.stderr
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database")
    proc = _cli("convert", str(good), str(junk), "-o", str(tmp_path / "ds"))
    assert proc.returncode == 1 and "junk.sqlite is not an SQLite database" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.sqlite"]


def test_a_failed_scheduler_run_leaves_no_output(tmp_path: Path) -> None:
    pytest.importorskip("dask.distributed")
    with pytest.raises(ExportError, match="cannot reach the Dask scheduler"):
        nvbridge.convert([SAMPLE, SAMPLE_DB / "threads_cpu.sqlite"], tmp_path / "ds", scheduler="tcp://127.0.0.1:1")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_folders_follow_the_umask(tmp_path: Path, mask: int) -> None:
    old = os.umask(mask)
    try:
        nvbridge.convert(SAMPLE, tmp_path / "one")
        nvbridge.convert([SAMPLE, SAMPLE_DB / "threads_cpu.sqlite"], tmp_path / "many")
    finally:
        os.umask(old)
    for folder in (tmp_path / "one", tmp_path / "many", tmp_path / "many" / "report=cnn_cpu"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~mask, folder


def test_the_output_folder_must_exist(tmp_path: Path) -> None:
    proc = _cli("convert", str(SAMPLE), "-o", str(tmp_path / "no" / "such" / "out"))
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "does not exist; create the folder first" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_fifo_input_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "report.sqlite"
    os.mkfifo(fifo)
    proc = _cli("convert", str(fifo), "-o", str(tmp_path / "out"))  # a hang fails by the timeout
    assert proc.returncode == 1 and "not a regular file" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.sqlite"]


def test_progress_fits_80_columns_and_never_claims_0_s_left_while_the_trace_is_written() -> None:
    from nvbridge.cli._common import BAR_WIDTH, status

    total = 12_345_678
    lines = [
        status("converting", stage, done, total, elapsed)
        for stage, done, elapsed in (
            ("correlating", 4_000_000, 3.0),
            ("writing", 12_000_000, 9.0),
            ("writing trace", total, 9.5),
        )
    ]
    assert lines[0][1] == "4.0M/12.3M, 1.3M rows/s, 6 s left"  # 8.3M rows to go at 1.33M rows/s
    assert lines[-1][1] == "" and "writing trace" in lines[-1][0]
    # spinner, description, bar, status and elapsed time, one space apart
    assert all(2 + len(d) + 1 + BAR_WIDTH + 1 + len(r) + 1 + 7 <= 80 for d, r in lines), lines


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--chrome", "nodir/t.json"],
            "cannot write the trace nodir/t.json: the folder {tmp}/nodir does not exist; create the folder first",
        ),
        (["--chrome", "t.txt"], "t.txt: a Chrome trace is written as .json or .json.gz"),
    ],
)
def test_trace_destinations_are_checked_before_converting(tmp_path: Path, args: list[str], message: str) -> None:
    proc = _cli("convert", str(SAMPLE), "-o", "out", *args, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.startswith(f"Error: {message.format(tmp=tmp_path)}")
    assert proc.stderr.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_an_output_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    proc = _cli("convert", str(SAMPLE), "-o", str(tmp_path / "afile" / "out"))
    assert proc.returncode == 1 and f"{tmp_path}/afile is a file, not a folder" in proc.stderr


def test_an_sqlalchemy_url_is_read_as_a_url(tmp_path: Path) -> None:
    proc = _cli("convert", f"sqlite:///{SAMPLE}", "-o", str(tmp_path / "out"), "-q")
    assert proc.returncode == 0, proc.stderr
    direct = tmp_path / "direct"
    nvbridge.convert(SAMPLE, direct)
    assert pq.read_table(tmp_path / "out" / "ops.parquet").equals(pq.read_table(direct / "ops.parquet"))


def test_a_full_disk_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nvbridge.export import parquet

    def full(*_args: object, **_kwargs: object) -> None:
        raise OSError(28, "Error writing bytes to file. Detail: [errno 28] No space left on device")

    monkeypatch.setattr(parquet, "write_meta", full)
    with pytest.raises(ExportError, match="cannot write the dataset .*out: the disk is full"):
        nvbridge.convert(SAMPLE, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_staging_files_go_with_an_interrupt_and_after_a_kill(tmp_path: Path) -> None:
    """A trace (or any file output) is written under a staging name: an interrupt removes it, and
    the next run into the folder removes one a killed run left."""
    dest = tmp_path / "t.json.gz"
    make = (
        f"import os, signal, pathlib, nvbridge.output.publish as o; o.exit_on_interrupt(); "
        f"o.staging_file(pathlib.Path({str(dest)!r})).write_text('x'); os.kill(os.getpid(), signal.SIG{{}})"
    )
    proc = subprocess.run([sys.executable, "-c", make.format("TERM")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and "unfinished output was removed" in proc.stderr
    assert list(tmp_path.iterdir()) == []
    proc = subprocess.run([sys.executable, "-c", make.format("KILL")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert [p.name.startswith(".t.json.gz.nvbridge-staging.") for p in tmp_path.iterdir()] == [True]
    outputs.release(outputs.staging_file(dest))  # the next run: the dead process's file goes
    assert list(tmp_path.iterdir()) == []


def test_an_empty_capture_says_so_with_the_profilers_own_diagnostics(tmp_path: Path) -> None:
    import shutil
    import sqlite3

    src = real_db("nsys-2024.6-nvfuser-cpp-nvtx.sqlite")
    empty = tmp_path / "empty.sqlite"
    shutil.copyfile(src, empty)
    con = sqlite3.connect(empty)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in tables:
        if table == "NVTX_EVENTS" or table.startswith("CUPTI_ACTIVITY_KIND_"):
            con.execute(f"DELETE FROM {table}")
    con.commit()
    said = [t for (t,) in con.execute("SELECT text FROM DIAGNOSTIC_EVENT WHERE severity IN (2, 3)")]
    con.close()
    assert said  # the export carries a warning of the profiler's own
    [result] = nvbridge.convert(empty, tmp_path / "out")
    text = result.describe()
    assert "Nothing was recorded: no NVTX ranges and no CUDA activity" in text
    assert all(t.rstrip(".") in text for t in said)
    [full] = nvbridge.convert(src, tmp_path / "full")
    assert "Nothing was recorded" not in full.describe()
