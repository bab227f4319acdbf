#!/usr/bin/env python3
"""Record torch.distributed (gloo, CPU) runs of scripts/workloads/dist.py under Nsight Systems.

    python -m scripts.record.ranks_gloo [NAME ...]     # default: every recording below

Each recording is a real ``torchrun --standalone`` run of 2 or 4 processes recorded by
``nvbridge profile --trace=nvtx,osrt --keep-report DIR -- torchrun ...``: nsys wraps each rank
(one report per rank, ``rank<K>.nsys-rep`` by ``RANK``) or, for the ``onefile`` one
(``--one-report``), one nsys session records the launcher and every rank in one report. The
``2nodes`` one simulates two nodes on this host: two ``--one-report`` sessions at once, each over
``torchrun --nnodes 2 --node-rank N --nproc-per-node 2 --rdzv-backend c10d`` meeting at one
endpoint (4 ranks, 2 per report: ``NAME.node<N>.sqlite``). Writes into sample_db/:

- ``NAME.rank<K>.sqlite`` per rank (``NAME.sqlite`` for one session): ``nsys export --type
  sqlite`` of the report, unmodified;
- ``NAME.waits.json``: the workload's own clock (the oracle): per rank, per collective, the time
  from entering ``all_reduce`` to leaving it, and the planted straggler's rank, step and sleep.

The environment is cleared (``env -i``: PATH, HOME, LANG, PYTHONPATH to this checkout) so the
user's variables stay out of the committed files; the emit_nvtx observer is built once first
into a temporary cache, so the ranks do not each compile it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from scripts.paths import ROOT, SAMPLE_DB

WORKLOAD = ROOT / "scripts" / "workloads" / "dist.py"


@dataclass(frozen=True)
class Recording:
    name: str
    nproc: int  # per node
    steps: int = 4
    straggler: tuple[int, int, float] | None = None  # rank, step, sleep ms
    one_session: bool = False
    nodes: int = 1  # >1: one nsys session per simulated node, each over its own torchrun (shape C)

    def workload_args(self, waits: Path) -> list[str]:
        args = ["--steps", str(self.steps), "--waits", str(waits)]
        if self.straggler is not None:
            rank, step, ms = self.straggler
            args += ["--straggler-rank", str(rank), "--straggler-step", str(step), "--sleep-ms", str(ms)]
        return args


RECORDINGS = {
    r.name: r
    for r in (
        Recording("ranks_gloo2_cpu", 2),
        Recording("ranks_gloo2_straggler_cpu", 2, straggler=(1, 2, 50.0)),
        Recording("ranks_gloo4_straggler_cpu", 4, straggler=(2, 1, 50.0)),
        Recording("ranks_gloo2_onefile_cpu", 2, straggler=(0, 2, 50.0), one_session=True),
        Recording("ranks_gloo4_2nodes_cpu", 2, straggler=(2, 1, 50.0), one_session=True, nodes=2),
    )
}
# nsys options after nvbridge profile's own (which trace CUDA too; there is no GPU here)
NSYS_FLAGS = ["--trace=nvtx,osrt"]


def clean_env(tmp: Path) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(ROOT),
        "NVBRIDGE_CACHE_DIR": str(tmp / "cache"),
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return int(sock.getsockname()[1])


def launch_argv(rec: Recording, reports: Path, waits: Path, node: int = 0, port: int = 0) -> list[str]:
    """``nvbridge profile`` of torchrun: nsys around each rank (reports kept in ``reports``), or
    with ``--one-report`` one nsys session around torchrun (``reports/NAME.nsys-rep``); with
    several nodes, node ``node``'s session (``reports/NAME.node<N>.nsys-rep``) over a torchrun
    that meets the other nodes' through the c10d rendezvous on ``localhost:port``."""
    # no dot in the kept name: nvbridge profile finds a .qdstrm by with_suffix, which would eat ".node0"
    stem = f"node{node}" if rec.nodes > 1 else rec.name
    kept = reports / f"{stem}.nsys-rep" if rec.one_session else reports
    profile = [sys.executable, "-m", "nvbridge", "profile", "-o", str(reports.parent / f"dataset{node}")]
    profile += ["--keep-report", str(kept), *(["--one-report"] if rec.one_session else []), *NSYS_FLAGS, "--"]
    if rec.nodes > 1:
        torchrun = ["torchrun", f"--nnodes={rec.nodes}", f"--node-rank={node}", f"--nproc-per-node={rec.nproc}"]
        torchrun += ["--rdzv-backend=c10d", f"--rdzv-endpoint=localhost:{port}"]
    else:
        torchrun = ["torchrun", "--standalone", f"--nproc-per-node={rec.nproc}"]
    return [*profile, *torchrun, str(WORKLOAD), *rec.workload_args(waits)]


def run_nodes(rec: Recording, reports: Path, waits: Path, env: dict[str, str], cwd: Path) -> None:
    """Every node's session at once (they rendezvous), each its own ``nvbridge profile``."""
    port = free_port()
    procs = [
        subprocess.Popen(launch_argv(rec, reports, waits, node, port), env=env, cwd=cwd, stdout=subprocess.DEVNULL)
        for node in range(rec.nodes)
    ]
    codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit(f"{rec.name}: the nodes' sessions exited {codes}")


def record(rec: Recording, out: Path) -> list[Path]:
    with tempfile.TemporaryDirectory(prefix="ranks_gloo-") as work:
        tmp = Path(work)
        env = clean_env(tmp)
        build = "from nvbridge.annotate import _observer; assert _observer.load(), _observer.unavailable_reason()"
        subprocess.run([sys.executable, "-c", build], env=env, check=True)
        reports = tmp / "reports"
        if rec.one_session:
            reports.mkdir()
        waits = tmp / "waits"
        if rec.nodes > 1:
            run_nodes(rec, reports, waits, env, tmp)
        else:
            subprocess.run(launch_argv(rec, reports, waits), env=env, check=True, cwd=tmp, stdout=subprocess.DEVNULL)
        written = []
        for rep in sorted(reports.glob("*.nsys-rep")):
            one = rec.one_session and rec.nodes == 1
            dest = out / (f"{rec.name}.sqlite" if one else f"{rec.name}.{rep.stem}.sqlite")
            dest.unlink(missing_ok=True)
            subprocess.run(
                ["nsys", "export", "--type", "sqlite", "-o", str(dest), str(rep)], check=True, capture_output=True
            )
            written.append(dest)
        ranks = [json.loads(p.read_text()) for p in sorted(tmp.glob("waits.rank*.json"))]
        if len(ranks) != rec.nproc * rec.nodes:
            sys.exit(f"{rec.name}: {len(ranks)} of {rec.nproc * rec.nodes} ranks wrote their waits")
        oracle = out / f"{rec.name}.waits.json"
        oracle.write_text(json.dumps({"recording": rec.name, "ranks": ranks}, indent=1) + "\n")
        return [*written, oracle]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"some of {', '.join(RECORDINGS)} (default: all)")
    parser.add_argument("--out", type=Path, default=SAMPLE_DB)
    args = parser.parse_args(argv)
    unknown = set(args.names) - set(RECORDINGS)
    if unknown:
        parser.error(f"unknown recording {', '.join(sorted(unknown))}; choose from {', '.join(RECORDINGS)}")
    if shutil.which("nsys") is None or shutil.which("torchrun") is None:
        sys.exit("needs nsys and torchrun on PATH (scripts/install_nsys.sh; pip install torch)")
    for name in args.names or RECORDINGS:
        for path in record(RECORDINGS[name], args.out):
            print(f"{path}: {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
