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
    """``python -c code`` (``-m`` when ``code`` starts with ``-m ``, a script file when it is one
    line ending in ``.py``) under the test collector."""
    log = workdir / f"{tag}.tsv"
    log.unlink(missing_ok=True)
    env = dict(os.environ, NVTX_INJECTION64_PATH=str(injection), NVBRIDGE_NVTX_LOG=str(log))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if code.startswith("-m "):
        program = code.split(" ", 1)
    else:
        program = [code] if code.endswith(".py") and "\n" not in code else ["-c", code]
    argv = [sys.executable, *program, *args]
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
        if message.startswith("rank "):
            continue  # the process's rank mark, the domain's other mark (spec: `rank <rank> <world> <local>`)
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
def _annotated(injection: Path, workload: str, workdir: Path) -> tuple[Logged, dict[str, Any]]:
    out = workdir / f"{workload}.nvbridge.json"
    code = "-m scripts.workloads.memory"
    logged = run_logged(injection, workdir, workload, code, workload, "nvbridge", str(out))
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
        if message.startswith("rank "):
            continue  # the rank mark
        _, _device, address, size, _, _ = message.split(" ")
        if int(size) > 0:
            live[address] = int(size)
        else:
            assert live.pop(address, None) in (-int(size), None)


def _op_ranges(logged: Logged) -> Counter[str]:
    return Counter(m[1] for name in logged.pushes if (m := OP_NAME.match(name)))


def _et(workload: str, workdir: Path, injection: Path | None) -> dict[str, Any]:
    """torch's ExecutionTraceObserver's op counts: alone (no collector, nvbridge never imported),
    or with ``injection`` inside emit_nvtx(profile_memory=True)."""
    out = workdir / f"{workload}.et{'.nvbridge' if injection else ''}.json"
    env = {k: v for k, v in os.environ.items() if k != "NVTX_INJECTION64_PATH"}
    if injection is not None:
        env.update(NVTX_INJECTION64_PATH=str(injection), NVBRIDGE_NVTX_LOG=os.devnull)
    argv = [sys.executable, "-m", "scripts.workloads.memory", workload, "et", str(out)]
    argv += ["nvbridge"] if injection is not None else []
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts: dict[str, Any] = json.loads(out.read_text())
    return facts


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_profile_memory_runs_the_same_aten_ops(injection: Path, workdir: Path, workload: str) -> None:
    """The annotated run (profile_memory on) runs exactly the un-annotated run's aten ops, as torch's
    ExecutionTraceObserver counts them (a global RecordFunction observer that needs no profiler
    slot, so it runs beside the reporter; torch.profiler would take the slot). The observer's op
    ranges name the same ops (their counts differ by design: the observer also gets records the
    trace observer leaves out, e.g. some of checkpoint's recomputation)."""
    alone, annotated = _et(workload, workdir, None), _et(workload, workdir, injection)
    assert alone["memory_recording"] is None and annotated["memory_recording"] is True
    theirs = Counter(alone["ops"])
    assert sum(theirs.values()) >= 50
    assert Counter(annotated["ops"]) == theirs
    logged, _ = _annotated(injection, workload, workdir)
    assert {m[1] for name in logged.pushes if (m := OP_NAME.match(name))} == set(theirs)


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
    elif sys.argv[1] == "crossed":  # torch.profiler started inside, stopped after the block
        nv = nvbridge.emit_nvtx(profile_memory=True)
        nv.__enter__()
        prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        prof.__enter__()
        work(5)
        nv.__exit__(None, None, None)
        prof.__exit__(None, None, None)
        from nvbridge.annotate import _observer

        facts["slot_left"] = bool(_observer.load().memory_active()) or torch.autograd._profiler_enabled()
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


def test_torch_profiler_outliving_the_block_stops_cleanly(injection: Path, workdir: Path) -> None:
    """Started inside, stopped after the block ended: torch.profiler keeps its events and stops
    normally, and nothing of nvbridge stays in the thread's slot (no marks afterwards)."""
    logged = run_logged(injection, workdir, "crossed", WITH_TORCH_PROFILER, "crossed")
    facts = json.loads(logged.stdout)
    assert facts["slot_left"] is False and facts["torch_memory_events"] >= 4
    sizes = _sizes(logged.marks)
    assert 5 * 5 * 4 not in sizes and 7 * 7 * 4 not in sizes  # torch's while it ran, nobody's after


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


FORKED = """
import ctypes, json, os, sys, threading
from collections import Counter
import torch

torch.set_num_interop_threads(2)


@torch.jit.script
def half(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).sum()


@torch.jit.script
def whole(x: torch.Tensor) -> torch.Tensor:
    return torch.jit.wait(torch.jit.fork(half, x)) + 1  # at::launch: another thread


x = torch.ones(1000)
for _ in range(3):
    whole(x)  # the profiling executor settles on its graph before recording
if sys.argv[1] == "torch":
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        whole(x)
    stack, sizes = list(prof.profiler.kineto_results.experimental_event_tree()), []
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.tag == torch._C._profiler._EventType.Allocation:
            sizes.append(node.extra_fields.alloc_size)
    facts = {"sizes": sorted(sizes)}
else:
    import nvbridge

    with nvbridge.emit_nvtx(profile_memory=True):
        whole(x)
    facts = {"main": threading.get_native_id()}
json.dump(facts, sys.stdout)
# torch's bug, not ours (pytorch/pytorch#38228): an interop pool thread that drops a Python
# reference after the fork's future completed takes the GIL while the interpreter finalizes,
# CPython exits that thread with pthread_exit, and the unwind through torch's noexcept frame
# aborts ("terminate called without an active exception"), in ~5% of runs on a loaded machine,
# nvbridge imported or not. So this script leaves without finalizing: every C stream (the test
# collector's log) flushed, then _exit.
sys.stdout.flush()
ctypes.CDLL(None).fflush(None)
os._exit(0)
"""


def test_threads_torch_hands_work_to_report_too(injection: Path, workdir: Path) -> None:
    """A task torch launches on another thread (at::launch, as the autograd engine hands a backward
    to its device threads) carries the reporter with its thread-local state, as torch.profiler's."""
    script = workdir / "forked.py"  # torch.jit.script reads its functions' source file
    script.write_text(FORKED)
    env = {k: v for k, v in os.environ.items() if k != "NVTX_INJECTION64_PATH"}
    proc = subprocess.run([sys.executable, str(script), "torch"], env=env, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = json.loads(proc.stdout)
    logged = run_logged(injection, workdir, "forked", str(script), "nvbridge")
    main = json.loads(logged.stdout)["main"]
    # The reporter was installed on the main thread only; the forked ``x * 2`` (1000 floats) is
    # marked on the thread that ran it. torch.profiler (thread-local too) sees that block as well.
    # (Which thread runs the code after ``wait`` varies from run to run, in both.)
    forked = [size for _, size, _, _ in mem_events([m for m in logged.marks if m[0] != main])]
    assert 4000 in forked and -4000 in [size for _, size, _, _ in mem_events(logged.marks)]
    assert 4000 in theirs["sizes"]
