"""Damaged datasets (issue #14): summary, plot and trace refuse them with one line naming the
file and the fix, exit status 1, no traceback and no "internal error"; nothing is written."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.cli import cli
from nvbridge.dataset import schema
from nvbridge.errors import DamagedDataset
from tests.conftest import SAMPLE_DB, real_db

LM = "nvprof-2020-pytorch14-pyprof-lm.sqlite"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pristine") / "ds"
    nvbridge.convert(real_db(LM), out)
    return out


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _junk(path: Path) -> None:
    path.write_bytes(b"not parquet at all\n" * 50)


def _swap_ends(path: Path, rows: int = 3) -> None:
    """Swap start_ns and end_ns on the first ``rows`` rows of positive duration."""
    table = pq.read_table(path)
    start, end = table.column("start_ns").to_pylist(), table.column("end_ns").to_pylist()
    picked = [i for i in range(len(start)) if end[i] > start[i]][:rows]
    for i in picked:
        start[i], end[i] = end[i], start[i]
    table = table.set_column(table.schema.get_field_index("start_ns"), "start_ns", pa.array(start, pa.int64()))
    table = table.set_column(table.schema.get_field_index("end_ns"), "end_ns", pa.array(end, pa.int64()))
    pq.write_table(table, path)


def _replace(path: Path, other: str) -> None:
    shutil.copy(path.parent / other, path)


DAMAGE: dict[str, tuple[str, Callable[[Path], None], str]] = {
    # case: (file, what is done to it, what the message says)
    "missing": ("api_calls.parquet", Path.unlink, "is missing"),
    "truncated": ("ops.parquet", _truncate, "is not a readable Parquet file"),
    "junk": ("gpu_ops.parquet", _junk, "is not a readable Parquet file"),
    "junk meta": ("meta.parquet", _junk, "is not a readable meta table"),
    "wrong schema": ("ops.parquet", lambda p: _replace(p, "devices.parquet"), "lacks the columns"),
    "ops end before start": ("ops.parquet", _swap_ends, "has 3 rows whose end_ns is before start_ns"),
    "gpu_ops end before start": ("gpu_ops.parquet", _swap_ends, "has 3 rows whose end_ns is before start_ns"),
    "api_calls end before start": ("api_calls.parquet", _swap_ends, "has 3 rows whose end_ns is before start_ns"),
}


def _damaged(pristine: Path, tmp_path: Path, case: str) -> tuple[Path, Path]:
    ds = tmp_path / "ds"
    shutil.copytree(pristine, ds)
    name, damage, _ = DAMAGE[case]
    damage(ds / name)
    return ds, ds / name


def _commands(ds: Path, tmp_path: Path) -> dict[str, list[str]]:
    return {
        "summary": ["summary", str(ds)],
        "plot": ["plot", str(ds), "-o", str(tmp_path / "p.png")],
        "trace": ["trace", str(ds), "-o", str(tmp_path / "t.json")],
    }


@pytest.mark.parametrize("case", DAMAGE)
def test_damaged_dataset_is_one_line_naming_the_file(pristine: Path, tmp_path: Path, case: str) -> None:
    ds, damaged = _damaged(pristine, tmp_path, case)
    for command, args in _commands(ds, tmp_path).items():
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1, (command, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), (command, result.stderr)
        assert str(damaged) in lines[0] and DAMAGE[case][2] in lines[0], (command, lines[0])
        assert "--force" in lines[0] and "internal error" not in lines[0] and "Traceback" not in result.output
        assert not (tmp_path / "p.png").exists() and not (tmp_path / "t.json").exists()
    with pytest.raises(DamagedDataset):
        nvbridge.load(ds)


def test_one_broken_partition_of_many(tmp_path: Path) -> None:
    out = tmp_path / "many"
    nvbridge.convert([SAMPLE_DB / "cnn_cpu.sqlite", SAMPLE_DB / "threads_cpu.sqlite"], out)
    parts = sorted(out.glob("report=*"))
    assert len(parts) == 2
    result = CliRunner().invoke(cli, ["summary", str(out)])
    assert result.exit_code == 0, result.output
    _truncate(parts[1] / "ops.parquet")
    result = CliRunner().invoke(cli, ["summary", str(out)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert str(parts[1] / "ops.parquet") in result.stderr and "--force" in result.stderr
    (parts[0] / "meta.parquet").unlink()
    result = CliRunner().invoke(cli, ["summary", str(out)])
    assert result.exit_code == 1 and str(parts[0]) in result.stderr and "meta.parquet" in result.stderr


def test_partitioned_dataset_is_drawn_and_traced_whole(tmp_path: Path) -> None:
    """plot and trace once drew one report and refused a folder of several ("holds 2 converted
    reports; pass one of them"); they now take the whole run (docs/ranks.md: a bar per rank and
    step, one trace of every rank), and one report of it still draws alone."""
    out = tmp_path / "many"
    nvbridge.convert([SAMPLE_DB / "cnn_cpu.sqlite", SAMPLE_DB / "threads_cpu.sqlite"], out)
    first = sorted(out.glob("report=*"))[0]
    for args, written in (
        (["plot", str(out), "-o", str(tmp_path / "p.png")], tmp_path / "p.png"),
        (["trace", str(out), "-o", str(tmp_path / "t.json")], tmp_path / "t.json"),
    ):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        assert written.stat().st_size > 0 and result.output.startswith(f"Wrote {written}")
    assert CliRunner().invoke(cli, ["plot", str(first), "-o", str(tmp_path / "q.png"), "--step", "0"]).exit_code == 0


def test_pristine_copy_reads(pristine: Path) -> None:
    """The checks pass on what convert writes (and the swapped-ends helper finds rows to swap)."""
    report = nvbridge.load(pristine)
    for name in ("ops", "gpu_ops", "api_calls"):
        table = getattr(report, name)
        assert int(pc.sum(pc.greater(table.column("end_ns"), table.column("start_ns"))).as_py()) >= 3


# every report's tables (the collectives table is read by nvbridge.dataset.collectives_read, not load)
@pytest.mark.parametrize("table", [t for t, columns in schema.CONTRACT.items() if columns and t in schema.TABLES])
def test_a_table_without_a_contract_column_is_refused_on_load(pristine: Path, tmp_path: Path, table: str) -> None:
    """What a dataset read whole must hold is its *contract* columns (nvbridge.dataset.schema,
    marked in docs/dataset.md): without one, ``load`` is one line naming the file and the column."""
    ds = tmp_path / "ds"
    shutil.copytree(pristine, ds)
    column = schema.CONTRACT[table][-1]
    path = ds / f"{table}.parquet"
    pq.write_table(pq.read_table(path).drop_columns([column]), path)
    with pytest.raises(DamagedDataset) as refused:
        nvbridge.load(ds)
    assert str(path) in str(refused.value) and f"lacks the column {column}:" in str(refused.value)
