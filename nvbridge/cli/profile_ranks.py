"""``nvbridge profile`` under a launcher: one report per rank, converted into one dataset
partitioned by report (``report=rank<K>``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from nvbridge.conversion.launchers import Launch
from nvbridge.conversion.many import convert
from nvbridge.conversion.record import REPORT_SUFFIXES, record_ranks
from nvbridge.conversion.result import ConversionResult
from nvbridge.errors import ExportError
from nvbridge.output import publish as outputs


def profile_ranks(
    launch: Launch, output: Path, force: bool, keep: Path | None, nsys_options: Sequence[str]
) -> list[ConversionResult]:
    """Record every rank of ``launch`` and convert the reports into ``output``.

    The reports are written in a new folder beside ``output`` (not /tmp: under srun the ranks run
    on other nodes, which see the output's file system, not this node's /tmp), removed afterwards
    unless ``keep`` names a folder to move them to.
    """
    if keep is not None:
        check_keep_folder(keep, force)
    with outputs.writing(output, "a folder for the ranks' reports beside"):
        work = Path(tempfile.mkdtemp(prefix=".nvbridge-profile-", dir=output.resolve().parent))
    try:
        reports = record_ranks(launch, work, nsys_options)
        if keep is not None:
            reports = keep_reports(reports, keep, force)
        # jobs >= 2 also keeps a lone report (the other ranks failed) in its partition,
        # report=rank<K>, the shape of a run of ranks
        jobs = max(2, min(len(reports), os.cpu_count() or 1, 8))
        return convert(reports, output, force=force, jobs=jobs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_keep_folder(keep: Path, force: bool) -> None:
    """--keep-report under a launcher names a folder: new, empty, or (with --force) one whose
    rank<K> reports are replaced."""
    if keep.suffix.lower() in REPORT_SUFFIXES:
        raise ExportError(
            f"{keep}: one report per rank is kept; give a folder for them (e.g. {keep.with_suffix('')}), "
            "or pass --one-report for one report."
        )
    if keep.exists() and not keep.is_dir():
        raise ExportError(f"{keep} is a file; give a folder to keep the ranks' reports in.")
    if keep.is_dir() and any(keep.iterdir()) and not force:
        raise ExportError(f"{keep} is not empty; choose another folder or pass --force to replace its reports.")
    if keep.is_dir():  # --force replaces only Nsight Systems reports (nvbridge.output.owned)
        for old in sorted(keep.glob("rank*")):
            if old.suffix.lower() in REPORT_SUFFIXES:
                outputs.check_file_destination(old, force, "the report")


def keep_reports(reports: list[Path], keep: Path, force: bool) -> list[Path]:
    """Move the reports into ``keep`` (checked before the run; checked again after it)."""
    check_keep_folder(keep, force)
    keep.mkdir(parents=True, exist_ok=True)
    kept = []
    for report in reports:
        dest = keep / report.name
        outputs.check_file_destination(dest, force, "the report")
        with outputs.writing(dest, "the report"):
            shutil.move(report, dest)
        kept.append(dest)
    return kept
