"""Record a workload under Nsight Systems (``nsys profile -t nvtx``), as scripts/record/nsys.sh
does: nsys 2022.4 often leaves only a ``.qdstrm``, which QdstrmImporter imports, then
``nsys export`` writes the SQLite database the tests convert."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_nsys

ROOT = Path(__file__).resolve().parent.parent
IMPORTER = Path(os.environ.get("QDSTRM_IMPORTER", "/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter"))


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, **kwargs)  # type: ignore[call-overload,no-any-return]


def record(work: Path, name: str, *args: str) -> Path:
    """``python -m <name> <args>`` from the repository root under nsys; the exported database."""
    return record_command(work / name.rsplit(".", 1)[-1], [sys.executable, "-m", name, *args], ROOT)[0]


def record_command(rep: Path, command: list[str], cwd: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``command`` under ``nsys profile -t nvtx`` into ``rep``, imported and exported: the
    database ``rep.sqlite`` and nsys's run (its output says why a workload failed)."""
    nsys = require_nsys()
    env = {k: v for k, v in os.environ.items() if k != "NVTX_INJECTION64_PATH"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    argv = [nsys, "profile", "-t", "nvtx", "--sample=none", "--cpuctxsw=none", "-f", "true", "-o", str(rep)]
    for _ in range(2):  # one more try: nsys 2022.4 sometimes leaves nothing when other captures run at once
        profiled = _run([*argv, *command], env=env, cwd=cwd)
        if rep.with_suffix(".nsys-rep").exists() or rep.with_suffix(".qdstrm").exists():
            break
    nsys_rep = rep.with_suffix(".nsys-rep")
    if not nsys_rep.exists():  # 2022.4: "The importer binary and its dependencies were not found."
        qdstrm = rep.with_suffix(".qdstrm")
        assert qdstrm.exists(), f"nsys left neither .nsys-rep nor .qdstrm:\n{profiled.stdout}\n{profiled.stderr}"
        if not IMPORTER.is_file():
            pytest.fail(f"nsys did not import {qdstrm.name} and {IMPORTER} is missing (set QDSTRM_IMPORTER)")
        imported = _run([str(IMPORTER), "-i", str(qdstrm)], cwd=rep.parent)
        assert nsys_rep.exists(), f"QdstrmImporter failed:\n{imported.stdout}\n{imported.stderr}"
    db = rep.with_suffix(".sqlite")
    exported = _run([nsys, "export", "--type", "sqlite", "-f", "true", "-o", str(db), str(nsys_rep)], cwd=rep.parent)
    assert db.exists(), f"nsys export failed:\n{exported.stdout}\n{exported.stderr}"
    return db, profiled


_MEMORY_RUNS: dict[str, tuple[Path, dict[str, Any]]] = {}


def memory_run(workload: str, factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """scripts/workloads/memory.py's ``workload`` recorded under nsys with
    emit_nvtx(profile_memory=True) (the database), and torch.profiler(profile_memory=True)'s
    figures of the same workload run in another interpreter, nvbridge never imported. Recorded
    once per test session: several test modules compare against the same pair."""
    if workload not in _MEMORY_RUNS:
        work = factory.mktemp(f"memory_{workload}")
        db = record(work, "scripts.workloads.memory", workload, "nvbridge", str(work / "nvbridge.json"))
        facts = work / "torch.json"
        env = {k: v for k, v in os.environ.items() if k != "NVTX_INJECTION64_PATH"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        plain = _run(
            [sys.executable, "-m", "scripts.workloads.memory", workload, "torch", str(facts)], cwd=ROOT, env=env
        )
        assert facts.exists(), f"the torch run failed:\n{plain.stdout}\n{plain.stderr[-2000:]}"
        _MEMORY_RUNS[workload] = db, json.loads(facts.read_text())
    return _MEMORY_RUNS[workload]
