"""The collectives of converted datasets: each report's read a row group at a time (only the
communication ranges and NCCL kernels are kept), matched across ranks
(nvbridge.dataset.collectives), and the files a dataset keeps them in.

Where they live: a many-report dataset keeps ``collectives.parquet`` and its root meta
(``ranks_meta.parquet``: key/value text, the clock and matching keys of docs/dataset.md) beside
its ``report=...`` partitions; a report of several processes keeps ``collectives.parquet`` in
its own dataset.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nvbridge.dataset import collectives_scan as scan
from nvbridge.dataset import nccl_bytes
from nvbridge.dataset.collectives import Matched, ReportCollectives, build
from nvbridge.dataset.dictionaries import compact_table
from nvbridge.dataset.process_ranks import global_ranks
from nvbridge.dataset.ranks import RankTally
from nvbridge.dataset.report import DatasetTables, is_partitioned, load, report_dirs
from nvbridge.errors import DamagedDataset

FILE = "collectives.parquet"
ROOT_META = "ranks_meta.parquet"


def report_name(directory: Path) -> str:
    """A partition's report name (``report=rank1`` -> ``rank1``)."""
    return directory.name.split("=", 1)[1] if directory.name.startswith("report=") else directory.name


def read_report(tables: DatasetTables, name: str, directory: Path | None = None) -> ReportCollectives:
    """One report's collectives and its ranks, reading only what they need (and the NCCL
    payloads its dataset ``directory`` keeps, where it keeps them)."""
    tally = RankTally()
    has = set(tables.column_names("ops"))
    detail = [c for c in scan.OPS_DETAIL if c in has]
    ranges: list[pa.Table] = []
    for chunk in tables.chunks("ops", [*scan.OPS_COLUMNS, *detail]):
        tally.add_ops(chunk)
        ranges.append(scan.comm_rows(chunk))
    kernels: list[pa.Table] = []
    for chunk in tables.chunks("gpu_ops", scan.GPU_COLUMNS):
        tally.add_gpu(chunk)
        kernels.append(scan.nccl_kernels(chunk))
    comm = pa.concat_tables(ranges) if ranges else pa.table({c: [] for c in scan.OPS_COLUMNS})
    nccl = pa.concat_tables(kernels) if kernels else pa.table({c: [] for c in scan.GPU_COLUMNS})
    ranks = {r.process_id: r.rank for r in tally.result(tables.recorded_ranks).ranks}
    return ReportCollectives(name, tables.meta, ranks, scan.instances(comm, nccl, nccl_bytes.read(directory)))


def collectives_of(path: str | os.PathLike[str]) -> Matched:
    """Match the collectives of a dataset: a partitioned one's reports in rank order, or one
    report's processes."""
    p = Path(os.fspath(path))
    if is_partitioned(p):
        reports = _global_ranks([read_report(load(d, streamed=True), report_name(d), d) for d in report_dirs(p)])
    else:
        tables = load(p, streamed=True)
        reports = [read_report(tables, Path(str(tables.meta.get("source") or p.name)).stem, p)]
    return build(reports)


def _global_ranks(reports: list[ReportCollectives]) -> list[ReportCollectives]:
    """Ranks across reports (nvbridge.dataset.process_ranks.global_ranks): a marked process keeps
    its mark (a node's report holds ranks 2 and 3), a one-process report its recorded rank."""
    numbers = global_ranks([(r.meta, r.ranks) for r in reports])
    return [ReportCollectives(r.name, r.meta, ranks, r.found) for r, ranks in zip(reports, numbers)]


def several_ranks(matched: Matched) -> bool:
    """Whether the collectives span more than one rank (else a dataset keeps no table)."""
    t = matched.table
    return t.num_rows > 0 and len(set(zip(t.column("report").to_pylist(), t.column("process_id").to_pylist()))) > 1


def write(matched: Matched, directory: Path, root_meta: bool) -> None:
    """``collectives.parquet`` (and, at a many-report root, ``ranks_meta.parquet``) into
    ``directory``; the matching counts ride in the table file's own key/value metadata too, so
    a report of several ranks (no root meta) still explains its unmatched rows."""
    meta = matched.meta()
    counts = {k.encode(): v.encode() for k, v in meta.items() if k.startswith("collectives.")}
    table = compact_table(matched.table)
    pq.write_table(table.replace_schema_metadata(counts), directory / FILE, compression="zstd")
    if root_meta:
        pq.write_table(pa.table({"key": list(meta), "value": list(meta.values())}), directory / ROOT_META)


def read_collectives(path: str | os.PathLike[str]) -> pa.Table | None:
    """The collectives table a dataset keeps (root or inside), None where it keeps none."""
    file = Path(os.fspath(path)) / FILE
    if not file.is_file():
        return None
    try:
        return pq.read_table(file)
    except (OSError, pa.ArrowException) as exc:
        raise DamagedDataset(f"{file} cannot be read ({exc}); convert the reports again with --force.") from exc


def table_meta(path: str | os.PathLike[str]) -> dict[str, str | None]:
    """The matching counts a collectives table file carries ({} where there is none)."""
    file = Path(os.fspath(path)) / FILE
    if not file.is_file():
        return {}
    found = pq.read_schema(file).metadata or {}
    return {k.decode(): v.decode() for k, v in found.items() if k.startswith(b"collectives.")}


def root_meta(path: str | os.PathLike[str]) -> dict[str, str | None]:
    """A many-report dataset's root meta (clock offsets, residuals, matching counts); {} where none."""
    file = Path(os.fspath(path)) / ROOT_META
    if not file.is_file():
        return {}
    t = pq.read_table(file)
    return dict(zip(t.column("key").to_pylist(), t.column("value").to_pylist()))
