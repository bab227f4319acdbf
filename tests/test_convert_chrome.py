"""``convert --chrome`` writes the trace in the same pass, from the chunks it writes the dataset
from: the same events as ``nvbridge trace`` of the finished dataset, and the dataset is never read
back (every Parquet read fails while it converts)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import nvbridge
from nvbridge.conversion.memory import export_chrome_traces
from nvbridge.errors import ExportError
from tests.conftest import SAMPLE_DB, real_db
from tests.test_trace_stream import events

report_mod = importlib.import_module("nvbridge.conversion.pipeline")


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
        result = nvbridge.convert(source, tmp_path / "out", chrome_trace=tmp_path / "same_pass.json.gz")[0]
    written = export_chrome_traces(tmp_path / "out", tmp_path / "from_dataset.json.gz")  # one per rank, or one
    assert [p.name.replace("same_pass", "x") for p in result.traces] == [
        s.path.name.replace("from_dataset", "x") for s in written.files
    ]
    for ours_path, stats in zip(result.traces, written.files):
        header, ours = events(ours_path)
        header_ref, theirs = events(stats.path)
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


@pytest.mark.parametrize("split", ["rank", "none"])
@pytest.mark.parametrize("name", ["nsys-2026.2-pytorch2-fsdp-2gpu.sqlite", "nvprof-2020-pytorch14-pyprof-lm.sqlite"])
def test_the_split_of_a_conversion_is_the_split_of_its_dataset(tmp_path: Path, name: str, split: str) -> None:
    """--chrome-split rank writes NAME.rank<K> for every rank (one for a one-process report), none one
    file; streamed (nsys) or read whole (nvprof), the same files as `nvbridge trace --split`."""
    source = real_db(name)
    result = nvbridge.convert(source, tmp_path / "out", chrome_trace=tmp_path / "c.json.gz", chrome_split=split)[0]
    written = export_chrome_traces(tmp_path / "out", tmp_path / "d.json.gz", split=split)
    names = [p.name for p in result.traces]
    ranks = 2 if "fsdp" in name else 1
    assert names == (["c.json.gz"] if split == "none" else [f"c.rank{r}.json.gz" for r in range(ranks)])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names, *(s.path.name for s in written.files), "out"])
    for ours_path, stats in zip(result.traces, written.files):
        assert events(ours_path) == events(stats.path)


def test_rank_traces_that_exist_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "c.rank1.json.gz").write_bytes(b"older")
    with pytest.raises(ExportError, match=r"c\.rank1\.json\.gz already exists"):
        nvbridge.convert(
            real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"), tmp_path / "out", chrome_trace=tmp_path / "c.json.gz"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.rank1.json.gz"]
    assert (tmp_path / "c.rank1.json.gz").read_bytes() == b"older"
