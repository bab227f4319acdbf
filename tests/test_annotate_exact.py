"""emit_nvtx's observer backend against torch.profiler runs that have no nvbridge in them.

Each workload runs twice in fresh interpreters: once under torch.profiler alone (the reference),
once under emit_nvtx(backend="observer") with the test NVTX collector attached (torch.profiler
also runs there, only to record which aten ops the annotated program ran). Checked (issue #15):
the forward (op, seq) multiset and the forward -> backward pairs equal torch's own (fwdbwd flows),
no backward node links to a forward op of another name class, and the annotated run ran exactly
the aten ops of the reference run.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="emit_nvtx needs torch (pip install 'nvbridge[torch]')")

from nvbridge.annotate import _observer  # noqa: E402
from nvbridge.engine import correlate  # noqa: E402
from scripts.workloads.exact import WORKLOADS  # noqa: E402
from tests.hand_built import _range, profile  # noqa: E402
from tests.nvtx_inject import exact  # noqa: E402
from tests.nvtx_inject.nvtx_log import NvtxLog  # noqa: E402

if _observer.load() is None:
    pytest.skip(f"observer unavailable: {_observer.unavailable_reason()}", allow_module_level=True)

CUSTOM_FUNCTIONS = {"Scale"}
THREADED = {"dp_threads", "two_threads"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("exact")


_run = functools.cache(exact.run)  # each (workload, mode) runs once per session


@pytest.mark.parametrize("workload", sorted(set(WORKLOADS) - THREADED))
def test_observer_matches_torch_profiler(injection: Path, workdir: Path, workload: str) -> None:
    reference = _run(injection, workload, "reference", workdir)
    ours = _run(injection, workload, "observer", workdir)
    assert ours.log is not None and not ours.log.unclosed

    theirs_fwd, ours_fwd = exact.reference_forward(reference.ops), exact.our_forward(ours.log)
    assert ours_fwd == theirs_fwd
    assert sum(theirs_fwd.values()) >= 10

    theirs_pairs, ours_pairs = exact.reference_pairs(reference.ops), exact.our_pairs(ours.log)
    assert exact.agreement(ours_pairs, theirs_pairs) >= 0.99, (ours_pairs - theirs_pairs, theirs_pairs - ours_pairs)
    assert sum(theirs_pairs.values()) >= 10
    assert not exact.foreign_links(ours_pairs, CUSTOM_FUNCTIONS)

    assert exact.aten_ops(ours.ops) == exact.aten_ops(reference.ops)


def test_observer_emits_torch_grammar_plus_forward_thread(injection: Path, workdir: Path) -> None:
    """Spot-check the names: list arguments flattened (cause 5), custom Functions get sizes,
    backward nodes carry seq and the forward thread, CopySlices gets its range (cause 4)."""
    ours = _run(injection, "function_copyslices", "observer", workdir)
    assert ours.log is not None
    names = [r.name for r in ours.log.ranges]
    assert any(n.startswith("aten::stack, seq = ") and ", sizes = [[4, 6], [4, 6], []]" in n for n in names)
    assert any(n.startswith("Scale, seq = ") and ", sizes = [[4, 6], [6]]" in n for n in names)
    main_tid = ours.log.ranges[0].tid
    nodes = [r for r in ours.log.ranges if ", fwd_tid = " in r.name]
    assert nodes and [r.name for r in nodes if f", fwd_tid = {main_tid}, sizes = [" not in r.name] == []
    assert any(r.name.startswith("torch::autograd::CopySlices, seq = ") for r in nodes)
    assert any(r.name.startswith("ScaleBackward, seq = ") for r in nodes)
    modules = [n for n in names if n.startswith("nn.Module: ")]
    assert "nn.Module: (Linear)" in modules
    assert [n for n in names if n.startswith("ProfilerStep#")] == ["ProfilerStep#0", "ProfilerStep#1"]


@pytest.mark.parametrize("workload", sorted(THREADED))
def test_observer_threads_match_torch_profiler(injection: Path, workdir: Path, workload: str) -> None:
    """Threads: torch.profiler sees only the thread that started it (its backward nodes still carry
    torch's forward thread), so that is what is compared; every node on every thread must link,
    to its forward thread, and never to an op of another name class."""
    reference = _run(injection, workload, "reference", workdir)
    ours = _run(injection, workload, "observer", workdir)
    assert ours.log is not None and not ours.log.unclosed
    main, workers = ours.facts["main_tid"], set(ours.facts["workers"])
    assert len(workers) >= 1 and main not in workers

    assert exact.our_forward(ours.log, on=main) == exact.reference_forward(reference.ops)
    theirs_nodes = exact.reference_nodes(reference.ops)
    assert exact.per_thread(exact.our_nodes(ours.log, on=main)) == exact.per_thread(theirs_nodes)
    assert sum(theirs_nodes.values()) >= 10
    linked_by_torch = +Counter({p: n for p, n in exact.reference_pairs(reference.ops).items() if p[0] is not None})
    assert exact.our_pairs(ours.log, on=main, made_on=main) == linked_by_torch

    pairs = exact.our_pairs(ours.log)
    assert sum(pairs.values()) >= 20 and not [p for p in pairs if p[0] is None]
    assert not exact.foreign_links(pairs, CUSTOM_FUNCTIONS)
    made_on = {int(m["tid"]) for r in ours.log.ranges if (m := exact.NAME.match(r.name)) and m["tid"]}
    assert made_on & workers and made_on <= workers | {main}
    assert exact.aten_ops(ours.ops) == exact.aten_ops(reference.ops)


_FWD_TID = re.compile(r", fwd_tid = \d+")


Place = tuple[int, int]  # (thread, start_ns): names a range in the log and in the converted ops


def _converted_links(log: NvtxLog, strip_fwd_tid: bool) -> dict[Place, Place | None]:
    """Convert the logged ranges; each backward node -> the forward op it was linked to."""
    ranges = [
        _range(r.start_ns, r.end_ns, _FWD_TID.sub("", r.name) if strip_fwd_tid else r.name, tid=r.tid)
        for r in log.ranges
    ]
    rows = correlate(profile(ranges, [], [])).ops.to_pylist()
    place = {r["op_id"]: (r["thread_id"], r["start_ns"]) for r in rows}
    return {
        place[r["op_id"]]: place.get(r["fwd_op_id"])
        for r in rows
        if r["is_backward"] and r["seq"] is not None and not r["name"].startswith("autograd::engine::")
    }


@pytest.mark.parametrize("workload", sorted(THREADED))
def test_converter_on_torch_names_never_links_wrong(injection: Path, workdir: Path, workload: str) -> None:
    """The recorded threads with fwd_tid removed, as torch's own NVTX names come (CUDA builds):
    0 links that differ from the fwd_tid ones (checked above against torch.profiler), and every
    node whose seq names exactly one fitting op (latest per thread, by the harness's own name
    rule) is linked."""
    log = _run(injection, workload, "observer", workdir).log
    assert log is not None
    truth = _converted_links(log, strip_fwd_tid=False)
    assert truth and all(v is not None for v in truth.values())
    guessed = _converted_links(log, strip_fwd_tid=True)
    wrong = {k: (v, truth[k]) for k, v in guessed.items() if v is not None and v != truth[k]}
    assert wrong == {}

    unique = _nodes_with_one_fitting_op(log)
    assert len(unique) >= 4  # dp_threads: the main thread's own nodes; the replicas' collide
    linked = [k for k in unique if guessed[k] is not None]
    assert len(linked) >= 0.99 * len(unique)


def _nodes_with_one_fitting_op(log: NvtxLog) -> list[Place]:
    """Backward nodes for which exactly one thread's latest op with the node's seq, started
    before it, fits the node's name (exact.compatible)."""
    latest: dict[tuple[int, int], str] = {}
    out = []
    for r in log.ranges:
        m = exact.NAME.match(r.name)
        if m is None or not m["seq"]:
            continue
        seq = int(m["seq"])
        if not m["tid"]:
            latest[(r.tid, seq)] = m["name"]
        elif sum(exact.compatible(op, m["name"]) for (_, s), op in latest.items() if s == seq) == 1:
            out.append((r.tid, r.start_ns))
    return out


_SHAPES = """
import sys, torch
from nvbridge.annotate import emit_nvtx
from scripts.workloads.exact import Scale
x, w = torch.randn(4, 6, requires_grad=True), torch.ones(6, requires_grad=True)
with emit_nvtx(backend=sys.argv[2], record_shapes=True):
    torch.stack([x, x * 2]).sum().backward()
    Scale.apply(x, w).sum().backward()
open(sys.argv[1], "w").write("null")
"""


def test_python_fallback_sizes_equal_torchs(injection: Path, tmp_path: Path) -> None:
    """Issue #15 cause 5 in the fallback: tensor lists flattened, custom Functions sized, as
    torch's own inputSizes gives them through the observer."""
    from tests.nvtx_inject.nvtx_log import run_scenario

    def sizes(backend: str) -> dict[str, str]:
        code = _SHAPES.replace("sys.argv[2]", repr(backend))
        log, _ = run_scenario(injection, f"shapes_{backend}", tmp_path, code=code)
        return {
            r.name.split(",")[0]: r.name.split(", sizes = ")[1]
            for r in log.ranges
            if r.name.startswith(("aten::stack,", "Scale,"))
        }

    theirs = sizes("observer")
    assert {op: text.split(", dtypes = ")[0] for op, text in theirs.items()} == {
        "aten::stack": "[[4, 6], [4, 6], []]",
        "Scale": "[[4, 6], [6]]",
    }
    ours = sizes("python")
    assert {op: text.split(", dtypes = ")[0] for op, text in ours.items()} == {
        op: text.split(", dtypes = ")[0] for op, text in theirs.items()
    }
    # dtypes (nvbridge's grammar) line up with the sizes, one entry per tensor, in both backends
    assert theirs["aten::stack"].endswith(", dtypes = [f32, f32, -]")
    assert ours["aten::stack"].endswith(", dtypes = [f32, f32, -]")


_NO_COMPILER = """
import json, os, sys
os.environ["PATH"] = ""                        # no c++, no ninja
os.environ["NVBRIDGE_CACHE_DIR"] = sys.argv[1] + ".cache"   # nothing built before
import torch
from nvbridge.annotate import _observer, emit_nvtx
with emit_nvtx() as nv:
    torch.ones(2, requires_grad=True).sum().backward()
    auto = nv.active_backend
try:
    with emit_nvtx(backend="observer"):
        pass
    error = None
except ValueError as exc:
    error = str(exc)
json.dump([auto, error], open(sys.argv[1], "w"))
"""


def test_without_a_compiler_auto_falls_back_and_observer_says_why(injection: Path, tmp_path: Path) -> None:
    from tests.nvtx_inject.nvtx_log import run_scenario

    log, (auto, error) = run_scenario(injection, "no_compiler", tmp_path, code=_NO_COMPILER)
    import torch

    # then torch's own NVTX ranges where the build has them (CUDA), else the python backend
    assert auto == ("native" if torch.version.cuda else "python")
    # the NVTX header check comes first: a machine without the nvidia-nvtx wheel stops there
    assert error in (
        "backend='observer' is unavailable: no C++ compiler (install g++); use 'auto'",
        "backend='observer' is unavailable: no NVTX3 header (pip install nvidia-nvtx-cu12); use 'auto'",
    )
    backward = "SumBackward0, seq = " if torch.version.cuda else "SumBackward0, stashed seq = "
    assert any(r.name.startswith(backward) for r in log.ranges)
