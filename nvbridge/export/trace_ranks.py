"""Which rank each host process of a report is, and what a trace file's ``distributedInfo`` says.

torch.profiler writes one trace per rank, and the tools that read Kineto traces take a file for
one rank: Holistic Trace Analysis maps each file to the ``distributedInfo.rank`` it finds, and
treats every GPU event in it as that rank's. A report of a multi-process run (``nsys profile
torchrun ...``) holds several ranks in one capture; in one trace file their GPU timelines would
be read as one (HTA's comm/compute overlap of the FSDP export: 54% where each rank's is 0%).

The rule is nvbridge.dataset.ranks' (the one summary's --rank/--device and advise's lanes use):
a process that wrote emit_nvtx's rank mark is that rank (``meta.process_ranks``); the others,
the processes that ran GPU work, numbered by the lowest GPU each ran work on, then by process id
(a process that only launched others or only recorded ranges is no rank); a report without GPU
work, the processes with ranges or CUDA calls. A report with one rank: its rank is the one the
report recorded (``RANK`` from the captured environment or the file name: ``meta.rank``), else 0;
its world size is 1 when no rank was recorded, else unknown (not written). With several ranks a
recorded rank is the capture's (the launcher's environment, a file name), not a process's, and is
not used (a process's own mark is).

A file holding one rank says ``{"rank": R, "world_size": N}``. A file holding several ranks
(``--split none``) names no rank, so HTA warns that the file has none instead of silently taking
it for rank 0's: ``{"world_size": N, "rank_of_process": {"148": 0, "149": 1}}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from nvbridge.columns import np_col
from nvbridge.dataset.ranks import RankTally, Recorded, rank_processes, recorded_ranks

SPLITS = ("auto", "rank", "none")


@dataclass(frozen=True)
class Ranks:
    """The ranks of one report: process id -> rank, and the world size (None: not known)."""

    of: Mapping[int, int]
    world_size: int | None
    unheld: int = 0  # the rank of a file that holds none of them (the recorded rank, else 0)

    def held(self, processes: Iterable[int]) -> list[int]:
        """The ranks' processes among ``processes``, in rank order."""
        mine = set(processes)
        return sorted((p for p in self.of if p in mine), key=lambda p: self.of[p])

    def info(self, processes: Iterable[int]) -> dict[str, object]:
        """``distributedInfo`` of a file holding these host processes' events."""
        held = self.held(processes)
        if len(held) > 1:
            return {
                "world_size": self.world_size,
                "rank_of_process": {str(p): self.of[p] for p in held},
            }
        rank = self.of[held[0]] if held else self.unheld
        return {"rank": rank} if self.world_size is None else {"rank": rank, "world_size": self.world_size}


def report_ranks(
    gpu_work: Mapping[int, Iterable[int]], host_processes: Iterable[int], recorded: Recorded, world: int | None = None
) -> Ranks:
    """The rule of the module doc. ``gpu_work``: per device, the processes that launched GPU ops
    on it (-1: unknown); ``host_processes``: processes with ranges or CUDA calls;
    ``recorded``: ``meta.rank``, or per process the ranks their marks name (:func:`recorded_rank`);
    ``world``: the world size the marks agree on (``meta.world_size``)."""
    found = rank_processes(set(host_processes), {d: set(ps) for d, ps in gpu_work.items()}, recorded)
    of = {r.process_id: r.rank for r in found.ranks}
    if len(of) <= 1 and isinstance(recorded, int):
        return Ranks(of, None, recorded)
    # a node's report holds ranks 2 and 3 of 4: the world is at least one past its highest rank
    return Ranks(of, max(len(of), max(of.values(), default=0) + 1, world or 0))


def tables_ranks(ops: pa.Table, api_calls: pa.Table, gpu_ops: pa.Table, recorded: Recorded) -> Ranks:
    """The ranks of a report held whole (:func:`report_ranks`)."""
    tally = RankTally()
    tally.add_gpu(gpu_ops)
    host = [np.unique(np_col(t, "process_id", fill=-1)) for t in (ops, api_calls)]
    return report_ranks(tally.gpu_work, (p for p in np.unique(np.concatenate(host)).tolist() if p >= 0), recorded)


def recorded_world(meta: Mapping[str, str | None]) -> int | None:
    """``meta.world_size`` (where the processes' rank marks agree on one), else None."""
    value = meta.get("world_size")
    return int(value) if value is not None and value.isdigit() else None


def recorded_rank(meta: Mapping[str, str | None]) -> Recorded:
    """What the report recorded of its ranks (nvbridge.dataset.ranks.recorded_ranks): per process
    where several processes wrote a rank mark (one nsys session over a launcher: each process is
    the rank it marked), else ``meta.rank`` as an integer (None where none was recorded)."""
    return recorded_ranks(meta)


def rank_path(dest: Path, rank: int) -> Path:
    """``NAME.json.gz`` -> ``NAME.rank<K>.json.gz`` (``.json`` likewise)."""
    suffix = ".json.gz" if dest.name.endswith(".json.gz") else ".json"
    return dest.with_name(f"{dest.name[: -len(suffix)]}.rank{rank}{suffix}")


def stale_rank_files(dest: Path, written: Iterable[Path]) -> list[Path]:
    """Other ``NAME.rank<K>`` files beside ``dest``: an earlier run's ranks, which a tool reading
    the folder would take for this run's."""
    suffix = ".json.gz" if dest.name.endswith(".json.gz") else ".json"
    stem = dest.name[: -len(suffix)]
    mine = {p.name for p in written}
    return sorted(
        p
        for p in dest.parent.glob(f"{stem}.rank*{suffix}")
        if p.name not in mine and p.name[len(stem) + 5 : -len(suffix)].isdigit()
    )
