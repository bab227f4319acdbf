"""Which rank each host process of a report is, and what a trace file's ``distributedInfo`` says.

torch.profiler writes one trace per rank, and the tools that read Kineto traces take a file for
one rank: Holistic Trace Analysis maps each file to the ``distributedInfo.rank`` it finds, and
treats every GPU event in it as that rank's. A report of a multi-process run (``nsys profile
torchrun ...``) holds several ranks in one capture; in one trace file their GPU timelines would
be read as one (HTA's comm/compute overlap of the FSDP export: 54% where each rank's is 0%).

The rule (the ranks of one report):

- The ranks are the processes that ran GPU work (launched a GPU op), by increasing process id:
  torchrun starts its workers in rank order, and a process that only launched others (the
  launcher) or only recorded ranges is not a rank. A report without GPU work: the processes that
  recorded ranges or CUDA calls, by process id.
- A report with one rank: its rank is the one the report recorded (``RANK`` from the captured
  environment or the file name: ``meta.rank``), else 0; its world size is 1 when no rank was
  recorded, else unknown (not written). With several ranks a recorded rank is the capture's
  (the launcher's environment, a file name), not a process's, and is not used.

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
from nvbridge.timeline import owning_process

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


def report_ranks(gpu_processes: Iterable[int], host_processes: Iterable[int], recorded: int | None) -> Ranks:
    """The rule of the module doc. ``gpu_processes``: processes that launched GPU ops;
    ``host_processes``: processes with ranges or CUDA calls; ``recorded``: ``meta.rank``."""
    procs = sorted(set(gpu_processes)) or sorted(set(host_processes))
    if len(procs) <= 1 and recorded is not None:
        return Ranks({p: recorded for p in procs}, None, recorded)
    return Ranks({p: i for i, p in enumerate(procs)}, max(len(procs), 1))


def tables_ranks(ops: pa.Table, api_calls: pa.Table, gpu_ops: pa.Table, recorded: int | None) -> Ranks:
    """The ranks of a report held whole (:func:`nvbridge.export.trace_ranks.report_ranks`)."""
    gpu = owning_process(np_col(gpu_ops, "process_id", fill=-1), np_col(gpu_ops, "device_id", fill=-1))
    host = [np.unique(np_col(t, "process_id", fill=-1)) for t in (ops, api_calls)]
    return report_ranks(
        (p for p in np.unique(gpu).tolist() if p >= 0),
        (p for p in np.unique(np.concatenate(host)).tolist() if p >= 0),
        recorded,
    )


def recorded_rank(meta: Mapping[str, str | None]) -> int | None:
    """``meta.rank`` as an integer (a dataset stores text; None where none was recorded), as
    ``nvbridge.dataset.parse_rank`` reads it."""
    value = meta.get("rank")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


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
