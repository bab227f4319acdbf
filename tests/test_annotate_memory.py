"""emit_nvtx(profile_memory=True) against torch.profiler(profile_memory=True) runs without nvbridge.

Each workload of scripts/workloads/memory.py runs in fresh interpreters: once under torch.profiler
alone (nvbridge never imported: the reference), once under emit_nvtx(profile_memory=True) with the
test NVTX collector attached. Both are deterministic and start from c10's zeroed counters, so the
allocator's events must come out the same: every ``mem`` mark in the ``nvbridge`` domain, in
order, carries the device, signed bytes and totals of torch's memory event at the same position,
and the aten ops the annotated run ran (the observer's ranges) are the un-annotated run's.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="emit_nvtx needs torch (pip install 'nvbridge[torch]')")

from nvbridge.annotate import _observer  # noqa: E402
from scripts.workloads.memory import WORKLOADS  # noqa: E402

if _observer.load() is None:
    pytest.skip(f"observer unavailable: {_observer.unavailable_reason()}", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
# The spec's grammar: mem <device> <address> <bytes> <total_allocated> <total_reserved>.
MARK = re.compile(
    r"^mem (?P<device>cpu|[a-z]+:\d+) (?P<address>\d+) (?P<bytes>-?\d+) (?P<alloc>\d+) (?P<reserved>\d+)$"
)
OP_NAME = re.compile(r"^(aten::\w+(?:\.\w+)?)(?:, |$)")


@dataclass
class Logged:
    """The collector's log of one run: marks (thread, domain, message) and pushed range names."""

    marks: list[tuple[int, str, str]]
    pushes: list[str]
    stdout: str
    stderr: str


def run_logged(injection: Path, workdir: Path, tag: str, code: str, *args: str) -> Logged:
    """``python -c code`` (or ``-m`` when ``code`` starts with ``-m ``) under the test collector."""
    log = workdir / f"{tag}.tsv"
    log.unlink(missing_ok=True)
    env = dict(os.environ, NVTX_INJECTION64_PATH=str(injection), NVBRIDGE_NVTX_LOG=str(log))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    argv = [sys.executable, *(code.split(" ", 1) if code.startswith("-m ") else ["-c", code]), *args]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    marks, pushes = [], []
    for line in log.read_text().splitlines() if log.exists() else []:
        _ns, tid, event, domain, message = line.split("\t", 4)
        if event == "mark" and not message.startswith("rank "):  # not the process's rank mark (docs/ranks.md)
            marks.append((int(tid), domain, message))
        elif event == "push":
            pushes.append(message)
    return Logged(marks, pushes, proc.stdout, proc.stderr)


def mem_events(marks: list[tuple[int, str, str]]) -> list[tuple[str, int, int, int]]:
    """(device, bytes, total_allocated, total_reserved) of each ``mem`` mark in the nvbridge domain."""
    out = []
    for _tid, domain, message in marks:
        assert domain == "nvbridge", (domain, message)
        match = MARK.match(message)
        assert match is not None, message
        out.append((match["device"], int(match["bytes"]), int(match["alloc"]), int(match["reserved"])))
    return out


@functools.cache
def _reference(workload: str, workdir: Path) -> dict[str, Any]:
    out = workdir / f"{workload}.torch.json"
    env = dict(os.environ)
    env.pop("NVTX_INJECTION64_PATH", None)
    argv = [sys.executable, "-m", "scripts.workloads.memory", workload, "torch", str(out)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts: dict[str, Any] = json.loads(out.read_text())
    return facts


@functools.cache
def _annotated(injection: Path, workload: str, workdir: Path, mode: str = "nvbridge") -> tuple[Logged, dict[str, Any]]:
    out = workdir / f"{workload}.{mode}.json"
    code = "-m scripts.workloads.memory"
    logged = run_logged(injection, workdir, f"{workload}.{mode}", code, workload, mode, str(out))
    return logged, json.loads(out.read_text())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("memory")


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_marks_are_torchs_memory_events(injection: Path, workdir: Path, workload: str) -> None:
    """Every allocator event torch.profiler records, and nothing else, as a mark with its fields."""
    theirs = [(e[2], e[3], e[4], e[5]) for e in _reference(workload, workdir)["events"]]
    logged, facts = _annotated(injection, workload, workdir)
    assert facts["backend"] == "observer" and facts["memory_recording"]
    ours = mem_events(logged.marks)
    assert len(theirs) >= 100
    assert any(b < 0 for _, b, _, _ in theirs) and any(b > 0 for _, b, _, _ in theirs)
    assert ours == theirs
    assert facts["events"] == len(ours)  # the reporter's own count: no mark lost or doubled
    # A free names the address of a live block of the same size (the pairing memread relies on).
    live: dict[str, int] = {}
    for _tid, _domain, message in logged.marks:
        _, _device, address, size, _, _ = message.split(" ")
        if int(size) > 0:
            live[address] = int(size)
        else:
            assert live.pop(address, None) in (-int(size), None)


def _op_ranges(logged: Logged) -> Counter[str]:
    return Counter(m[1] for name in logged.pushes if (m := OP_NAME.match(name)))


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_profile_memory_runs_the_same_aten_ops(injection: Path, workdir: Path, workload: str) -> None:
    """With profile_memory on, the observer sees exactly the RecordFunctions it sees without (every
    op, nested dispatcher calls included), and the ops are those the un-annotated run ran.

    The observer's ranges hold some nested same-name records torch.profiler does not list (an
    ``aten::mean`` inside ``aten::mean``); that the observer itself changes no op is
    tests/test_annotate_exact.py's check (torch.profiler's op multiset in both runs), which cannot
    run here: torch.profiler inside the block takes the allocator events (see docs/annotate.md).
    """
    with_memory, _ = _annotated(injection, workload, workdir)
    without, _ = _annotated(injection, workload, workdir, "ops")
    assert mem_events(without.marks) == []
    ours = _op_ranges(with_memory)
    assert sum(ours.values()) >= 50
    assert ours == _op_ranges(without)
    theirs = {r["name"] for r in _reference(workload, workdir)["key_averages"] if r["name"].startswith("aten::")}
    assert set(ours) == theirs


WITH_TORCH_PROFILER = """
import json, sys, warnings
import torch
from torch.profiler import ProfilerActivity, profile
import nvbridge
from nvbridge.annotate import MemoryNotRecordedWarning

warnings.simplefilter("always")
mark_log = []

def work(size):
    x = torch.ones(size, size, requires_grad=True)
    (x * 2).sum().backward()

def memory_rows(prof):
    return sum(1 for e in prof.events() if e.name == "[memory]")

facts = {}
with warnings.catch_warnings(record=True) as caught:
    if sys.argv[1] == "inside":
        with nvbridge.emit_nvtx(profile_memory=True) as nv:
            work(3)
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                facts["recording_inside"] = nv.memory_recording
                work(5)
            facts["recording_after"] = nv.memory_recording
            work(7)
    else:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            with nvbridge.emit_nvtx(profile_memory=True) as nv:
                facts["recording"] = nv.memory_recording
                work(5)
facts["torch_memory_events"] = memory_rows(prof)
facts["warnings"] = [str(w.message) for w in caught if w.category is MemoryNotRecordedWarning]
json.dump(facts, sys.stdout)
"""


def _sizes(marks: list[tuple[int, str, str]]) -> list[int]:
    return [b for _, b, _, _ in mem_events(marks) if b > 0]


def test_torch_profiler_started_inside_takes_the_events_while_it_runs(injection: Path, workdir: Path) -> None:
    """While torch.profiler runs inside the block its events are torch's alone; ours resume after."""
    logged = run_logged(injection, workdir, "inside", WITH_TORCH_PROFILER, "inside")
    facts = json.loads(logged.stdout)
    assert facts["recording_inside"] is False and facts["recording_after"] is True
    assert facts["torch_memory_events"] >= 4  # torch.profiler's profile_memory still works inside
    sizes = _sizes(logged.marks)
    assert 3 * 3 * 4 in sizes and 7 * 7 * 4 in sizes and 5 * 5 * 4 not in sizes
    assert len(facts["warnings"]) == 1 and "torch.profiler started inside" in facts["warnings"][0]


def test_block_inside_torch_profiler_leaves_the_slot_to_it(injection: Path, workdir: Path) -> None:
    """torch.profiler first: nvbridge records no allocator events, says so once; torch keeps its own."""
    logged = run_logged(injection, workdir, "outside", WITH_TORCH_PROFILER, "outside")
    facts = json.loads(logged.stdout)
    assert facts["recording"] is False and facts["torch_memory_events"] >= 4
    assert mem_events(logged.marks) == []
    assert len(facts["warnings"]) == 1 and "already runs on this thread" in facts["warnings"][0]


PYTHON_BACKEND = """
import json, sys, warnings
import torch
import nvbridge
from nvbridge.annotate import MemoryNotRecordedWarning

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(2):
        with nvbridge.emit_nvtx(profile_memory=True, backend="python") as nv:
            (torch.ones(4, 4, requires_grad=True) * 2).sum().backward()
json.dump({"backend": nv.active_backend, "recording": nv.memory_recording,
           "warnings": [str(w.message) for w in caught if w.category is MemoryNotRecordedWarning]}, sys.stdout)
"""


def test_python_backend_warns_once_and_marks_nothing(injection: Path, workdir: Path) -> None:
    logged = run_logged(injection, workdir, "python", PYTHON_BACKEND)
    facts = json.loads(logged.stdout)
    assert facts["backend"] == "off" and facts["recording"] is False
    assert len(facts["warnings"]) == 1 and "only the observer backend" in facts["warnings"][0]
    assert mem_events(logged.marks) == []
    assert any(name.startswith("aten::mul") for name in logged.pushes)  # its op ranges still record
