"""Inputs and outputs that ended in internal errors end in one line naming the problem and the fix,
or just work (issue 24, item 5): names that are not UTF-8, names at and past the file system's
limit, a working directory deeper than PATH_MAX, newlines in names, URLs without a driver,
a rank stored as text, times thrown decades apart, a value of the wrong kind where a name or a
BLOB belongs, impossible sizes, and a disk that fills up.

Every case runs the command line in a subprocess, as a user would, and checks stderr byte for
byte where the line matters: exactly one line starting ``Error:``, exit status 1, nothing left.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import ROOT, SAMPLE_DB, raw, real_db

SAMPLE = SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite"
K = "CUPTI_ACTIVITY_KIND_"


def _cli(
    *args: str | bytes | Path, cwd_fd: int | None = None, fsize: int | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``python -m nvbridge ARGS`` with this checkout's code; ``cwd_fd``: run in that open folder
    (one too deep to name); ``fsize``: files may grow to that many bytes (RLIMIT_FSIZE, SIGXFSZ
    ignored: a write past it fails as on a full disk)."""

    def setup() -> None:
        if cwd_fd is not None:
            os.fchdir(cwd_fd)
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, "-m", "nvbridge", *(os.fsencode(a) if isinstance(a, Path) else a for a in args)],
        capture_output=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"},
        pass_fds=() if cwd_fd is None else (cwd_fd,),
        preexec_fn=setup,
    )


def _one_line(proc: subprocess.CompletedProcess[bytes], *words: str) -> str:
    """The single ``Error:`` line of a failed run (each of ``words`` in it)."""
    err = proc.stderr.decode("utf-8", "surrogateescape")
    assert proc.returncode == 1, err
    assert err.startswith("Error: ") and err.count("\n") == 1 and err.endswith("\n"), err
    assert "internal error" not in err, err
    for word in words:
        assert word in err, err
    return err


def _left(folder: Path) -> list[str]:
    """nvbridge's in-flight names (staging, replaced datasets) still in ``folder``."""
    return [p.name for p in folder.iterdir() if ".nvbridge-" in p.name]


def test_names_that_are_not_utf8(tmp_path: Path) -> None:
    """A report named with bytes that are not UTF-8 converts (the name is kept with those bytes
    as \\xNN); a dataset cannot be written there (Arrow needs UTF-8 paths): one line."""
    odd = os.fsdecode(b"bad\xff.sqlite")
    shutil.copyfile(SAMPLE, tmp_path / odd)
    inp = tmp_path / odd
    assert _cli("convert", inp, "-o", tmp_path / "ds", "-q").returncode == 0
    meta = pq.read_table(tmp_path / "ds" / "meta.parquet").to_pydict()
    assert dict(zip(meta["key"], meta["value"]))["source"] == "bad\\xff.sqlite"
    assert _cli("summary", inp).returncode == 0
    assert _cli("trace", inp, "-o", tmp_path / "t.json").returncode == 0
    wrote = _cli("trace", inp, "-o", tmp_path / os.fsdecode(b"t\xfe.json"))
    assert wrote.returncode == 0 and wrote.stdout.startswith(f"Wrote {tmp_path}/t\\xfe.json: ".encode())
    err = _one_line(_cli("convert", inp, "-o", tmp_path / os.fsdecode(b"o\xfe")), "o\\xfe", "not valid UTF-8")
    assert not (tmp_path / os.fsdecode(b"o\xfe")).exists(), err
    (tmp_path / os.fsdecode(b"d\xfe")).mkdir()
    shutil.copytree(tmp_path / "ds", tmp_path / os.fsdecode(b"d\xfe") / "ds")
    _one_line(_cli("summary", tmp_path / os.fsdecode(b"d\xfe") / "ds"), "d\\xfe/ds", "not valid UTF-8")
    assert _left(tmp_path) == []


def test_a_255_byte_input_name_converts(tmp_path: Path) -> None:
    """SQLite's ``-journal`` beside a 250-255-byte name cannot exist: no journal, not an error."""
    inp = tmp_path / ("a" * 248 + ".sqlite")
    shutil.copyfile(SAMPLE, inp)
    assert _cli("convert", inp, "-o", tmp_path / "ds", "-q").returncode == 0
    assert _cli("summary", inp).returncode == 0


def test_names_past_the_file_systems_limit_are_one_line(tmp_path: Path) -> None:
    name = "b" * 256
    _one_line(_cli("convert", SAMPLE, "-o", tmp_path / name), "its name is 256 bytes", "choose a shorter name")
    trace = _one_line(_cli("trace", SAMPLE, "-o", tmp_path / f"{name}.json"), "its name is 261 bytes")
    assert "free some space" not in trace
    _one_line(_cli("plot", SAMPLE, "-o", tmp_path / f"{name}.png"), "its name is 260 bytes")
    assert list(tmp_path.iterdir()) == []


def test_legal_names_up_to_255_bytes_work(tmp_path: Path) -> None:
    """Staging names used to add 40-60 bytes to the output's name, past the limit."""
    for n in (220, 240, 255):
        out, trace = tmp_path / ("d" * n), tmp_path / ("t" * (n - 8) + ".json.gz")
        proc = _cli("convert", SAMPLE, "-o", out, "--chrome", trace, "-q")
        assert proc.returncode == 0, proc.stderr
        assert (out / "meta.parquet").is_file() and trace.stat().st_size > 0
        assert _cli("trace", SAMPLE, "-o", tmp_path / ("x" * (n - 5) + ".json")).returncode == 0
        assert _cli("plot", SAMPLE, "-o", tmp_path / ("p" * (n - 4) + ".png")).returncode == 0
        assert _cli("convert", SAMPLE, "-o", out, "--chrome", trace, "--force", "-q").returncode == 0
    assert _left(tmp_path) == []


def test_a_working_directory_deeper_than_path_max(tmp_path: Path) -> None:
    """Relative names there give absolute paths the kernel refuses: said so, never "damaged"."""
    fd = os.open(tmp_path, os.O_RDONLY)
    depth = len(os.fsencode(tmp_path))
    try:
        while depth < 4200:  # made a folder at a time, by descriptor: no path here is too long
            os.mkdir("d" * 250, dir_fd=fd)
            inner = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd, depth = inner, depth + 251
        copy = os.open("in.sqlite", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        with os.fdopen(copy, "wb") as out:
            out.write(SAMPLE.read_bytes())
        for args in (("convert", "in.sqlite", "-o", "ds"), ("summary", "in.sqlite"), ("trace", SAMPLE, "-o", "t.json")):
            err = _one_line(_cli(*args, cwd_fd=fd), "its full path is", "than the system allows (4096)")
            assert "damaged" not in err
    finally:
        os.close(fd)
        shutil.rmtree(tmp_path / ("d" * 250))


def test_newlines_in_names_never_split_the_error_line(tmp_path: Path) -> None:
    junk = tmp_path / "j\nk.sqlite"
    junk.write_bytes(b"not a database" * 20)
    _one_line(_cli("convert", junk, "-o", tmp_path / "ds"), "j\\nk.sqlite is not an SQLite database")
    _one_line(_cli("convert", SAMPLE, "-o", tmp_path / "no\ndir" / "ds"), "no\\ndir", "does not exist")


def test_urls_without_a_dialect_or_a_driver(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    _one_line(_cli("convert", "nosuchdb://host/x", "-o", out), "SQLAlchemy has no dialect for nosuchdb://")
    _one_line(_cli("convert", "://x", "-o", out), "not a database URL SQLAlchemy can read")
    # a dialect SQLAlchemy ships whose driver module is not installed here
    known = [
        ("postgresql+psycopg2://u:pw@h/d", "psycopg2"),
        ("mysql://u@h/d", "MySQLdb"),
        ("oracle://u@h/d", "oracledb"),
    ]
    url, module = next((u, m) for u, m in known if importlib.util.find_spec(m) is None)
    err = _one_line(_cli("convert", url, "-o", out), f"(module {module} is missing); install it")
    assert "pw" not in err  # the password is not printed
    assert not out.exists()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("rank", "abc"),
        ("rank", "²"),
        ("rank", "1.5"),
        ("session_start_utc_ns", "abc"),
        ("session_start_utc_ns", "99999999999999999999"),
        ("capture_end_ns", "1e400"),
        ("rows.ops", "many"),
    ],
)
def test_an_integer_stored_as_text_in_a_datasets_meta(tmp_path: Path, key: str, value: str) -> None:
    """A rank (or session start, capture end, row count) that is not a whole number: an edited meta."""
    ds = tmp_path / "ds"
    assert _cli("convert", SAMPLE, "-o", ds, "-q").returncode == 0
    meta = pq.read_table(ds / "meta.parquet").to_pydict()
    values = [value if k == key else v for k, v in zip(meta["key"], meta["value"])]
    pq.write_table(pa.table({"key": meta["key"], "value": pa.array(values, pa.string())}), ds / "meta.parquet")
    for args in (("summary", ds), ("trace", ds, "-o", tmp_path / "t.json"), ("plot", ds, "-o", tmp_path / "p.png")):
        _one_line(_cli(*args), f"gives {key} as {value!r}, not a whole number", "--force")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def _edited(tmp_path: Path, src: Path, *sql: str) -> Path:
    dst = tmp_path / src.name
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    for stmt in sql:
        con.execute(stmt)
    con.commit()
    con.close()
    return dst


def test_nvprof_markers_decades_from_the_others_are_refused(tmp_path: Path) -> None:
    """Start rows at 0 among Unix-epoch times: a range of 50 years (forward links overflowed)."""
    db = _edited(
        tmp_path,
        real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite"),
        f"UPDATE {K}MARKER SET timestamp = 0 WHERE flags = 2 AND _id_ < 100",
    )
    [(lo, hi)] = raw(db, f"SELECT min(timestamp), max(timestamp) FROM {K}MARKER")
    err = _one_line(_cli("convert", db, "-o", tmp_path / "ds"))
    assert f"{K}MARKER.timestamp {lo:,} ns, {K}MARKER.timestamp {hi:,} ns), longer than any capture" in err
    assert f"times {(hi - lo) / 86.4e12:,.0f} days apart" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [db.name]


@pytest.mark.parametrize(
    ("base", "sql", "words"),
    [
        (
            "nsys-2024.6-nvfuser-cpp-nvtx.sqlite",
            "UPDATE NVTX_EVENTS SET text = x'ff00aa' WHERE rowid = "
            "(SELECT min(rowid) FROM NVTX_EVENTS WHERE text NOT NULL)",
            "NVTX_EVENTS.text holds a BLOB instead of text in 1 row",
        ),
        (
            "nsys-2024.6-nvfuser-cpp-nvtx.sqlite",
            f"UPDATE StringIds SET value = x'ff00' WHERE id = (SELECT nameId FROM {K}RUNTIME LIMIT 1)",
            "StringIds.value holds a BLOB instead of text in 1 row",
        ),
        (
            "nvprof-2021-mxnet-driver.nvvp",
            f"UPDATE {K}NAME SET objectId = 9223372036854775807",
            f"{K}NAME.objectId holds values that are not a BLOB",
        ),
        (
            "nsys-2022.1-dlprof-torch-seq.sqlite",
            f"UPDATE {K}MEMCPY SET bytes = 9223372036854775807 WHERE rowid = (SELECT min(rowid) FROM {K}MEMCPY)",
            f"{K}MEMCPY.bytes is negative or beyond 2^50 in 1 row",
        ),
        (
            "nvprof-2021-mxnet-driver.nvvp",
            f"UPDATE {K}DEVICE SET globalMemoryBandwidth = 9223372036854775807",
            f"{K}DEVICE.globalMemoryBandwidth is negative or beyond 2^50 in 1 row",
        ),
    ],
)
def test_a_value_of_the_wrong_kind_or_size_is_refused(tmp_path: Path, base: str, sql: str, words: str) -> None:
    db = _edited(tmp_path, real_db(base), sql)
    _one_line(_cli("convert", db, "-o", tmp_path / "ds"), f"{base}: {words}", "export the report again")
    _one_line(_cli("summary", db), words)
    assert sorted(p.name for p in tmp_path.iterdir()) == [base]


@pytest.mark.parametrize("fsize", [8_000, 20_000, 50_000])
def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path: Path, fsize: int) -> None:
    """Writes past RLIMIT_FSIZE fail as on a full disk. Arrow printed "Error ignored" lines after
    nvbridge's own (a stream left open flushed again when destroyed). The limits fail the Parquet
    writers (8 KB, 20 KB: a row group, then the footer) and the trace (50 KB)."""
    db = real_db("nsys-2024.2-pyprof-markers.sqlite")
    out = tmp_path / "out"
    out.mkdir()
    proc = _cli("convert", db, "-o", out / "ds", "--chrome", out / "t.json.gz", fsize=fsize)
    _one_line(proc, "cannot write", "too large for the file system")
    assert list(out.iterdir()) == []
