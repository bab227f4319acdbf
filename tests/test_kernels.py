"""``summary --kernels`` (issue 25, item 14): which kernels take the time, per GPU.

The independent side: kernel rows read with Python's sqlite3 from each export (tests/raw_gpu.py)
and grouped with plain loops; the launching ops from the dataset's own op ids, summed by loops.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.analysis.kernels import TOP_OPS, kernel_table
from nvbridge.analysis.op_table import NO_OP
from nvbridge.cli import cli
from nvbridge.export import parquet
from tests import raw_gpu
from tests.conftest import raw, real_db
from tests.raw_gpu import EVERY, path_of

FSDP = "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"


def _demangled(names: set[str]) -> dict[str, str]:
    """nvprof stores kernel names mangled: binutils' c++filt demangles them (not nvbridge's code)."""
    c_filt = shutil.which("c++filt")
    assert c_filt, "c++filt (binutils) demangles nvprof's kernel names for this test; install binutils"
    order = sorted(names)
    out = subprocess.run([c_filt], input="\n".join(order), capture_output=True, text=True, check=True).stdout
    return dict(zip(order, out.splitlines()))


def _summary(*args: str) -> Any:
    result = CliRunner().invoke(cli, ["summary", *args], env={"COLUMNS": ""})
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.parametrize("name", EVERY)
def test_kernel_figures_per_gpu_equal_raw_sql(name: str) -> None:
    path = path_of(name)
    want: dict[tuple[int, str], list[int]] = defaultdict(list)
    graphs = 0
    gpu = raw_gpu.read(path).gpu
    nvprof = bool(raw(path, "SELECT name FROM sqlite_master WHERE name = 'StringTable'"))
    names = _demangled({g.name for g in gpu}) if nvprof else {}
    for g in gpu:
        if g.kind == "kernel":
            want[(g.device, names.get(g.name, g.name))].append(g.end - g.start)
        graphs += g.kind == "graph"
    rows = json.loads(_summary(str(path), "--kernels", "--json", "--limit", "-1").stdout)["kernels"]
    got = {(r["device_id"], r["name"]): r for r in rows if not r["name"].startswith("CUDA graph ")}
    assert sum(r["calls"] for r in rows if r["name"].startswith("CUDA graph ")) == graphs
    assert set(got) == set(want)
    per_gpu: dict[int, int] = defaultdict(int)
    for (d, _), durations in want.items():
        per_gpu[d] += sum(durations)
    for key, durations in want.items():
        r = got[key]
        assert (r["calls"], r["total_ns"], r["min_ns"], r["max_ns"]) == (
            len(durations),
            sum(durations),
            min(durations),
            max(durations),
        )
        assert r["mean_ns"] == pytest.approx(sum(durations) / len(durations))
        assert r["share"] == pytest.approx(sum(durations) / per_gpu[key[0]])
    for d in per_gpu:  # each GPU's rows by total time, the largest first
        totals = [r["total_ns"] for r in rows if r["device_id"] == d]
        assert totals == sorted(totals, reverse=True)


@pytest.mark.parametrize("name", EVERY)
def test_launching_ops_are_the_ops_whose_ranges_launched_the_kernel(name: str) -> None:
    path = path_of(name)
    report = nvbridge.load(path)
    op_name = dict(zip(report.ops.column("op_id").to_pylist(), report.ops.column("op_name").to_pylist()))
    g = report.gpu_ops
    want: dict[tuple[int, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    columns = ("kind", "device_id", "name", "op_id", "start_ns", "end_ns")
    for kind, d, n, op, s, e in zip(*(g.column(c).to_pylist() for c in columns)):
        if kind in ("kernel", "graph"):
            want[(d, n)][NO_OP if op is None else op_name[op]] += e - s
    for r in kernel_table(path):
        ops = want[(r.device_id, r.name)]
        top = sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_OPS]
        assert [(o.op, o.ns) for o in r.ops] == top
        assert sum(ops.values()) == r.total_ns


def test_a_dataset_read_a_row_group_at_a_time_gives_the_same_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 101)
    nvbridge.convert(real_db(FSDP), tmp_path / "ds")
    assert kernel_table(tmp_path / "ds") == kernel_table(real_db(FSDP))


def test_options_limit_filter_device_and_forms() -> None:
    path = str(real_db(FSDP))
    every = json.loads(_summary(path, "--kernels", "--json", "--limit", "-1").stdout)["kernels"]
    two = json.loads(_summary(path, "--kernels", "--json", "--limit", "2").stdout)["kernels"]
    assert two == [r for r in every if r["device_id"] == 0][:2] + [r for r in every if r["device_id"] == 1][:2]
    nccl = json.loads(_summary(path, "--kernels", "--json", "--filter", "^nccl", "--device", "1").stdout)["kernels"]
    assert nccl and nccl == [r for r in every if r["device_id"] == 1 and r["name"].startswith("nccl")][:30]
    rows = list(csv.DictReader(io.StringIO(_summary(path, "--kernels", "--csv", "--limit", "-1").stdout)))
    assert [(r["name"], int(r["total_ns"]), json.loads(r["ops"])) for r in rows] == [
        (r["name"], r["total_ns"], r["ops"]) for r in every
    ]
    text = CliRunner().invoke(cli, ["summary", path, "--kernels"], env={"COLUMNS": "100"}).stdout
    assert "GPU 0 (" in text and "GPU 1 (" in text and max(map(len, text.splitlines())) <= 100
    assert "flash_attn::_flash_attn_forward" in text  # what launched the top kernel
    bad = CliRunner().invoke(cli, ["summary", path, "--kernels", "--group-by", "shape"])
    assert bad.exit_code == 2 and "--group-by shapes the op table" in bad.stderr
