"""advise reads only the columns its detectors use (nvbridge.analysis.advise_columns): its answer
on a dataset is the one it gives on every column of the same tables, and what it reads is those
tables' rows, in op_id order, however the file holds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from nvbridge.analysis.advise import advise, advise_report, slowest_reports
from nvbridge.analysis.advise_columns import ADVISE_COLUMNS, advise_tables
from nvbridge.analysis.as_json import advice_json
from nvbridge.analysis.ranks import step_times
from nvbridge.cli import cli
from nvbridge.conversion.memory import load_tables
from nvbridge.dataset.report import report_dirs
from tests.conftest import SAMPLE_DB, real_db

# GPU work of each kind (copies, waits, roofline, NCCL, two ranks), allocator events, old exports
SOURCES = [
    SAMPLE_DB / "advise_cpu+synthetic_gpu.sqlite",
    SAMPLE_DB / "diff_base_cpu+pinned_copies_gpu.sqlite",
    SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite",
    SAMPLE_DB / "memory_cpu.sqlite",
    "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite",
    "nvprof-2020-pytorch14-pyprof-lm.sqlite",
    "nsys-2024.6-nvfuser-cpp-nvtx.sqlite",
]
PEAKS = (100.0, 1000.0)  # known peaks, so below_roofline reads the cost columns too


def _convert(sources: list[Path], out: Path) -> Path:
    result = CliRunner().invoke(cli, ["convert", "-q", *map(str, sources), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _source(item: Path | str) -> Path:
    return item if isinstance(item, Path) else real_db(item)


def _json(advice: Any) -> list[dict[str, Any]]:
    return [advice_json(a) for a in advice]


@pytest.mark.parametrize("item", SOURCES, ids=lambda s: Path(s).stem)
def test_same_answer_as_every_column(item: Path | str, tmp_path: Path) -> None:
    out = _convert([_source(item)], tmp_path / "ds")
    for peaks in ((None, None), PEAKS):
        read_whole = advise_report(load_tables(out), 0.0, None, *peaks)
        assert _json(advise(out, 0.0, *peaks)) == _json([read_whole])


def test_partitioned_same_answer(tmp_path: Path) -> None:
    out = _convert(sorted(SAMPLE_DB.glob("ranks_gloo2_straggler_cpu.rank*.sqlite")), tmp_path / "ds")
    dirs = report_dirs(out)
    assert len(dirs) == 2
    whole = [load_tables(d) for d in dirs]
    skew = slowest_reports([step_times(r.ops) for r in whole])
    expected = [advise_report(r, 0.0, skew[i], *PEAKS) for i, r in enumerate(whole)]
    assert _json(advise(out, 0.0, *PEAKS)) == _json(expected)


def test_reads_the_columns_in_op_order(tmp_path: Path) -> None:
    """Ops written out of op_id order (as a streamed conversion may) come back sorted, only the
    named columns, each in one chunk, with the values a whole read gives."""
    out = _convert([SAMPLE_DB / "advise_cpu+synthetic_gpu.sqlite"], tmp_path / "ds")
    ops = pq.read_table(out / "ops.parquet")
    shuffled = ops.take(pa.array(np.random.default_rng(0).permutation(ops.num_rows)))
    pq.write_table(shuffled, out / "ops.parquet", row_group_size=max(ops.num_rows // 5, 1))
    assert pq.ParquetFile(out / "ops.parquet").metadata.num_row_groups > 1
    read = advise_tables(out)
    whole = load_tables(out)
    for name, columns in ADVISE_COLUMNS.items():
        table = read.table(name)
        assert table.column_names == [c for c in columns if c in whole.table(name).column_names]
        assert all(table.column(c).num_chunks == 1 for c in table.column_names)
        expected = whole.table(name).select(table.column_names)
        assert table.cast(expected.schema).equals(expected)
    # the ops' strings come dictionary-encoded, in the order the rows first use them
    for column in ("op_name", "module_path"):
        encoded = read.ops.column(column).chunk(0)
        assert pa.types.is_dictionary(encoded.type)
        first_seen = list(dict.fromkeys(v for v in whole.ops.column(column).to_pylist() if v is not None))
        assert encoded.dictionary.to_pylist() == first_seen
    assert read.ops.column("op_id").to_pylist() == sorted(ops.column("op_id").to_pylist())
    assert "input_values" not in read.ops.column_names and "stack" not in read.ops.column_names
    assert _json(advise(out, 0.0, *PEAKS)) == _json([advise_report(whole, 0.0, None, *PEAKS)])
