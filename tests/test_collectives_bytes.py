"""A collective's bytes from the names emit_nvtx(record_shapes=True) writes, against the sizes
torch itself reports for the same tensors (numel x element_size, computed in the workload):
a one-rank gloo group under the test NVTX collector, no nsys needed."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from nvbridge.dataset import collectives_scan as scan
from nvbridge.dataset.collectives import ReportCollectives, build
from nvbridge.dataset.collectives_scan import op_of_name, payload_bytes
from nvbridge.engine.names import parse
from tests.nvtx_inject.nvtx_log import run_scenario

_CODE = """
import json, os, sys, torch, torch.distributed as dist
import nvbridge
os.environ["MASTER_ADDR"] = "127.0.0.1"
dist.init_process_group("gloo", init_method="file://" + sys.argv[1] + ".store", rank=0, world_size=1)
a, b = torch.ones(3, 5), torch.ones(7, dtype=torch.bfloat16)
gathered, shard, whole = torch.empty(3, 5), torch.empty(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
size = lambda t: t.numel() * t.element_size()
with nvbridge.emit_nvtx(record_shapes=True):
    dist.all_reduce(a)
    dist.broadcast(b, 0)
    dist.all_gather_into_tensor(gathered, a)
    dist.reduce_scatter_tensor(shard, whole)
dist.destroy_process_group()
# nccl-tests' sizes: the buffer, the gathered output, the whole input
json.dump({"allreduce": size(a), "broadcast": size(b), "allgather": size(gathered), "reduce_scatter": size(whole)},
          open(sys.argv[1], "w"))
"""


def test_bytes_are_torch_sizes_of_the_tensors(injection: Path, tmp_path: Path) -> None:
    log, expected = run_scenario(injection, "collective_bytes", tmp_path, code=_CODE)
    names = [r.name for r in log.ranges if r.name.startswith("c10d::") and "barrier" not in r.name]
    parsed = parse(pa.array(names)).to_pylist()
    found = {}
    for row in parsed:
        op = op_of_name(row["op_name"])
        if op in expected:
            found[op] = payload_bytes(row["op_name"], row["input_shapes"], row["input_dtypes"])
    assert found == expected
    # a backend's own range records one rank's share: no size from it
    worker = [r.name for r in log.ranges if r.name.startswith("gloo:all_gather")]
    row = parse(pa.array(worker)).to_pylist()[0]
    assert payload_bytes(row["op_name"], row["input_shapes"], row["input_dtypes"]) is None


def _report(rank: int, arrive: int, end: int, op: str, sizes: str, dtypes: str) -> ReportCollectives:
    """One rank's report holding one collective: torch's range and gloo's worker range."""
    pid = 100 + rank
    ranges = pa.table(
        {
            "op_id": [0, 1],
            "op_name": [f"c10d::{op}", "gloo:worker"],
            "process_id": [pid, pid],
            "thread_id": [pid, pid + 1],
            "start_ns": [arrive, arrive + 10],
            "end_ns": [arrive + 20, end],
            "step": [3, None],
            "input_shapes": [sizes, None],
            "input_dtypes": [dtypes, None],
        }
    )
    kernels = pa.table(
        {c: pa.array([], pa.int64() if c != "name" and c != "kind" else pa.string()) for c in scan.GPU_COLUMNS}
    )
    return ReportCollectives(f"rank{rank}", {"time_base": "epoch"}, {pid: rank}, scan.instances(ranges, kernels))


def test_bandwidths_follow_nccl_tests() -> None:
    """algbw = size / time, busbw = algbw x 2(n-1)/n (allreduce), (n-1)/n (allgather,
    reduce_scatter): nccl-tests' doc/PERFORMANCE.md, with time the transfer after the last arrival."""
    n = 4
    cases = {
        "allreduce_": ("[[1024, 256]]", "[f32]", 1024 * 256 * 4, 2 * (n - 1) / n),
        "_allgather_base_": ("[[4096], [1024]]", "[bf16, bf16]", 4096 * 2, (n - 1) / n),
        "_reduce_scatter_base_": ("[[1024], [4096]]", "[f64, f64]", 4096 * 8, (n - 1) / n),
        "broadcast_": ("[[100]]", "[u8]", 100, 1.0),
    }
    for op, (sizes, dtypes, size, factor) in cases.items():
        arrivals = [1_000, 1_500, 4_000, 2_000]  # rank 2 last
        reports = [_report(r, a, 6_000, op, sizes, dtypes) for r, a in enumerate(arrivals)]
        rows = build(reports).table.to_pylist()
        for r in rows:
            transfer = 6_000 - 4_000
            assert r["matched"] and r["bytes"] == size
            assert r["wait_ns"] == 4_000 - arrivals[r["rank"]] and r["transfer_ns"] == transfer
            assert r["algbw_gbps"] == size / transfer  # bytes per ns = GB/s
            assert r["busbw_gbps"] == size / transfer * factor
