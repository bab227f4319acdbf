"""Compare what emit_nvtx emitted (test collector log) with torch.profiler's run of the same program.

The reference run has no nvbridge in it (issue #15, cause 6: a reference taken with nvbridge's
own mode active cannot see what the mode changes). Forward -> backward pairs on the reference
side are torch's own ``fwdbwd`` flows; on ours, each backward node range (``seq = N, fwd_tid =
T``) is linked the way torch links: to the latest op with seq N on thread T that started before
the node.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.nvtx_inject.nvtx_log import REPO, NvtxLog, parse_log

NAME = re.compile(
    r"^(?P<name>.*?)(?:, seq = (?P<seq>\d+))?, op_id = (?P<op_id>\d+)(?:, fwd_tid = (?P<tid>\d+))?"
    r"(?:, sizes = \[.*\])?$",
    re.S,
)
Pair = tuple[str | None, int, str]


@dataclass
class Run:
    """One workload run: torch.profiler's ops and (annotated runs) the NVTX log."""

    ops: list[dict[str, Any]]
    log: NvtxLog | None
    facts: dict[str, Any]


def run(injection: Path, workload: str, mode: str, workdir: Path) -> Run:
    """``scripts.workloads.exact WORKLOAD MODE`` in a fresh interpreter (collector attached if annotated)."""
    out = workdir / f"{workload}.{mode}.json"
    log_path = workdir / f"{workload}.{mode}.tsv"
    log_path.unlink(missing_ok=True)  # the collector appends
    env = dict(os.environ)
    env.pop("NVTX_INJECTION64_PATH", None)
    if mode != "reference":
        env["NVTX_INJECTION64_PATH"] = str(injection)
    env["NVBRIDGE_NVTX_LOG"] = str(log_path)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    argv = [sys.executable, "-m", "scripts.workloads.exact", workload, mode, str(out)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"{workload} {mode} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}")
    facts = json.loads(out.read_text())
    return Run(facts["ops"], parse_log(log_path) if mode != "reference" else None, facts)


def is_node(op: dict[str, Any]) -> bool:
    """A backward node record of torch.profiler (not its evaluate_function wrapper)."""
    return bool(op["fwd_thread"]) and op["seq"] >= 0 and not op["name"].startswith("autograd::engine::")


def reference_forward(ops: list[dict[str, Any]]) -> Counter[tuple[str, int]]:
    """torch.profiler's forward ops with a seq: (name, seq) multiset."""
    return Counter((op["name"], op["seq"]) for op in ops if op["seq"] >= 0 and not op["fwd_thread"])


def reference_pairs(ops: list[dict[str, Any]]) -> Counter[Pair]:
    """(forward op name, seq, backward node) per backward node, from torch's fwdbwd flows."""
    return Counter((op["fwd"][0] if op["fwd"] else None, op["seq"], op["name"]) for op in ops if is_node(op))


def aten_ops(ops: list[dict[str, Any]]) -> Counter[str]:
    """Every aten op torch.profiler recorded, by name: what the program ran."""
    return Counter(op["name"] for op in ops if op["name"].startswith("aten::"))


def _parsed(log: NvtxLog) -> list[tuple[Any, re.Match[str]]]:
    return [(r, m) for r in log.ranges if (m := NAME.match(r.name)) is not None]


def our_forward(log: NvtxLog, on: int | None = None) -> Counter[tuple[str, int]]:
    """Our forward op ranges with a seq (on thread ``on`` if given): (name, seq) multiset."""
    return Counter(
        (m["name"], int(m["seq"])) for r, m in _parsed(log) if m["seq"] and not m["tid"] and (on is None or r.tid == on)
    )


def our_pairs(log: NvtxLog, on: int | None = None, made_on: int | None = None) -> Counter[Pair]:
    """(forward op name, seq, node) per backward node range, linked on (fwd_tid, seq) as torch does.

    ``on``: only nodes run on that thread; ``made_on``: only nodes whose fwd_tid is that thread.
    """
    latest: dict[tuple[int, int], str] = {}
    pairs: Counter[Pair] = Counter()
    for r, m in _parsed(log):  # push order = start order per thread
        if not m["seq"]:
            continue
        seq = int(m["seq"])
        if not m["tid"]:
            latest[(r.tid, seq)] = m["name"]
        elif (on is None or r.tid == on) and (made_on is None or int(m["tid"]) == made_on):
            pairs[(latest.get((int(m["tid"]), seq)), seq, m["name"])] += 1
    return pairs


def reference_nodes(ops: list[dict[str, Any]]) -> Counter[tuple[str, int, int]]:
    """torch.profiler's backward nodes: (node, seq, torch's logical forward thread)."""
    return Counter((op["name"], op["seq"], op["fwd_thread"]) for op in ops if is_node(op))


def our_nodes(log: NvtxLog, on: int) -> Counter[tuple[str, int, int]]:
    """Our backward node ranges run on thread ``on``: (node, seq, fwd_tid)."""
    return Counter((m["name"], int(m["seq"]), int(m["tid"])) for r, m in _parsed(log) if m["tid"] and r.tid == on)


def per_thread(nodes: Counter[tuple[str, int, int]]) -> Counter[tuple[tuple[str, int, int], ...]]:
    """Nodes grouped by forward thread, thread names dropped: equal when both sides attribute the
    same nodes to the same (however numbered) threads."""
    groups: dict[int, list[tuple[str, int, int]]] = {}
    for (name, seq, thread), count in nodes.items():
        groups.setdefault(thread, []).append((name, seq, count))
    return Counter(tuple(sorted(group)) for group in groups.values())


def agreement(ours: Counter[Any], theirs: Counter[Any]) -> float:
    """Shared share of two multisets (1.0 = equal)."""
    total = max(sum(ours.values()), sum(theirs.values()), 1)
    return sum((ours & theirs).values()) / total


# Backward nodes whose forward op is named differently by design (node -> forward op names).
_ALIASES = {
    "copyslices": None,  # wraps any in-place op on a view: compatible with every in-place op
    "copybackwards": {"copy"},
    "accumulategrad": set(),
    "notimplemented": None,
    "unsafeviewbackward": {"reshape", "view", "flatten", "matmul", "linear", "einsum", "unsafeview"},
    "viewbackward": {"view", "reshape", "flatten", "linear", "matmul"},
    "expandbackward": {"expand", "expandas", "matmul", "linear", "broadcastto"},
    "tbackward": {"t", "linear", "matmul"},
    "addmmbackward": {"addmm", "linear"},
    "mmbackward": {"mm", "matmul", "linear"},
    "bmmbackward": {"bmm", "matmul"},
}


def _class(name: str) -> str:
    base = name.rsplit("::", 1)[-1].rstrip("_").replace("_", "").lower()
    return re.sub(r"backwards?\d*$", "backward", base)


def compatible(forward: str, node: str) -> bool:
    """The node could have been made by the forward op (same operation, or a known alias)."""
    node_class = _class(node)
    fwd = _class(forward)
    alias = _ALIASES.get(node_class.removesuffix("backward") + "backward", ())
    if alias is None:
        return True
    if alias and fwd in alias:
        return True
    stem = node_class.removesuffix("backward")
    return fwd == stem or fwd.startswith(stem) or stem.startswith(fwd)


def foreign_links(pairs: Counter[Pair], custom: set[str]) -> Counter[Pair]:
    """Linked pairs whose forward op is of another name class (custom Functions excluded)."""
    return Counter(
        {p: n for p, n in pairs.items() if p[0] is not None and p[0] not in custom and not compatible(p[0], p[2])}
    )
