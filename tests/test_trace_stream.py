"""The streamed Chrome trace: however the tables arrive, the same events as one whole write.

``TraceWriter`` is fed tiny chunks in a scrambled table order (GPU ops before the API calls that
launched them, ops last, first or interleaved), and a converted dataset is streamed row group by
row group; each trace must hold exactly the events (as a multiset of parsed JSON objects) and
the header of the trace written from the whole tables at once. The whole write itself is checked
against raw SQL and Holistic Trace Analysis in test_chrome.py.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import nvbridge
from nvbridge.columns import np_col
from nvbridge.conversion.memory import export_chrome_trace
from nvbridge.dataset.timeline import first_start, in_window, step_numbers, step_window
from nvbridge.export import chrome
from nvbridge.export.trace_ranks import report_ranks, tables_ranks
from tests.conftest import SAMPLE_DB, real_db
from tests.test_chrome import _synthetic, load_strict, validate

FSDP = "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"
LM = "nvprof-2020-pytorch14-pyprof-lm.sqlite"


def events(path: Path) -> tuple[dict[str, Any], Counter[str]]:
    doc = load_strict(path)
    validate(doc)
    trace = doc.pop("traceEvents")
    return doc, Counter(json.dumps(e, sort_keys=True) for e in trace)


def _chunks(table: pa.Table, size: int) -> list[pa.Table]:
    return [table.slice(lo, size) for lo in range(0, max(table.num_rows, 1), size)]


def scrambled(report: nvbridge.Report, dest: Path, size: int, **window: Any) -> chrome.TraceStats:
    """Feed ``size``-row chunks: GPU ops first, then API calls interleaved with ops."""
    tables = (report.ops, report.api_calls, report.gpu_ops)
    keep = [
        np_col(t, "start_ns")[in_window(t, window.get("start_ns"), window.get("end_ns"), window.get("processes"))]
        for t in tables
    ]
    origin = min(int(k.min()) for k in keep if len(k))
    kept = (
        set(window["processes"])
        if "processes" in window
        else set().union(*(set(np_col(t, "process_id").tolist()) for t in tables))
    )
    # the distributedInfo chrome.write gives the processes kept (tests/test_trace_ranks.py checks it)
    distributed = tables_ranks(*tables, None).info(kept)
    with chrome.TraceWriter(
        dest, origin_ns=origin, meta=report.meta, devices=report.devices, distributed=distributed, **window
    ) as writer:
        for chunk in _chunks(report.gpu_ops, size):
            writer.gpu_ops(chunk)
        ops, api = _chunks(report.ops, size), _chunks(report.api_calls, size)
        for i in range(max(len(ops), len(api))):
            if i < len(api):
                writer.api_calls(api[i])
            if i < len(ops):
                writer.ops(ops[len(ops) - 1 - i])  # ops from last to first: order within a table is free
        return writer.finish(report.threads)


def _source(name: str, tmp_path: Path) -> Path:
    if name == "synthetic":
        path = tmp_path / "nasty.sqlite"
        _synthetic(path)
        return path
    return SAMPLE_DB / name if name.endswith("cpu.sqlite") else real_db(name)


@pytest.mark.parametrize("name", [FSDP, LM, "cnn_cpu.sqlite", "synthetic"])
@pytest.mark.parametrize("size", [3, 1000])
def test_chunks_in_any_order_write_the_same_events(name: str, size: int, tmp_path: Path) -> None:
    report = nvbridge.load(_source(name, tmp_path))
    whole, part = tmp_path / "whole.json", tmp_path / "part.json"
    want = chrome.write(report, whole)
    got = scrambled(report, part, size)
    assert events(part) == events(whole)
    assert (got.slices, got.flows, got.gpu_ns_by_device, got.overlapping_gpu_ops) == (
        want.slices,
        want.flows,
        want.gpu_ns_by_device,
        want.overlapping_gpu_ops,
    )
    assert sum(want.flows.values()) > 0


def test_windows_and_processes_stream_the_same(tmp_path: Path) -> None:
    report = nvbridge.load(real_db(FSDP))
    lo, hi = first_start([report.ops]), int(np_col(report.ops, "end_ns").max())
    assert lo is not None
    pid = int(np_col(report.api_calls, "process_id")[0])
    for window in ({"start_ns": lo + (hi - lo) // 3, "end_ns": lo + (hi - lo) // 2}, {"processes": {pid}}):
        whole, part = tmp_path / "whole.json", tmp_path / "part.json.gz"
        chrome.write(report, whole, **window)
        scrambled(report, part, 777, **window)
        assert events(part) == events(whole)


@pytest.mark.parametrize("name", [FSDP, "cnn_cpu.sqlite"])
def test_dataset_streams_row_groups_to_the_same_trace(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dataset written in small row groups (as a large one is) gives the in-memory trace."""
    import nvbridge.export.parquet as parquet

    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 97)  # several row groups even for 210 ops
    source = _source(name, tmp_path)
    nvbridge.convert(source, tmp_path / "ds")
    report = nvbridge.load(tmp_path / "ds")
    assert pa.parquet.ParquetFile(tmp_path / "ds" / "ops.parquet").metadata.num_row_groups > 1
    export_chrome_trace(report, tmp_path / "mem.json")
    export_chrome_trace(tmp_path / "ds", tmp_path / "ds.json")
    assert events(tmp_path / "ds.json") == events(tmp_path / "mem.json")
    ops = report.ops
    start, end = int(np_col(ops, "start_ns").min()), int(np_col(ops, "end_ns").max())
    lo, hi = start + (end - start) // 4, start + (end - start) // 3
    export_chrome_trace(report, tmp_path / "mem_cut.json", start_ns=lo, end_ns=hi)
    export_chrome_trace(tmp_path / "ds", tmp_path / "ds_cut.json", start_ns=lo, end_ns=hi)  # row groups skipped
    assert events(tmp_path / "ds_cut.json") == events(tmp_path / "mem_cut.json")


def test_a_row_before_the_origin_is_refused(tmp_path: Path) -> None:
    report = nvbridge.load(SAMPLE_DB / "cnn_cpu.sqlite")
    origin = int(np_col(report.ops, "start_ns").min()) + 1
    with pytest.raises(ValueError, match="origin_ns"), chrome.TraceWriter(tmp_path / "t.json", origin_ns=origin) as w:
        w.ops(report.ops)
    assert list(tmp_path.iterdir()) == []  # the partial file is removed


def test_step_numbers_match_on_plain_and_dictionary_names() -> None:
    names = pa.array(["ProfilerStep#3", "aten::mm", None, "ProfilerStep#12", "ProfilerStep#x", "xProfilerStep#1"])
    want = [3, -1, -1, 12, -1, -1]
    assert step_numbers(names).tolist() == want
    assert step_numbers(names.dictionary_encode()).tolist() == want
    ops = pa.table({"op_name": names, "start_ns": np.arange(6) * 10, "end_ns": np.arange(6) * 10 + 5})
    assert step_window(ops, 3, 12) == (0, 35)
    with pytest.raises(ValueError, match=r"no steps 4\.\.5 in the report \(it has steps 3\.\.12\)"):
        step_window(ops, 4, 5)


def test_gzip_without_isal_writes_the_same_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = nvbridge.load(SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite")
    chrome.write(report, tmp_path / "isal.json.gz")
    monkeypatch.setitem(sys.modules, "isal", None)  # import isal now raises ImportError: zlib's gzip
    chrome.write(report, tmp_path / "zlib.json.gz")
    assert events(tmp_path / "zlib.json.gz") == events(tmp_path / "isal.json.gz")
    assert (tmp_path / "zlib.json.gz").read_bytes() != (tmp_path / "isal.json.gz").read_bytes()


def test_a_dataset_is_never_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only row groups of ops, api_calls and gpu_ops are read (whole-table reads fail here)."""
    import pyarrow.parquet as pq

    import nvbridge.export.parquet as parquet

    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 100)
    nvbridge.convert(SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite", tmp_path / "ds")
    whole_read = pq.read_table

    def read_table(source: Any, *args: Any, **kwargs: Any) -> pa.Table:
        assert Path(str(source)).stem not in ("ops", "api_calls", "gpu_ops"), f"{source} read whole"
        return whole_read(source, *args, **kwargs)

    groups: list[int] = []
    read_group = pq.ParquetFile.read_row_group

    def one_group(self: pq.ParquetFile, i: int, *args: Any, **kwargs: Any) -> pa.Table:
        groups.append(i)
        return read_group(self, i, *args, **kwargs)

    monkeypatch.setattr(pq, "read_table", read_table)
    monkeypatch.setattr(pq.ParquetFile, "read", lambda *a, **k: pytest.fail("ParquetFile.read reads a whole table"))
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", one_group)
    stats = export_chrome_trace(tmp_path / "ds", tmp_path / "t.json", steps=(1, 1))
    assert stats.slices["ops"] > 0 and len(groups) > 10
    monkeypatch.undo()
    report = nvbridge.load(tmp_path / "ds")
    export_chrome_trace(report, tmp_path / "mem.json", steps=(1, 1))
    assert events(tmp_path / "t.json") == events(tmp_path / "mem.json")


def test_fed_as_a_streamed_conversion_makes_them(tmp_path: Path) -> None:
    """The calls ``convert --chrome`` makes: each window's finished ops, API calls and GPU ops
    (GPU ops may arrive before their calls), threads at the end."""
    from nvbridge._version import __version__
    from nvbridge.dataset.schema import TABLES
    from nvbridge.engine import Correlator, parse_names
    from nvbridge.export import parquet
    from nvbridge.readers import open_windows
    from nvbridge.readers.raw import Restart

    source = real_db(FSDP)
    report = nvbridge.load(source)
    origin = first_start([report.ops, report.api_calls, report.gpu_ops])
    assert origin is not None
    with open_windows(source, 2048) as read:
        engine = Correlator(read.info, read.capture_end_ns, read.syncs)
        meta_t = parquet.meta_table(read.info, dict.fromkeys(TABLES, 0), __version__)
        meta = dict(zip(meta_t.column("key").to_pylist(), meta_t.column("value").to_pylist()))
        windows = read.windows()
        first = next(windows)
        facts = read.trace_facts()
        assert facts is not None and facts.first_ns == origin
        # The header lists the dataset's devices: those the report names plus any a GPU op ran on.
        seen = set(np_col(facts.devices, "device_id").tolist())
        extra = sorted(set(facts.gpu_devices) - seen - {-1})
        devices = pa.concat_tables(
            [
                facts.devices.select(["device_id", "name"]).cast(
                    pa.schema([("device_id", pa.int64()), ("name", pa.string())])
                ),
                pa.table({"device_id": pa.array(extra, pa.int64()), "name": pa.nulls(len(extra), pa.string())}),
            ]
        )
        # the ranks as convert --chrome knows them before reading the rows: two, so the whole
        # report in one file names no rank
        distributed = report_ranks(facts.gpu_users, facts.host_processes, read.info.rank).info(
            set().union(*facts.gpu_users.values())
        )
        assert distributed == {"world_size": 2, "rank_of_process": {"148": 0, "149": 1}}
        with chrome.TraceWriter(
            tmp_path / "conv.json.gz", origin_ns=origin, meta=meta, devices=devices, distributed=distributed
        ) as writer:
            count = 0
            for window in [first, *windows]:
                assert not isinstance(window, Restart)
                rows = engine.add(window, parse_names(window.ranges))
                assert not isinstance(rows, Restart)
                writer.gpu_ops(rows.gpu_ops)  # GPU ops first: their calls may come later
                writer.api_calls(rows.api_calls)
                writer.ops(rows.ops)
                count += 1
            tables = engine.finish(read.tail())
            engine.close()
            writer.finish(tables["threads"])
    assert count > 3
    export_chrome_trace(report, tmp_path / "whole.json")
    assert events(tmp_path / "conv.json.gz") == events(tmp_path / "whole.json")
