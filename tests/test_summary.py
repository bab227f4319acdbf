"""key_averages and `nvbridge summary`, checked against numbers computed here from raw rows."""

from __future__ import annotations

import importlib
import json
import struct
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.cli import cli
from tests.conftest import raw, real_db

LM = "nvprof-2020-pytorch14-pyprof-lm.sqlite"


def _rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    return raw(path, sql)


def _brute_force_table(path: Path) -> dict[str, tuple[int, int, int, int]]:
    """name -> (calls, self CPU ns, CPU total ns, self CUDA ns), from the raw nvprof rows alone."""
    raw = _rows
    strings = dict(raw(path, "SELECT _id_, value FROM StringTable"))
    ends = dict(raw(path, "SELECT id, timestamp FROM CUPTI_ACTIVITY_KIND_MARKER WHERE flags = 4"))
    ranges = []
    for mid, start, blob, name in raw(
        path, "SELECT id, timestamp, objectId, name FROM CUPTI_ACTIVITY_KIND_MARKER WHERE flags = 2"
    ):
        ranges.append((struct.unpack_from("<II", blob), start, ends[mid], strings[name]))

    def innermost(thread: tuple[int, int], s: int, e: int, exclude: int = -1) -> int:
        best = -1
        for i, (t, rs, re, _) in enumerate(ranges):
            if i != exclude and t == thread and rs <= s and e <= re:
                if best < 0 or (rs, -re, i) > (ranges[best][1], -ranges[best][2], best):
                    best = i
        return best

    child_ns: dict[int, int] = defaultdict(int)
    for i, (t, s, e, _) in enumerate(ranges):
        # the parent: innermost range containing this one that precedes it in (start, -end, order)
        cands = [
            j
            for j, (tj, sj, ej, _) in enumerate(ranges)
            if j != i and tj == t and sj <= s and e <= ej and (sj, -ej, j) < (s, -e, i)
        ]
        if cands:
            parent = max(cands, key=lambda j: (ranges[j][1], -ranges[j][2], j))
            child_ns[parent] += e - s
    gpu: dict[int, int] = defaultdict(int)
    for pid, tid, s, e, d in raw(
        path,
        """
            SELECT r.processId, r.threadId & 4294967295, r.start, r.end, g.end - g.start FROM (
              SELECT correlationId, start, end FROM CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
              UNION ALL SELECT correlationId, start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY
              UNION ALL SELECT correlationId, start, end FROM CUPTI_ACTIVITY_KIND_MEMSET) g
            JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = g.correlationId""",
    ):
        owner = innermost((pid, tid), s, e)
        if owner >= 0:
            gpu[owner] += d
    table: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for i, (_, s, e, name) in enumerate(ranges):
        row = table[name.split(", seq")[0] if not name.startswith("{") else name]
        row[0] += 1
        row[1] += (e - s) - child_ns[i]
        row[2] += e - s
        row[3] += gpu[i]
    return {k: tuple(v) for k, v in table.items()}  # type: ignore[misc]


def test_nvprof_table_matches_brute_force_from_raw_rows() -> None:
    path = real_db(LM)
    expected = _brute_force_table(path)
    rows = nvbridge.load(path).key_averages().sorted(row_limit=-1).to_pylist()
    got = {r["name"]: (r["calls"], r["self_cpu_ns"], r["cpu_total_ns"], r["self_gpu_ns"]) for r in rows}
    # PyProf dict markers get a readable op name; compare the torch ops, which are most rows.
    torch_ops = {k: v for k, v in expected.items() if not k.startswith("{")}
    assert {k: got[k] for k in torch_ops} == torch_ops
    assert len(torch_ops) > 40
    assert sum(v[3] for v in expected.values()) == sum(v[3] for v in got.values())


def test_self_cuda_adds_up_per_device() -> None:
    """Per device, summed Self CUDA over all rows == GPU time of the ops attributed on it."""
    report = nvbridge.load(real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"))
    gpu = report.df("gpu_ops")
    for device in sorted(gpu.device_id.unique()):
        on = gpu[(gpu.device_id == device) & gpu.op_id.notna()]
        rows = report.key_averages(device=int(device)).sorted(row_limit=-1)
        assert int(np.sum(rows.column("self_gpu_ns"))) == int((on.end_ns - on.start_ns).sum()) > 0
    header = {d.device_id: d for d in report.gpu_summary()}
    assert sorted(header) == [0, 1]
    for device, d in header.items():
        on = gpu[gpu.device_id == device]
        assert d.kernels == int((on.kind == "kernel").sum())
        assert 0 < d.busy_ns <= d.summed_ns == int((on.end_ns - on.start_ns).sum())


def test_summary_command_outputs(tmp_path: Path) -> None:
    path = str(real_db(LM))
    result = CliRunner().invoke(cli, ["summary", path, "--limit", "3"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("GPU 0 (Tesla V100-SXM2-16GB): busy ")
    assert "Name" in lines[2] and "Self CUDA %" in lines[2] and "# of Calls" in lines[2]
    assert lines[4].startswith("mm ")  # the op with the most self CUDA time (checked above against raw rows)
    result = CliRunner().invoke(cli, ["summary", path, "--json", "--filter", "^mm$"])
    data = json.loads(result.stdout)
    assert [r["name"] for r in data["rows"]] == ["mm"] and data["gpu"][0]["kernels"] == 160
    result = CliRunner().invoke(cli, ["summary", path, "--csv", "--limit", "2", "--group-by", "shape"])
    assert result.stdout.splitlines()[0].startswith("name,input_shapes,")
    result = CliRunner().invoke(cli, ["summary", path, "--min-time", "1ms", "--json"])
    assert all(max(r["cpu_total_ns"], r["gpu_total_ns"]) >= 1e6 for r in json.loads(result.stdout)["rows"])
    result = CliRunner().invoke(cli, ["summary", path, "--min-time", "soon"])
    assert result.exit_code == 2 and "cannot read time 'soon'" in result.stderr


def test_summary_reads_only_what_its_tables_need(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`nvbridge summary` reads a third of the ops columns (SUMMARY_COLUMNS) and leaves the ops
    in file order; every grouping and option gives the rows key_averages gives on the dataset
    read whole and in op_id order."""
    out = tmp_path / "ds"
    # Small windows: ranges open across a cut are written late, so the file is out of op_id order.
    monkeypatch.setattr(importlib.import_module("nvbridge.conversion.pipeline"), "WINDOW_ROWS", 97)
    nvbridge.convert(real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"), out)
    in_file = np.asarray(pq.read_table(out / "ops.parquet", columns=["op_id"]).column("op_id"))
    assert (np.diff(in_file) < 0).any()
    whole = nvbridge.load(out)
    cases: list[tuple[dict[str, Any], list[str]]] = [
        ({}, []),
        ({"group_by_input_shape": True}, ["--group-by", "shape"]),
        ({"group_by_module": True}, ["--group-by", "module"]),
        ({"group_by_stack_n": 2}, ["--group-by", "stack", "--stack-depth", "2"]),
        ({"top_level_events_only": True}, ["--top-level"]),
        ({"device": 1}, ["--device", "1"]),
    ]
    for kwargs, flags in cases:
        result = CliRunner().invoke(cli, ["summary", str(out), "--json", "--limit", "-1", *flags])
        assert result.exit_code == 0, result.output
        expected = whole.key_averages(**kwargs, unattributed=True).sorted(row_limit=-1).to_pylist()
        # The JSON rows add the FLOPs rates (nvbridge.analysis.throughput) to key_averages' columns.
        rows = [{k: r[k] for k in expected[0]} for r in json.loads(result.stdout)["rows"]]
        assert rows == json.loads(json.dumps(expected)), flags
    assert len(nvbridge.load(out, nvbridge.analysis.SUMMARY_COLUMNS).ops.column_names) < len(whole.ops.column_names) / 2
