"""Run a scenario under the test NVTX collector (scripts/workloads/collector.py) and read its log
back as per-thread range trees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


@dataclass
class Range:
    """One push/pop range as the collector saw it."""

    name: str
    tid: int
    start_ns: int
    end_ns: int | None = None
    parent: Range | None = None
    children: list[Range] = field(default_factory=list)

    def ancestors(self) -> list[Range]:
        """Parent, grandparent, ... up to the thread's root."""
        out = []
        node = self.parent
        while node is not None:
            out.append(node)
            node = node.parent
        return out

    def descendants(self) -> list[Range]:
        """Every range nested below this one."""
        out = []
        stack = list(self.children)
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children)
        return out


@dataclass
class NvtxLog:
    """All ranges in push order, plus per-thread push/pop counts (to check balance)."""

    ranges: list[Range]
    pushes: dict[int, int]
    pops: dict[int, int]
    unclosed: list[Range]

    def named(self, prefix: str) -> list[Range]:
        """Ranges whose name starts with ``prefix``, in push order."""
        return [r for r in self.ranges if r.name.startswith(prefix)]


def parse_log(path: Path) -> NvtxLog:
    """Rebuild nesting per thread from the ordered push/pop lines."""
    ranges: list[Range] = []
    stacks: dict[int, list[Range]] = {}
    pushes: dict[int, int] = {}
    pops: dict[int, int] = {}
    text = path.read_text() if path.exists() else ""
    for line in text.splitlines():
        ns_text, tid_text, event, _domain, message = line.split("\t", 4)
        tid, ns = int(tid_text), int(ns_text)
        stack = stacks.setdefault(tid, [])
        if event == "push":
            pushes[tid] = pushes.get(tid, 0) + 1
            node = Range(message, tid, ns, parent=stack[-1] if stack else None)
            if node.parent is not None:
                node.parent.children.append(node)
            stack.append(node)
            ranges.append(node)
        elif event == "pop":
            pops[tid] = pops.get(tid, 0) + 1
            if stack:
                stack.pop().end_ns = ns
    unclosed = [r for stack in stacks.values() for r in stack]
    return NvtxLog(ranges, pushes, pops, unclosed)


def run_scenario(injection: Path | None, scenario: str, workdir: Path, code: str | None = None) -> tuple[NvtxLog, Any]:
    """Run one scenario (tests/nvtx_inject/scenarios.py, or ``code``) in a fresh interpreter under the
    collector."""
    log_path = workdir / f"{scenario}.tsv"
    out_path = workdir / f"{scenario}.json"
    env = dict(os.environ)
    env.pop("NVTX_INJECTION64_PATH", None)
    if injection is not None:
        env["NVTX_INJECTION64_PATH"] = str(injection)
    env["NVBRIDGE_NVTX_LOG"] = str(log_path)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    if code is None:
        argv = [sys.executable, "-m", "tests.nvtx_inject.scenarios", scenario, str(out_path)]
    else:
        argv = [sys.executable, "-c", code, str(out_path)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"{scenario} failed:\n{proc.stdout}\n{proc.stderr}")
    facts = json.loads(out_path.read_text()) if out_path.exists() else None
    return parse_log(log_path), facts


def profiler_ops(events: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """torch.profiler's view of the ops our dispatch mode intercepted, in order.

    The profiler records a ``PythonDispatchMode`` child under each intercepted op. ``aten::detach``
    is the exception: the mode sees it, but the profiler shows only torch's inner ``detach``
    record below it (with or without the mode marker), so that record stands for its parent.
    """
    out = []
    for e in events:
        if e["name"] == "detach" and e["parent"] == "aten::detach":
            out.append((e["parent"], e["parent_seq"]))
        elif e["intercepted"] and "::" in e["name"] and not e["name"].startswith("profiler::"):
            out.append((e["name"], e["seq"]))
    return out


# Module ranges of the test workloads' Net (two steps): the same in every backend and collector.
NET_MODULE_RANGES = {
    "nn.Module: (Net)": 2,
    "nn.Module: features (Sequential)": 2,
    "nn.Module: features.0 (Conv2d)": 2,
    "nn.Module: features.1 (ReLU)": 2,
    "nn.Module: head (Linear)": 2,
}
