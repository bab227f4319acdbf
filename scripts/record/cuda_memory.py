#!/usr/bin/env python3
"""The CUDA side of profile_memory, for a GPU machine: record, convert, compare with torch's own numbers.

    python scripts/record/cuda_memory.py [--out cuda_memory_out] [--steps 4]

Needs an NVIDIA GPU, a CUDA build of torch and Nsight Systems (``nsys``); without them it prints
one line saying what is missing and exits 2, creating nothing. It runs, from this checkout:

1. the reference: a small CUDA training loop (conv, linear, Adam; ``--steps`` steps, each a
   ``record_function("ProfilerStep#N")``) under torch.profiler(profile_memory=True), nvbridge not
   imported: torch's memory events and each step's highest ``Total Allocated`` per device;
2. the same loop under ``nsys profile -t cuda,nvtx --cuda-memory-usage=true`` with
   ``emit_nvtx(profile_memory=True)``, steps from ``nv.step()``, recording
   ``torch.cuda.max_memory_allocated()`` for the run and for each step; exported to SQLite;
3. ``python -m nvbridge convert`` of that export into ``OUT/dataset``.

Then it compares, and exits 1 on any difference: the highest ``total_allocated`` of the
``mem cuda:N`` marks (read from NVTX_EVENTS with sqlite3) against max_memory_allocated(); each
step's highest against the step's max_memory_allocated() and against torch.profiler's step peak;
the dataset's ``memory`` table (rows of source ``nvbridge``) against the marks. What Nsight
Systems itself recorded (CUDA_GPU_MEMORY_USAGE_EVENTS, the driver's view: the caching allocator's
reserved segments) is printed beside torch.cuda.max_memory_reserved(), not compared: the two
count different things.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
IMPORTER = os.environ.get("QDSTRM_IMPORTER", "/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter")


def refusal() -> str | None:
    """Why this machine cannot run the recording (None when it can)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"no CUDA GPU (torch {torch.__version__}: torch.cuda.is_available() is False)"
    if shutil.which("nsys") is None:
        return "nsys is not on PATH (install Nsight Systems)"
    return None


def _loop(steps: int) -> Any:
    import torch
    from torch import nn

    from scripts.workloads.loop import Training

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 32 * 32, 10)).cuda()
    batches = [torch.randn(8, 3, 32, 32, device="cuda") for _ in range(steps)]
    return Training(torch.optim.Adam(model.parameters()), batches, lambda b: model(b).square().mean())


def child_torch(steps: int, out: Path) -> None:
    """The reference: torch.profiler(profile_memory=True), nvbridge never imported."""
    import torch

    from scripts.workloads.memory import TorchSteps, torch_memory

    training, step = _loop(steps), TorchSteps()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities, profile_memory=True) as prof:
        training.run(step)
        step.close()
        torch.cuda.synchronize()
    out.write_text(json.dumps(torch_memory(prof)))


def child_nvbridge(steps: int, out: Path) -> None:
    """The recorded run: emit_nvtx(profile_memory=True), torch.cuda's peaks per step and overall."""
    import torch

    import nvbridge

    training = _loop(steps)
    peaks: list[int] = []  # torch.cuda.max_memory_allocated() of each step, reset at each step's start
    started = [False]
    with nvbridge.emit_nvtx(profile_memory=True) as nv:

        def step() -> None:
            if started[0]:
                peaks.append(torch.cuda.max_memory_allocated())  # the step that just ended
            started[0] = True
            torch.cuda.reset_peak_memory_stats()
            nv.step()

        training.run(step)
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated())
        recording = nv.memory_recording
    facts = {"recording": recording, "device": f"cuda:{torch.cuda.current_device()}", "step_peaks": peaks}
    facts["max_memory_reserved"] = torch.cuda.max_memory_reserved()
    out.write_text(json.dumps(facts))


def _run(argv: list[str], **kwargs: Any) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    subprocess.run(argv, check=True, cwd=ROOT, env=env, **kwargs)


def record(out: Path, steps: int) -> Path:
    """Steps 1-3: the reference JSON, the nsys capture exported to SQLite, the dataset."""
    me = [sys.executable, str(Path(__file__).resolve()), "--steps", str(steps)]
    _run([*me, "--child", "torch", str(out / "torch.json")])
    rep = out / "cuda_memory"
    nsys = ["nsys", "profile", "-t", "cuda,nvtx", "--cuda-memory-usage=true", "--sample=none", "-f", "true"]
    _run([*nsys, "-o", str(rep), *me, "--child", "nvbridge", str(out / "nvbridge.json")])
    if not rep.with_suffix(".nsys-rep").exists():  # nsys 2022.4 often leaves only the .qdstrm
        _run([IMPORTER, "-i", str(rep.with_suffix(".qdstrm"))])
    db = rep.with_suffix(".sqlite")
    _run(["nsys", "export", "--type", "sqlite", "-f", "true", "-o", str(db), str(rep.with_suffix(".nsys-rep"))])
    _run([sys.executable, "-m", "nvbridge", "convert", str(db), "-o", str(out / "dataset")])
    return db


def marks(db: Path, device: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(time, total_allocated) of the ``mem <device>`` marks and (start, end) of the step ranges."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT e.start, e.text FROM NVTX_EVENTS e JOIN NVTX_EVENTS d ON d.eventType = 75 "
        "AND d.domainId = e.domainId AND d.text = 'nvbridge' WHERE e.eventType = 34 AND e.text LIKE ? "
        "ORDER BY e.start",
        (f"mem {device} %",),
    ).fetchall()
    steps = con.execute("SELECT start, end FROM NVTX_EVENTS WHERE text LIKE 'ProfilerStep#%' ORDER BY start")
    ranges = [(int(s), int(e)) for s, e in steps.fetchall()]
    return [(int(t), int(text.split()[4])) for t, text in rows], ranges


def compare(out: Path, db: Path) -> list[tuple[str, object, object]]:
    """(what, nvbridge's number, the reference's) for every comparison."""
    ours, torch_ref = json.loads((out / "nvbridge.json").read_text()), json.loads((out / "torch.json").read_text())
    device = ours["device"]
    events, steps = marks(db, device)
    checks: list[tuple[str, object, object]] = [("recording", ours["recording"], True)]
    checks.append(("peak: marks vs max_memory_allocated()", max(t for _, t in events), max(ours["step_peaks"])))
    theirs = [s["peaks"].get(device) for s in torch_ref["steps"]]
    for i, (start, end) in enumerate(steps):
        peak = max((t for ts, t in events if start <= ts <= end), default=None)
        checks.append((f"step {i}: marks vs max_memory_allocated()", peak, ours["step_peaks"][i]))
        checks.append((f"step {i}: marks vs torch.profiler", peak, theirs[i] if i < len(theirs) else None))
    table = out / "dataset" / "memory.parquet"
    if table.exists():
        import pyarrow.parquet as pq

        rows = pq.read_table(table, columns=["device", "total_allocated", "source"]).to_pylist()
        mine = [r["total_allocated"] for r in rows if r["source"] == "nvbridge" and r["device"] == device]
        checks.append(("dataset memory rows (nvbridge) vs marks", len(mine), len(events)))
        checks.append(("dataset peak vs marks", max(mine, default=None), max(t for _, t in events)))
    else:
        checks.append(("dataset has a memory table", False, True))
    return checks


def nsys_view(db: Path) -> str:
    """What Nsight Systems recorded itself (printed, not compared)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    has = con.execute("SELECT 1 FROM sqlite_master WHERE name = 'CUDA_GPU_MEMORY_USAGE_EVENTS'").fetchone()
    if not has:
        return "no CUDA_GPU_MEMORY_USAGE_EVENTS table in the export"
    count = con.execute("SELECT count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS").fetchone()[0]
    return f"CUDA_GPU_MEMORY_USAGE_EVENTS: {count} rows"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, default=Path("cuda_memory_out"), help="directory for every output")
    ap.add_argument("--steps", type=int, default=4, help="training steps")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "FACTS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        (child_torch if args.child[0] == "torch" else child_nvbridge)(args.steps, Path(args.child[1]))
        return 0
    reason = refusal()
    if reason is not None:
        print(f"cuda_memory.py: {reason}; run it on a machine with an NVIDIA GPU, CUDA torch and nsys", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    db = record(args.out, args.steps)
    failed = 0
    for what, mine, ref in compare(args.out, db):
        ok = mine == ref
        failed += not ok
        print(f"{'ok ' if ok else 'DIFF'} {what}: nvbridge {mine}, reference {ref}")
    reserved = json.loads((args.out / "nvbridge.json").read_text())["max_memory_reserved"]
    print(f"nsys: {nsys_view(db)}; torch.cuda.max_memory_reserved() {reserved}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
