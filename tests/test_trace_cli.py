"""``nvbridge trace`` on a user's mistakes: one line naming the problem and the fix, exit status
non-zero, and no file left behind (issue 14's trace findings)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.cli import cli
from tests.conftest import SAMPLE_DB, real_db
from tests.test_trace_stream import events

CNN = SAMPLE_DB / "cnn_cpu.sqlite"


def run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["trace", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ds") / "cnn"
    nvbridge.convert(CNN, out)
    return out


def _one_line_error(err: str, *words: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "internal error" not in err, err
    for word in words:
        assert word in lines[0], err


def test_missing_output_folder_is_named(dataset: Path, tmp_path: Path) -> None:
    code, _, err = run(dataset, "-o", tmp_path / "nodir" / "t.json")
    assert code == 1
    _one_line_error(err, "nodir does not exist", "create the folder")
    assert not (tmp_path / "nodir").exists()  # parents are never created


def test_end_before_start_is_rejected(dataset: Path, tmp_path: Path) -> None:
    code, _, err = run(dataset, "-o", tmp_path / "t.json", "--start", "30ms", "--end", "10ms")
    assert code == 2 and "--end 10ms is not later than --start 30ms" in err
    assert list(tmp_path.iterdir()) == []


def test_steps_and_a_time_window_conflict(dataset: Path, tmp_path: Path) -> None:
    code, _, err = run(dataset, "-o", tmp_path / "t.json", "--steps", "1", "--start", "1ms")
    assert code == 2 and "--steps and --start/--end both choose the window" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--start", "1000s"], "nothing to trace from 1,000,000.000 ms to the end: the report's events span 0 to"),
        (["--process", "1"], "no host process 1 in the report (it has 23604); pass one of those to --process."),
        (["--steps", "9"], "no steps 9..9 in the report (it has steps 0..1)"),
    ],
)
def test_nothing_to_write_says_so_and_writes_nothing(
    dataset: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    code, _, err = run(dataset, "-o", tmp_path / "t.json", *args)
    assert code == 1
    _one_line_error(err, message)
    assert list(tmp_path.iterdir()) == []


def test_empty_capture_says_so(tmp_path: Path) -> None:
    code, _, err = run(real_db("nvprof-2020-empty-capture.sqlite"), "-o", tmp_path / "t.json.gz")
    assert code == 1
    _one_line_error(err, "the report has no ranges, API calls or GPU ops: nothing to trace")
    assert list(tmp_path.iterdir()) == []


def test_existing_output_needs_force(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    out.write_text("keep me")
    code, _, err = run(dataset, "-o", out)
    assert code == 1
    _one_line_error(err, "already exists", "--force")
    assert out.read_text() == "keep me"
    code, _, err = run(dataset, "-o", out, "--force")  # --force replaces only a trace nvbridge wrote
    assert code == 1 and out.read_text() == "keep me"
    _one_line_error(err, "was not written by nvbridge", "--force replaces only")
    out.unlink()
    for force in ((), ("--force",)):  # written, then replaced
        code, stdout, err = run(dataset, "-o", out, *force)
        assert code == 0, err
        assert stdout.startswith(f"Wrote {out}: 210 ops")
        assert sum(events(out)[1].values()) > 210


def test_window_from_a_report_and_its_dataset_agree(dataset: Path, tmp_path: Path) -> None:
    """--start/--end count from the first event, for a database and for its dataset alike."""
    for name, source in (("db", CNN), ("ds", dataset)):
        code, _, err = run(source, "-o", tmp_path / f"{name}.json", "--start", "10ms", "--end", "20000")
        assert code == 0, err
    assert events(tmp_path / "db.json") == events(tmp_path / "ds.json")
    assert run(dataset, "-o", tmp_path / "all.json")[0] == 0
    assert 0 < sum(events(tmp_path / "ds.json")[1].values()) < sum(events(tmp_path / "all.json")[1].values())


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("junk", "ops.parquet is not a readable Parquet file"),
        ("missing", "gpu_ops.parquet is missing; convert the report again with `nvbridge convert REPORT -o"),
        ("meta", "is not an nvbridge dataset (no meta.parquet)"),
    ],
)
def test_broken_dataset_is_named(dataset: Path, tmp_path: Path, damage: str, message: str) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(dataset, broken)
    if damage == "junk":
        (broken / "ops.parquet").write_bytes(b"PAR1 not really parquet")
    elif damage == "missing":
        (broken / "gpu_ops.parquet").unlink()
    else:
        (broken / "meta.parquet").unlink()
    code, _, err = run(broken, "-o", tmp_path / "t.json")
    assert code == 1
    _one_line_error(err, message)
    assert not (tmp_path / "t.json").exists() and not list(tmp_path.glob(".t.json*"))
