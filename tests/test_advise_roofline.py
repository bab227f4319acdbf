"""advise's below_roofline finding against figures computed here from raw SQL and the datasheets.

Real exports: the PyTorch 1.4 PyProf nvprof report (Tesla V100-SXM2, float32 matmuls whose
shapes and dtypes are in the markers), the nsys 2024.2 PyProf capture (A100, float32 conv2d
with recorded stride/padding) and the nsys 2022.1 DLProf capture (GeForce RTX 2070 SUPER, a
GPU without a datasheet row: its roof comes from the recorded SM count and clock). Per marker
range: the FLOPs formula (2*M*N*K for the matmul family, 2*N*C_out*C_in/groups*kh*kw*H_out*W_out
for conv2d), the bytes of its tensors and the kernels launched inside the range, summed here with
sqlite3. The roofline time of a
call is max(FLOPs / peak FLOP/s, bytes / bandwidth); the time at stake GPU time - that.
"""

from __future__ import annotations

import ast
import json
from collections import defaultdict
from math import ceil, prod
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.analysis.advise import Advice, Finding, advise_report
from nvbridge.analysis.below_roofline import BELOW_SHARE
from nvbridge.cli import cli
from tests.conftest import SAMPLE_DB, raw, real_db

LM = "nvprof-2020-pytorch14-pyprof-lm.sqlite"
PYPROF = "nsys-2024.2-pyprof-markers.sqlite"
DLPROF = "nsys-2022.1-dlprof-torch-seq.sqlite"
V100_SXM2_FP32 = 15.7  # TFLOP/s, NVIDIA V100 datasheet (2020)
A100_TF32 = 156.0  # TFLOP/s dense, NVIDIA A100 datasheet (2021): cuDNN runs float32 convs in TF32
MATMULS = {"linear", "matmul", "bmm", "mm"}
Key = tuple[str, str]  # (op name, shapes as the dataset writes them)


def _roofline(advice: Advice) -> list[Finding]:
    return [f for f in advice.findings if f.kind == "below_roofline"]


def _shapes(args: list[dict[str, Any]]) -> str:
    return json.dumps([list(a["shape"]) if a["type"] == "tensor" else [] for a in args])


Call = tuple[Key, int, int, list[tuple[int, int]]]  # key, FLOPs, bytes, kernels (start, end)


def _union(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of intervals (the plain loop)."""
    total, reach = 0, None
    for s, e in sorted(intervals):
        if reach is None or s > reach:
            total, reach = total + e - s, e
        elif e > reach:
            total, reach = total + e - reach, e
    return total


def _expected(calls: list[Call], tflops: float, gbps: float) -> dict[Key, dict[str, int]]:
    """Per (op, shapes): calls, FLOPs, bytes, kernel time, roofline time and time at stake (the
    union of each kernel's last 1 - roofline/GPU share: kernels of one call may overlap); only
    the groups whose roofline time is under BELOW_SHARE of their kernel time."""
    groups: dict[Key, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    kernels: dict[Key, list[tuple[int, int]]] = defaultdict(list)
    for key, flops, moved, ran in calls:
        if not ran:
            continue
        g = groups[key]
        g["calls"] += 1
        g["flops"] += flops
        g["bytes"] += moved
        g["gpu_ns"] += sum(e - s for s, e in ran)
        g["roof_ns"] += ceil(max(flops / (tflops * 1e3), moved / gbps))
        kernels[key] += ran
    out = {}
    for key, g in groups.items():
        share = g["roof_ns"] / g["gpu_ns"]
        if share < BELOW_SHARE:
            tails = [(s + round((e - s) * share), e) for s, e in kernels[key]]
            out[key] = {**g, "kernels": len(tails), "at_stake": _union(tails)}
    return out


def _found(advice: Advice, ops: set[str]) -> dict[Key, Finding]:
    out = {}
    for f in _roofline(advice):
        if f.op in ops:
            assert f.shapes is not None and f.shapes.endswith(" float32")
            out[(f.op, json.dumps(json.loads(f.shapes.removesuffix(" float32"))))] = f
    return out


def _compare(found: dict[Key, Finding], expected: dict[Key, dict[str, int]]) -> None:
    assert set(found) == set(expected) and expected
    for key, want in expected.items():
        f = found[key]
        figs = dict(f.figures)
        assert f.count == want["calls"]
        assert (figs["flops"], figs["bytes"], figs["gpu_ns"]) == (want["flops"], want["bytes"], want["gpu_ns"])
        assert abs(figs["roof_ns"] - want["roof_ns"]) <= want["calls"]
        # at stake: GPU time - roofline time (each kernel's tail, rounded to whole ns), and
        # no more than that where kernels overlap
        assert abs(f.own_ns - want["at_stake"]) <= 2 * want["kernels"]
        assert f.own_ns <= want["gpu_ns"] - want["roof_ns"] + want["calls"]
        assert 0 < f.time_ns <= f.own_ns <= figs["gpu_ns"]


def _lm_calls(db: Path) -> list[Call]:
    """The nvprof report's outermost matmul-family marker ranges: key, FLOPs, bytes, kernels."""
    ranges = raw(
        db,
        "SELECT s.value, a.timestamp, b.timestamp FROM CUPTI_ACTIVITY_KIND_MARKER a "
        "JOIN CUPTI_ACTIVITY_KIND_MARKER b ON b.id = a.id AND b.flags = 4 "
        "JOIN StringTable s ON s._id_ = a.name WHERE a.flags = 2 AND s.value LIKE '{''mod''%'",
    )
    launches = raw(
        db,
        'SELECT r.start, k.start, k."end" FROM CUPTI_ACTIVITY_KIND_RUNTIME r '
        "JOIN CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL k ON k.correlationId = r.correlationId",
    )
    markers = [(ast.literal_eval(str(t)), int(str(b)), int(str(e))) for t, b, e in ranges]
    calls = []
    for m, begin, finish in markers:
        if m["op"] not in MATMULS:
            continue
        around = {o["op"] for o, b, e in markers if b <= begin and e >= finish and (b, e) != (begin, finish)}
        # only multi_head_attention_forward (no FLOPs formula: PyProf cannot see into it) or
        # another matmul encloses one; a matmul inside a matmul is counted by the outer one
        assert around <= MATMULS | {"multi_head_attention_forward"}
        if around & MATMULS:
            continue
        a, b = (tuple(x["shape"]) for x in m["args"][:2])
        n = b[0] if m["op"] == "linear" else b[-1]  # linear is x @ w.T
        flops = 2 * prod(a[:-1]) * a[-1] * n
        moved = (sum(prod(x["shape"]) for x in m["args"] if x["type"] == "tensor") + prod(a[:-1]) * n) * 4
        kernels = [(int(str(s)), int(str(e))) for t, s, e in launches if begin <= int(str(t)) <= finish]
        calls.append(((f"{m['mod']}.{m['op']}", _shapes(m["args"])), flops, moved, kernels))
    return calls


def test_nvprof_matmuls_below_the_v100_roofline_equal_raw_sql() -> None:
    db = real_db(LM)
    ((name, bandwidth),) = raw(
        db,
        "SELECT s.value, d.globalMemoryBandwidth FROM CUPTI_ACTIVITY_KIND_DEVICE d "
        "JOIN StringTable s ON s._id_ = d.name",
    )
    assert name == "Tesla V100-SXM2-16GB"
    expected = _expected(_lm_calls(db), V100_SXM2_FP32, int(str(bandwidth)) / 1e6)  # KB/s -> GB/s
    advice = advise_report(nvbridge.load(db))
    found = _found(advice, {"torch.nn.functional.linear", "torch.bmm", "Tensor.matmul", "torch.mm"})
    _compare(found, expected)
    linear = found[("torch.nn.functional.linear", "[[35, 20, 200], [200, 200], [200]]")]
    assert "fp32 -> bf16" in linear.fix  # compute-bound fp32 on a tensor-core GPU


def test_nsys_pyprof_conv2d_below_the_a100_roofline_equal_raw_sql() -> None:
    db = real_db(PYPROF)
    names = raw(db, "SELECT DISTINCT name, memoryBandwidth FROM TARGET_INFO_GPU")
    assert [n for n, _ in names] == ["NVIDIA A100-SXM4-40GB"]
    gbps = int(str(names[0][1])) / 1e9  # B/s -> GB/s
    ranges = raw(
        db,
        "SELECT text, start, end, globalTid FROM NVTX_EVENTS WHERE text LIKE "
        "'{''mod'': ''torch.nn.functional'', ''op'': ''conv2d''%'",
    )
    launches = raw(
        db,
        "SELECT r.start, r.globalTid, k.start, k.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId "
        "AND k.globalPid = (r.globalTid >> 24) << 24",
    )
    calls = []
    for text, begin, finish, tid in ranges:
        args = ast.literal_eval(str(text))["args"]
        (n, c, h, w), (co, cig, kh, kw) = args[0]["shape"], args[1]["shape"]
        (sh, sw), (ph, pw), (dh, dw) = (a["value"] for a in args[3:6])  # stride, padding, dilation
        assert args[6]["value"] == 1 and cig == c  # groups
        ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        wo = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        flops = 2 * n * co * cig * kh * kw * ho * wo
        moved = (sum(prod(a["shape"]) for a in args if a["type"] == "tensor") + n * co * ho * wo) * 4
        kernels = [
            (int(str(s)), int(str(e)))
            for t, g, s, e in launches
            if g == tid and int(str(begin)) <= int(str(t)) <= int(str(finish))
        ]
        calls.append((("torch.nn.functional.conv2d", _shapes(args)), flops, moved, kernels))
    assert len(calls) == 18
    expected = _expected(calls, A100_TF32, gbps)
    advice = advise_report(nvbridge.load(db))
    _compare(_found(advice, {"torch.nn.functional.conv2d"}), expected)


def test_turing_conv2d_below_the_roofline_derived_from_the_recorded_device_facts() -> None:
    """The 2022.1 DLProf export (GeForce RTX 2070 SUPER, no datasheet row): the fp32 roof is its
    recorded SM count x recorded clock x 128 FLOP per SM and clock (Turing whitepaper: 64 FP32
    lanes, an FMA each); a float32 convolution on Turing (no TF32) runs at that roof."""
    db = real_db(DLPROF)
    ((sms, hz, major, bandwidth),) = raw(
        db, "SELECT smCount, clockRate, computeMajor, memoryBandwidth FROM TARGET_INFO_GPU"
    )
    assert major == 7
    fp32 = int(str(sms)) * int(str(hz)) * 128 / 1e12
    ranges = raw(db, "SELECT text, start, end, globalTid FROM NVTX_EVENTS WHERE text LIKE '%''op'': ''conv2d''%'")
    launches = raw(
        db,
        "SELECT r.start, r.globalTid, k.start, k.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId "
        "AND k.globalPid = (r.globalTid >> 24) << 24",
    )
    calls = []
    for text, begin, finish, tid in ranges:
        args = ast.literal_eval(str(text))["args"]
        assert len(args) == 3  # input, weight, bias: stride 1, padding 0, dilation 1, groups 1
        (n, _, h, w), (co, cig, kh, kw) = args[0]["shape"], args[1]["shape"]
        ho, wo = h - kh + 1, w - kw + 1
        moved = (sum(prod(a["shape"]) for a in args) + n * co * ho * wo) * 4
        kernels = [
            (int(str(s)), int(str(e)))
            for t, g, s, e in launches
            if g == tid and int(str(begin)) <= int(str(t)) <= int(str(finish))
        ]
        calls.append(
            (("torch.nn.functional.conv2d", _shapes(args)), 2 * n * co * cig * kh * kw * ho * wo, moved, kernels)
        )
    assert len(calls) == 2
    expected = _expected(calls, fp32, int(str(bandwidth)) / 1e9)
    advice = advise_report(nvbridge.load(db))
    _compare(_found(advice, {"torch.nn.functional.conv2d"}), expected)
    assert advice.peaks is not None and "tf32" not in advice.peaks


@pytest.mark.parametrize("name", [LM, PYPROF])
def test_findings_add_up_and_unknown_flops_are_never_reported(name: str) -> None:
    report = nvbridge.load(real_db(name))
    advice = advise_report(report)
    ops = report.df("ops")
    known = {(o, s) for o, s, f in zip(ops["op_name"], ops["input_shapes"], ops["flops"]) if f == f}
    assert _roofline(advice)
    for f in _roofline(advice):
        assert f.shapes is not None and (f.op, f.shapes.rsplit(" ", 1)[0]) in known
        assert 0 < f.time_ns <= f.own_ns <= dict(f.figures)["gpu_ns"]
    assert "torch.nn.functional.multi_head_attention_forward" not in {f.op for f in _roofline(advice)}
    assert sum(f.time_ns for f in advice.findings) == advice.at_stake_ns <= advice.span_ns


def test_per_step_sums_stay_within_each_step() -> None:
    """Recording with real NVTX and SYNTHETIC GPU rows (scripts/; sample_db/README.md): it names
    no real GPU, so peaks are given; per step the findings add up to at most the step."""
    path = SAMPLE_DB / "diff_extra_cpu+synthetic_gpu.sqlite"
    report = nvbridge.load(path)
    assert _roofline(advise_report(report)) == []  # unknown GPU: no roofline to compare with
    advice = advise_report(report, peak_tflops=15.7, peak_gbps=900)
    assert _roofline(advice)
    steps = {
        int(str(t).split("#")[1]): int(str(e)) - int(str(s))
        for t, s, e in raw(path, "SELECT text, start, end FROM NVTX_EVENTS WHERE text LIKE 'ProfilerStep#%'")
    }
    per_step: dict[int, int] = defaultdict(int)
    for f in advice.findings:
        assert sum(t for _, t in f.by_step) <= f.time_ns
        for n, t in f.by_step:
            per_step[n] += t
    assert per_step and all(per_step[n] <= steps[n] for n in per_step)
    for f in _roofline(advice):
        assert sum(t for _, t in f.by_step) == f.time_ns  # every kernel ran inside a step


def test_cli_peaks_and_width() -> None:
    runner = CliRunner()
    db = str(real_db(LM))
    text = runner.invoke(cli, ["advise", db, "--limit", "-1", "--steps", "0"])
    assert text.exit_code == 0 and "Roofline peaks: V100 SXM2" in text.output
    assert "below_roofline" in text.output and "the roofline allows" in text.output
    assert max(len(line) for line in text.output.splitlines()) <= 100
    # a roof 100,000 times lower: nothing is far below it
    low = runner.invoke(
        cli, ["advise", db, "--json", "--limit", "-1", "--peak-tflops", "0.000157", "--peak-gbps", "0.00898"]
    )
    assert low.exit_code == 0 and all(f["kind"] != "below_roofline" for f in json.loads(low.output)["findings"])
    unknown = runner.invoke(cli, ["advise", str(SAMPLE_DB / "diff_extra_cpu+synthetic_gpu.sqlite")])
    assert "Roofline: unknown GPU" in unknown.output
