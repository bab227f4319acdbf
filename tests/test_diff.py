"""diff: nothing against itself; the planted extra matmul is the top row with raw-SQL deltas.

sample_db/diff_extra_cpu+synthetic_gpu.sqlite is diff_base_cpu's training loop with one extra
``torch.mm`` in module ``blocks.1`` (scripts/workloads/advise.py); their GPU rows are SYNTHETIC
(scripts/record/advise_gpu.py), a fixed function of op and shapes, so only the planted change moves
GPU time. Expected figures come from the files' raw NVTX and CUDA tables.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.analysis.diff import diff_reports
from nvbridge.cli import cli
from tests.conftest import NSYS_FILES, SAMPLE_DB, real_db
from tests.conftest import raw as raw_sql

BASE = SAMPLE_DB / "diff_base_cpu+synthetic_gpu.sqlite"
EXTRA = SAMPLE_DB / "diff_extra_cpu+synthetic_gpu.sqlite"


def raw(path: Path, sql: str) -> list[tuple[Any, ...]]:
    return raw_sql(path, sql)


def planted(path: Path) -> tuple[int, int, int]:
    """(calls, self CPU ns, self GPU ns) of the aten::mm ranges inside ``blocks.1`` ranges."""
    mms = raw(
        path,
        """SELECT m.globalTid, m.start, m.end FROM NVTX_EVENTS AS m JOIN NVTX_EVENTS AS b
        ON b.globalTid = m.globalTid AND b.start <= m.start AND m.end <= b.end
        WHERE b.text = 'nn.Module: blocks.1 (Block)' AND m.text LIKE 'aten::mm,%'""",
    )
    ranges = raw(path, "SELECT globalTid, start, end FROM NVTX_EVENTS WHERE eventType = 59")
    tables = {t for (t,) in raw(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    kernels = (
        []
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables
        else raw(
            path,
            """
        SELECT r.globalTid, r.start, r.end, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL AS k
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r ON r.correlationId = k.correlationId""",
        )
    )
    self_cpu = self_gpu = 0
    for tid, s, e in mms:
        children = [(cs, ce) for t, cs, ce in ranges if t == tid and s <= cs and ce <= e and (cs, ce) != (s, e)]
        self_cpu += (e - s) - sum(ce - cs for cs, ce in children)
        for t, ks, ke, dur in kernels:
            if t == tid and s <= ks and ke <= e and not any(cs <= ks and ke <= ce for cs, ce in children):
                self_gpu += dur
    return len(mms), self_cpu, self_gpu


def test_a_report_against_itself_has_no_differences() -> None:
    report = nvbridge.load(BASE)
    d = diff_reports(report, report)
    assert d.ops == () and d.kernels == () and d.steps == () and d.regressions(0.0) == []
    result = CliRunner().invoke(cli, ["diff", str(BASE), str(BASE), "--fail-above", "5%"])
    assert result.exit_code == 0 and result.output.rstrip().endswith("No differences.")


def test_the_planted_matmul_is_the_top_row_with_raw_sql_deltas() -> None:
    d = diff_reports(nvbridge.load(BASE), nvbridge.load(EXTRA))
    top = d.ops[0]
    assert (top.op, top.shapes, top.backward, top.module, top.status) == (
        "aten::mm",
        "[[16, 64], [64, 64]]",
        False,
        "blocks.1",
        "new",
    )
    calls, self_cpu, self_gpu = planted(EXTRA)
    assert (top.delta("calls"), top.delta("self_cpu_ns"), top.delta("self_gpu_ns")) == (calls, self_cpu, self_gpu)
    assert calls == 3 and self_gpu > 0
    assert planted(BASE) == (0, 0, 0)
    gpu = [
        sum(
            e - s
            for s, e in raw(
                p,
                "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
                "SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY",
            )
        )
        for p in (BASE, EXTRA)
    ]
    assert d.gpu_ns == (gpu[0], gpu[1])


def test_cpu_only_recordings_show_the_new_row_with_its_calls() -> None:
    base, extra = SAMPLE_DB / "diff_base_cpu.sqlite", SAMPLE_DB / "diff_extra_cpu.sqlite"
    d = diff_reports(nvbridge.load(base), nvbridge.load(extra))
    new = [o for o in d.ops if o.status == "new" and o.op == "aten::mm" and o.module == "blocks.1"]
    calls, self_cpu, _ = planted(extra)
    assert len(new) == 1 and (new[0].delta("calls"), new[0].delta("self_cpu_ns")) == (calls, self_cpu)
    assert d.gpu_ns == (0, 0) and d.kernels == ()


def test_fail_above_gates_on_gpu_time_and_json_agrees() -> None:
    runner = CliRunner()
    gated = runner.invoke(cli, ["diff", str(BASE), str(EXTRA), "--fail-above", "5%"])
    assert gated.exit_code == 1
    assert "FAIL: total GPU time +" in gated.output and "above --fail-above 5%" in gated.output
    assert max(len(line) for line in gated.output.splitlines()) <= 100
    loose = runner.invoke(cli, ["diff", str(BASE), str(EXTRA), "--fail-above", "50%", "--json"])
    assert loose.exit_code == 0, loose.output
    data = json.loads(loose.output)
    (ga, gb) = data["gpu_ns"]
    assert 1.05 < gb / ga < 1.5 and data["regressions"] == []
    calls, self_cpu, self_gpu = planted(EXTRA)
    assert data["ops"][0]["delta"]["self_gpu_ns"] == self_gpu and data["ops"][0]["b"]["calls"] == calls
    bad = runner.invoke(cli, ["diff", str(BASE), str(EXTRA), "--fail-above", "five"])
    assert bad.exit_code == 2 and "not a percentage" in bad.output


def test_real_export_against_itself_and_a_missing_file() -> None:
    path = str(real_db("nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"))
    runner = CliRunner()
    assert runner.invoke(cli, ["diff", path, path]).output.rstrip().endswith("No differences.")
    missing = runner.invoke(cli, ["diff", path, "nowhere.sqlite"])
    assert missing.exit_code == 1 and missing.output.startswith("Error: ") and missing.output.count("\n") == 1


def test_partitioned_datasets_add_their_reports_up(tmp_path: Path) -> None:
    other = SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite"
    before, after = tmp_path / "before", tmp_path / "after"
    nvbridge.convert([BASE, other], before)
    nvbridge.convert([EXTRA, other], after)
    result = CliRunner().invoke(cli, ["diff", str(before), str(after), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    top = data["ops"][0]
    calls, self_cpu, self_gpu = planted(EXTRA)
    assert (top["op"], top["module"], top["status"]) == ("aten::mm", "blocks.1", "new")
    delta = top["delta"]
    assert (delta["calls"], delta["self_cpu_ns"], delta["self_gpu_ns"]) == (calls, self_cpu, self_gpu)
    single = diff_reports(nvbridge.load(BASE), nvbridge.load(EXTRA))
    assert data["gpu_ns"][1] - data["gpu_ns"][0] == single.gpu_ns[1] - single.gpu_ns[0]
    same = CliRunner().invoke(cli, ["diff", str(before), str(before)])
    assert same.output.rstrip().endswith("No differences.")


EMPTY = "nvprof-2020-empty-capture.sqlite"
KERNELS_SQL = (
    "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN StringIds AS s ON s.id = k.demangledName"
)


@pytest.mark.parametrize("name", [n for n in NSYS_FILES if n != "nsys-2021-pre-metadata.sqlite"])
def test_distinct_kernel_names_are_never_cut_to_the_same_text(name: str) -> None:
    """issue 25, item 15: a 60-column cut made `void at::native::elementwise_kernel<(int)128,
    (int)2, void ~` of several kernels; each row must name one kernel of the raw table, and
    distinct kernels read differently."""
    path = real_db(name)
    names = [n for (n,) in raw(path, KERNELS_SQL)]
    result = CliRunner().invoke(cli, ["diff", str(path), str(real_db(EMPTY)), "--limit", "-1"])
    assert result.exit_code == 0, result.output
    section = result.stdout.split("\nkernel ", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    cells = [line[:60].rstrip() for line in section if not line.startswith(("Memcpy", "Memset"))]
    assert len(cells) == len(set(cells)) == len(names)
    for cell in cells:
        head, _, rest = cell.partition("~")
        middle, _, _ = rest.partition("~")
        if middle.startswith("#"):  # no stretch of the name is its own: its head and a hash of it
            tag = middle[1:]
            matches = [n for n in names if n.startswith(head) and hashlib.sha1(n.encode()).hexdigest()[:6] == tag]
        else:
            matches = [n for n in names if n == cell or (n.startswith(head) and middle in n[len(head) :])]
        assert len(matches) == 1, (cell, matches)
