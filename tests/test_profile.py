"""``nvbridge profile`` and reports given as they come out of nsys (.nsys-rep, .qdstrm): one
command from a script to its table, checked against NVIDIA's own export of the same report."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import ROOT, require_nsys

WORKLOAD = """
import torch, nvbridge
with nvbridge.emit_nvtx() as nv:
    for _ in range(3):
        nv.step()
        x = torch.ones(32, 32, requires_grad=True)
        (x @ x).relu().sum().backward()
"""


def _nvbridge(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvbridge", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.nsys
def test_profile_records_converts_and_summarizes(tmp_path: Path) -> None:
    nsys = require_nsys()
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(WORKLOAD)
    proc = _nvbridge("profile", "-o", "out", "--keep-report", "kept", "--", sys.executable, script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Name" in proc.stdout and "aten::mm" in proc.stdout and "# of Calls" in proc.stdout
    [kept] = [p for p in tmp_path.iterdir() if p.name.startswith("kept.")]
    assert kept.suffix in (".nsys-rep", ".qdstrm")
    # The kept report converts on its own (exported with nsys) to the same ops.
    again = _nvbridge("convert", kept, "-o", "again", "-q", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    ops = pq.read_table(tmp_path / "out" / "ops.parquet")
    assert ops.equals(pq.read_table(tmp_path / "again" / "ops.parquet"))
    # Independent side: NVIDIA's export of the same report, read with raw SQL.
    rep = kept
    if kept.suffix == ".qdstrm":
        from nvbridge.readers.sources import _importer

        rep = tmp_path / "imported.nsys-rep"
        subprocess.run(
            [_importer(nsys, kept.name), "-i", str(kept), "-o", str(rep)], check=True, capture_output=True, timeout=300
        )
    db = tmp_path / "nvidia.sqlite"
    subprocess.run(
        [nsys, "export", "--type", "sqlite", "-o", str(db), str(rep)], check=True, capture_output=True, timeout=300
    )
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    ranges = con.execute(
        "SELECT s.value FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
        "WHERE e.eventType = 59 UNION ALL SELECT text FROM NVTX_EVENTS "
        "WHERE eventType = 59 AND text IS NOT NULL"
    ).fetchall()
    con.close()
    assert ops.num_rows == len(ranges) > 30
    assert sorted(ops.column("name").to_pylist()) == sorted(r[0] for r in ranges)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["again", "imported.nsys-rep", "kept.qdstrm", "nvidia.sqlite", "out", "train.py"]
        if kept.suffix == ".qdstrm"
        else ["again", kept.name, "nvidia.sqlite", "out", "train.py"]
    )


def test_profile_needs_a_command(tmp_path: Path) -> None:
    proc = _nvbridge("profile", "-o", "out", "--", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.startswith("Error: give the command to profile")
    assert proc.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []
