"""profile_memory's marks as Nsight Systems records them, and the CUDA script's refusal here.

The marks are read from the export with sqlite3 (not nvbridge's reader): NVTX_EVENTS rows of
eventType 34 (NvtxMark) whose domainId is the ``nvbridge`` domain's (its eventType 75 row). They
are compared with torch.profiler(profile_memory=True) run on the same workload in a process that
never imports nvbridge (scripts/workloads/memory.py ``torch`` mode).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="emit_nvtx needs torch (pip install 'nvbridge[torch]')")

from tests.conftest import require_nsys  # noqa: E402
from tests.nsys_recorded import record  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_db" / "memory_cpu.sqlite"
SAMPLE_TORCH = "2.13.0"  # the torch that recorded the sample (sample_db/README.md): its allocations

MARKS_SQL = """
SELECT e.text, e.globalTid FROM NVTX_EVENTS e
WHERE e.eventType = 34
  AND e.domainId IN (SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'nvbridge')
ORDER BY e.start
"""


def exported_marks(db: Path) -> list[tuple[str, int, int, int]]:
    """(device, bytes, total_allocated, total_reserved) of every mark in the nvbridge domain, in time order."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute(MARKS_SQL).fetchall()
    out = []
    for text, _tid in rows:
        if text.startswith("rank "):  # the process's rank mark (nvbridge.annotate._rank), no allocator event
            continue
        kind, device, address, size, allocated, reserved = text.split(" ")
        assert kind == "mem" and int(address) > 0, text
        out.append((device, int(size), int(allocated), int(reserved)))
    return out


def torch_events(workload: str, out: Path) -> list[tuple[str, int, int, int]]:
    """torch.profiler's memory events of ``workload``, nvbridge not imported."""
    env = {k: v for k, v in os.environ.items() if k != "NVTX_INJECTION64_PATH"}
    argv = [sys.executable, "-m", "scripts.workloads.memory", workload, "torch", str(out)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts: dict[str, Any] = json.loads(out.read_text())
    return [(e[2], e[3], e[4], e[5]) for e in facts["events"]]


def test_sample_marks_are_torchs_memory_events(tmp_path: Path) -> None:
    """The committed sample's marks: the spec's grammar, on the one thread that trained, and (with
    the torch that recorded it) exactly torch.profiler's memory events of the same workload."""
    ours = exported_marks(SAMPLE)
    assert len(ours) >= 300 and {device for device, *_ in ours} == {"cpu"}
    assert any(size < 0 for _, size, _, _ in ours) and all(reserved == 0 for *_, reserved in ours)
    con = sqlite3.connect(f"file:{SAMPLE}?mode=ro", uri=True)
    threads = {tid for _, tid in con.execute(MARKS_SQL).fetchall()}
    steps = con.execute("SELECT DISTINCT globalTid FROM NVTX_EVENTS WHERE text LIKE 'ProfilerStep#%'").fetchall()
    assert threads == {tid for (tid,) in steps}
    if not torch.__version__.startswith(SAMPLE_TORCH):
        pytest.skip(f"the sample's allocations are torch {SAMPLE_TORCH}'s; this is torch {torch.__version__}")
    assert ours == torch_events("cnn", tmp_path / "cnn.json")


def test_cuda_script_refuses_without_a_gpu(tmp_path: Path) -> None:
    """No GPU here: one line naming what is missing, exit 2, nothing written."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the script would record")
    out = tmp_path / "out"
    argv = [sys.executable, str(ROOT / "scripts" / "record" / "cuda_memory.py"), "--out", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1
    assert "no CUDA GPU" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.nsys
def test_nsys_records_the_marks(tmp_path: Path) -> None:
    """Live: the views workload under ``nsys profile -t nvtx``; the export's marks equal torch's events."""
    require_nsys()
    from nvbridge.annotate import _observer

    if _observer.load() is None:
        pytest.skip(f"observer unavailable: {_observer.unavailable_reason()}")
    db = record(tmp_path, "scripts.workloads.memory", "views", "nvbridge")  # tests/nsys_recorded.py
    ours = exported_marks(db)
    assert len(ours) >= 100
    assert ours == torch_events("views", tmp_path / "views.json")
