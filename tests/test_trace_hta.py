"""Holistic Trace Analysis on nvbridge's traces of the real exports, one trace per rank, against
raw SQL (tests/raw_gpu.py reads the exports with Python's sqlite3) and against summary's timeline.

- idle time per rank (HTA's temporal breakdown: its GPU's first to last op, less their union)
  equals the raw lane's and summary's GPU idle time (within 1%; they agree to the ns);
- the launches HTA finds (``get_cuda_kernel_launch_stats``: cudaLaunchKernel, cudaLaunchKernelExC,
  cudaMemcpyAsync and cudaMemsetAsync calls joined to their GPU op by correlation id) are every
  such call's GPU op, counted in raw SQL by the names CUPTI gives those callbacks;
- comm/compute overlap per rank equals interval arithmetic on the raw NCCL and compute kernels of
  that rank's process (HTA gives no figure where a rank ran no NCCL kernel);
- the ranks are the processes that ran GPU work, in process id order (nvbridge.export.trace_ranks).

HTA cannot parse the samples' synthetic GPU rows (their correlation ids all fit in int8 and HTA
0.5 downcasts the column, then fails to store larger row indices in it): real exports only.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import nvbridge
from nvbridge.cli import cli
from nvbridge.conversion.memory import export_chrome_traces
from tests import raw_gpu
from tests.conftest import ALL_FILES, real_db

FSDP = "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"
GPU_REPORTS = [name for name in ALL_FILES if name != "nvprof-2020-empty-capture.sqlite"]
# What HTA's launch statistics look for, as CUPTI names the callbacks (cupti_runtime_cbid.h:
# CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 = 211, ..._cudaLaunchKernelExC_v11060 = 430,
# ..._cudaMemcpyAsync_v3020 = 41, ..._cudaMemsetAsync_v3020 = 51) and nvprof's names for them.
HTA_LAUNCHES = {
    "cudaLaunchKernel_v7000",
    "cudaLaunchKernelExC_v11060",
    "cudaMemcpyAsync_v3020",
    "cudaMemsetAsync_v3020",
    "cudaLaunchKernel",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
}


def _hta() -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from hta.trace_analysis import TraceAnalysis
    except ImportError as exc:
        pytest.skip(f"holistictraceanalysis is not installed ({exc}); pip install -e '.[test]'")
    return TraceAnalysis


@dataclass
class Analysed:
    raw: raw_gpu.Raw
    pids: list[int]  # rank -> process id, by the raw rule
    analysis: Any
    folder: Path


@pytest.fixture(scope="module", params=GPU_REPORTS)
def analysed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Analysed:
    trace_analysis = _hta()
    path = real_db(request.param)
    folder = tmp_path_factory.mktemp("hta")
    export_chrome_traces(path, folder / "t.json.gz", split="rank")
    raw = raw_gpu.read(path)
    pids = sorted({g.pid for g in raw.gpu if g.pid >= 0})
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        mp.setenv("HTA_DISABLE_NS_ROUNDING", "1")  # ns precision: compare exactly
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            analysis = trace_analysis(trace_dir=str(folder))
        finally:
            logging.disable(logging.NOTSET)
    return Analysed(raw, pids, analysis, folder)


def test_one_trace_per_rank_with_its_rank(analysed: Analysed) -> None:
    files = sorted(analysed.folder.iterdir())
    assert [f.name for f in files] == [f"t.rank{r}.json.gz" for r in range(len(analysed.pids))]
    assert sorted(analysed.analysis.t.traces) == list(range(len(analysed.pids)))
    for rank, f in enumerate(files):
        head = json.loads(gzip.decompress(f.read_bytes()))
        assert head["distributedInfo"] == {"rank": rank, "world_size": len(analysed.pids)}
        host = {e["pid"] for e in head["traceEvents"] if e.get("cat", "").startswith("cuda_")}
        assert host == {analysed.pids[rank]}


def test_idle_time_per_gpu_is_summarys(analysed: Analysed, request: pytest.FixtureRequest) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = analysed.analysis.get_temporal_breakdown(visualize=False)
    hta = {int(r["rank"]): round(float(r["idle_time(us)"]) * 1000) for _, r in got.iterrows()}
    lanes = raw_gpu.lanes(analysed.raw)
    want = {}
    for rank, pid in enumerate(analysed.pids):
        ops = [g for (p, _), lane in lanes.items() if p == pid for g in lane]
        span = max(g.end for g in ops) - min(g.start for g in ops)
        want[rank] = span - raw_gpu.length([(g.start, g.end) for g in ops])
    assert hta == want
    summary = nvbridge.summarize(real_db(request.node.callspec.params["analysed"]))
    devices = {p: {d for (q, d) in lanes if q == p} for p in analysed.pids}
    for rank, pid in enumerate(analysed.pids):
        (device,) = devices[pid]  # each of these ranks ran on one GPU, used by no other rank
        gpu = next(g for g in summary.gpus if g.device_id == device)
        assert hta[rank] == pytest.approx(gpu.span_ns - gpu.busy_ns, rel=0.01)


def test_launch_statistics_find_every_launch(analysed: Analysed) -> None:
    ranks = list(range(len(analysed.pids)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stats = analysed.analysis.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
    gpu_by_call = {(g.pid, g.corr): 0 for g in analysed.raw.gpu}
    for g in analysed.raw.gpu:
        gpu_by_call[(g.pid, g.corr)] += 1
    for rank, pid in enumerate(analysed.pids):
        launches = [c for c in analysed.raw.calls if c.pid == pid and c.name in HTA_LAUNCHES]
        assert len(stats[rank]) == sum(gpu_by_call.get((pid, c.corr), 0) for c in launches)


def test_comm_compute_overlap_is_interval_arithmetic(analysed: Analysed) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = analysed.analysis.get_comm_comp_overlap(visualize=False)
    hta = {int(r["rank"]): float(r["comp_comm_overlap_pctg"]) for _, r in got.iterrows()}
    for rank, pid in enumerate(analysed.pids):
        kernels = [g for g in analysed.raw.gpu if g.pid == pid and g.kind == "kernel"]
        comm = [(g.start, g.end) for g in kernels if g.nccl]
        comp = [(g.start, g.end) for g in kernels if not g.nccl]
        if not comm:
            assert math.isnan(hta[rank])  # 0 / 0: no NCCL kernel on this rank
            continue
        share = 100 * raw_gpu.length(raw_gpu.intersect(comm, comp)) / raw_gpu.length(comm)
        assert hta[rank] == pytest.approx(share, abs=0.006)  # HTA rounds to 2 decimals


def test_the_default_trace_of_the_fsdp_export_is_read_per_rank(tmp_path: Path) -> None:
    """The issue's case: `nvbridge trace` of a two-process report, read by HTA. One file of both
    ranks gave 54% comm/compute overlap; each rank's own is 0%."""
    trace_analysis = _hta()
    path = real_db(FSDP)
    result = CliRunner().invoke(cli, ["trace", str(path), "-o", str(tmp_path / "fsdp.json.gz")])
    assert result.exit_code == 0, result.output
    assert "(rank 0 of 2)" in result.output and "(rank 1 of 2)" in result.output
    raw = raw_gpu.read(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = trace_analysis(trace_dir=str(tmp_path)).get_comm_comp_overlap(visualize=False)
    assert sorted(int(r) for r in got["rank"]) == [0, 1]
    for rank, pid in enumerate(sorted({g.pid for g in raw.gpu})):
        kernels = [g for g in raw.gpu if g.pid == pid and g.kind == "kernel"]
        comm = [(g.start, g.end) for g in kernels if g.nccl]
        share = 100 * raw_gpu.length(raw_gpu.intersect(comm, [(g.start, g.end) for g in kernels if not g.nccl]))
        pctg = float(got.loc[got["rank"] == rank, "comp_comm_overlap_pctg"].iloc[0])
        assert comm and pctg == pytest.approx(share / raw_gpu.length(comm), abs=0.006)


def test_a_one_file_trace_of_several_ranks_names_no_rank(tmp_path: Path) -> None:
    """--split none: both ranks in one file for a viewer; its header names no rank, so HTA's rank
    lookup (the pattern below, from hta/common/trace_file.py) finds none and HTA warns instead of
    taking both ranks' GPUs for rank 0's."""
    path = real_db(FSDP)
    out = tmp_path / "both.json.gz"
    written = export_chrome_traces(path, out, split="none")
    assert [s.path for s in written.files] == [out]
    text = gzip.decompress(out.read_bytes()).decode()
    assert re.search(r'"rank":\s+(\d+)', text) is None
    pids = sorted({g.pid for g in raw_gpu.read(path).gpu})
    head = json.loads(text)
    assert head["distributedInfo"] == {"world_size": 2, "rank_of_process": {str(p): r for r, p in enumerate(pids)}}
