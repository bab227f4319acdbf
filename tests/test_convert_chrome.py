"""``convert --chrome`` writes the trace in the same pass, from the chunks it writes the dataset
from: the same events as ``nvbridge trace`` of the finished dataset, and the dataset is never read
back (every Parquet read fails while it converts)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import nvbridge
from nvbridge.errors import ExportError
from nvbridge.export.trace import export_chrome_trace
from tests.conftest import SAMPLE_DB, real_db
from tests.test_trace_stream import events

report_mod = importlib.import_module("nvbridge.conversion.report")


def _no_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the conversion read a Parquet file back")

    for name in ("read_table", "ParquetFile", "ParquetDataset", "read_metadata", "read_schema"):
        monkeypatch.setattr(pq, name, refuse)


@pytest.mark.parametrize(
    "name",
    [
        "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite",
        "nsys-2024.2-pyprof-markers.sqlite",
        "nvprof-2020-pytorch14-pyprof-lm.sqlite",
        "sample:cnn_cpu+synthetic_gpu.sqlite",
    ],
)
@pytest.mark.parametrize("window_rows", [97, 1 << 17])
def test_the_trace_of_a_conversion_equals_the_trace_of_its_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, window_rows: int
) -> None:
    source = SAMPLE_DB / name.split(":", 1)[1] if name.startswith("sample:") else real_db(name)
    monkeypatch.setattr(report_mod, "WINDOW_ROWS", window_rows)
    with monkeypatch.context() as patched:
        _no_reads(patched)
        nvbridge.convert(source, tmp_path / "out", chrome_trace=tmp_path / "same_pass.json.gz")
    export_chrome_trace(tmp_path / "out", tmp_path / "from_dataset.json.gz")
    header, ours = events(tmp_path / "same_pass.json.gz")
    header_ref, theirs = events(tmp_path / "from_dataset.json.gz")
    assert sum(ours.values()) > 100
    assert ours == theirs
    assert header == header_ref
    plain = tmp_path / "plain"
    nvbridge.convert(source, plain)
    for table in ("ops", "api_calls", "gpu_ops", "threads"):
        assert pq.read_table(tmp_path / "out" / f"{table}.parquet").equals(pq.read_table(plain / f"{table}.parquet"))


def test_an_empty_capture_gets_no_trace_and_no_dataset(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="nothing to trace"):
        nvbridge.convert(
            real_db("nvprof-2020-empty-capture.sqlite"), tmp_path / "out", chrome_trace=tmp_path / "t.json"
        )
    assert list(tmp_path.iterdir()) == []
