"""``nvbridge profile`` and reports given as they come out of nsys (.nsys-rep, .qdstrm): one
command from a script to its table, checked against NVIDIA's own export of the same report."""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from nvbridge.conversion.record import _Relay
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
    """issue 25, item 12: with nsys 2022.4 (no importer found) `--keep-report kept.nsys-rep` kept a
    26 MB kept.qdstrm, said nothing, showed nsys's "Importer error status" and read "report.sqlite"
    from a temporary folder. Now the capture is imported: kept.nsys-rep is a report nsys exports,
    the importer complaint is not shown on a run that succeeds, and the summary names the command."""
    nsys = require_nsys()
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(WORKLOAD)
    (tmp_path / "kept.qdstrm").write_bytes(b"an older capture")  # never replaced: nothing writes a .qdstrm
    proc = _nvbridge(
        "profile", "-o", "out", "--keep-report", "kept.nsys-rep", "--", sys.executable, script, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "Name" in proc.stdout and "aten::mm" in proc.stdout and "# of Calls" in proc.stdout
    assert "Importer error status" not in proc.stderr + proc.stdout
    assert "importer" not in proc.stderr.lower()
    assert f"Read the recording of `{sys.executable} {script}` (kept in kept.nsys-rep)" in " ".join(proc.stdout.split())
    said = " ".join(proc.stdout.split()).split("Read ", 1)[1].split(" Wrote ", 1)[0]
    assert "nvbridge-profile-" not in said and "report.sqlite" not in said  # no temporary file named as read
    kept = tmp_path / "kept.nsys-rep"
    assert kept.read_bytes()[:4] != b"SQLi" and kept.stat().st_size > 0
    assert (tmp_path / "kept.qdstrm").read_bytes() == b"an older capture"
    # The kept report converts on its own (exported with nsys) to the same ops.
    again = _nvbridge("convert", kept, "-o", "again", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("Read kept.nsys-rep: ")  # not its export's temporary kept.sqlite
    ops = pq.read_table(tmp_path / "out" / "ops.parquet")
    assert ops.equals(pq.read_table(tmp_path / "again" / "ops.parquet"))
    # Independent side: NVIDIA's export of the kept report, read with raw SQL.
    db = tmp_path / "nvidia.sqlite"
    subprocess.run(
        [nsys, "export", "--type", "sqlite", "-o", str(db), str(kept)], check=True, capture_output=True, timeout=300
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
    meta = pq.read_table(tmp_path / "out" / "meta.parquet").to_pylist()
    assert {"key": "source", "value": "kept.nsys-rep"} in meta  # the dataset names the kept report
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["again", "kept.nsys-rep", "kept.qdstrm", "nvidia.sqlite", "out", "train.py"]
    )


@pytest.mark.nsys
@pytest.mark.parametrize("keep", [None, "run.node0.nsys-rep"])
def test_names_with_dots_are_recorded(tmp_path: Path, keep: str | None) -> None:
    """A script or kept report whose name has a dot before its suffix (``train.v2.py``,
    ``run.node0.nsys-rep``): nsys adds its suffix to the whole name, and nvbridge looked for
    ``train.nsys-rep`` / ``run.nsys-rep`` ("nsys profile recorded nothing")."""
    require_nsys()
    pytest.importorskip("torch")
    script = tmp_path / "train.v2.py"
    script.write_text(WORKLOAD)
    kept = ["--keep-report", keep] if keep else []
    proc = _nvbridge("profile", "-o", "out", *kept, "--", sys.executable, script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "aten::mm" in proc.stdout
    source = {r["key"]: r["value"] for r in pq.read_table(tmp_path / "out" / "meta.parquet").to_pylist()}["source"]
    assert source == (keep or "train.v2.nsys-rep")
    if keep:
        assert (tmp_path / keep).stat().st_size > 0


@pytest.mark.nsys
def test_an_existing_report_is_kept_without_force(tmp_path: Path) -> None:
    """The report to keep is checked before anything runs: an existing one needs --force."""
    require_nsys()
    (tmp_path / "kept.nsys-rep").write_bytes(b"keep me")
    proc = _nvbridge("profile", "-o", "out", "--keep-report", "kept", "--", sys.executable, "-c", "pass", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "kept.nsys-rep already exists" in proc.stderr and "--force" in proc.stderr
    assert (tmp_path / "kept.nsys-rep").read_bytes() == b"keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.nsys-rep"]
    other = _nvbridge("profile", "-o", "out", "--keep-report", "kept.qdstrm", "--", "true", cwd=tmp_path)
    assert other.returncode == 1 and "name the report like kept.nsys-rep" in other.stderr


def test_relay_hides_only_the_importer_lines() -> None:
    """nsys's stderr is relayed as it comes (a progress bar's carriage returns at once); only its
    lines about the importer it could not find are held back."""
    out = io.BytesIO()
    relay = _Relay(out)
    relay.feed(b"epoch 1 10%\repoch 1 ")
    assert out.getvalue() == b"epoch 1 10%\repoch 1 "  # shown before its line ends
    relay.feed(b"20%\nImporter error status: The importer binary and its dependencies were not found.\nUnab")
    assert out.getvalue() == b"epoch 1 10%\repoch 1 20%\n"  # "Unab" may be the next importer line
    relay.feed(b"le to retrieve the importer version: skipping importation of the QDSTRM file.\nUnable to open x\n")
    relay.feed(b"Impo")
    relay.close()
    assert out.getvalue() == b"epoch 1 10%\repoch 1 20%\nUnable to open x\nImpo"
    assert [line[:22] for line in relay.hidden] == [b"Importer error status:", b"Unable to retrieve the"]


def test_profile_needs_a_command(tmp_path: Path) -> None:
    proc = _nvbridge("profile", "-o", "out", "--", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.startswith("Error: give the command to profile")
    assert proc.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []
