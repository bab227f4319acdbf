"""Many reports -> one dataset partitioned by report: locally, in processes, or on Dask.

Every input is checked before anything is written, so a bad one in the list leaves no
partitions of the good ones behind it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from nvbridge.conversion.collectives import write_root
from nvbridge.conversion.report import Progress, convert_one
from nvbridge.conversion.result import ConversionResult
from nvbridge.errors import ExportError
from nvbridge.output import publish as outputs
from nvbridge.output.names import utf8_text
from nvbridge.readers import detect
from nvbridge.readers._db import Database
from nvbridge.readers._files import NSYS_REPORT_SUFFIXES, check_regular

Source = str | os.PathLike[str]


def convert(
    sources: Source | Sequence[Source],
    output: Source,
    *,
    force: bool = False,
    progress: Progress | None = None,
    chrome_trace: Source | None = None,
    chrome_split: str = "auto",
    jobs: int = 1,
    scheduler: str | None = None,
) -> list[ConversionResult]:
    """Convert one or more reports. One source writes ``output`` itself; several write
    ``output/report=<file stem>/`` each, a layout DuckDB, Polars and Spark read as one
    dataset partitioned by report, skipping reports already converted unless ``force``.

    Args:
        chrome_trace, chrome_split: the Chrome trace(s) of a single report (:func:`convert_one`).
        jobs: convert this many reports at once in local processes.
        scheduler: address of a Dask distributed scheduler (``tcp://host:8786``) to convert
            on instead; the workers must see the input and output paths.

    Returns:
        One result per converted report (skipped ones are left out).

    Raises:
        InputError, ExportError: as :func:`convert_one`; nothing of a failed report is left.
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    out = Path(output)
    check_inputs(sources, deep=len(sources) > 1)
    if len(sources) == 1 and jobs <= 1 and scheduler is None:
        return [
            convert_one(
                sources[0], out, force=force, progress=progress, chrome_trace=chrome_trace, chrome_split=chrome_split
            )
        ]
    if chrome_trace is not None:
        raise ExportError("--chrome writes one trace: convert one report at a time, or use `nvbridge trace`.")
    if jobs < 1:
        raise ExportError(f"--jobs {jobs}: give 1 or more reports to convert at once.")
    # A file name that is not UTF-8 names its partition with its odd bytes as \xNN (Parquet
    # needs UTF-8 paths); every partition's name is checked before anything is written.
    stems = [utf8_text(Path(os.fspath(s)).stem) for s in sources]
    if len(set(stems)) != len(stems):
        raise ExportError("two inputs share a file name; rename one so each report gets its own partition.")
    _check_partitioned_destination(out, sources)
    for stem in stems:
        outputs.check_name(out / f"report={stem}", "the partition", utf8=True)
    todo = [
        (s, out / f"report={stem}")
        for s, stem in zip(sources, stems)
        if force or not (out / f"report={stem}" / "meta.parquet").is_file()
    ]
    if scheduler is not None:
        results = _on_dask(scheduler, out, todo, force)
    else:
        created = outputs.make_dir(out)
        try:
            results = _locally(todo, force, jobs, progress)
        except BaseException:
            if created and not any(out.iterdir()):
                out.rmdir()
            raise
    # Across ranks: every report matched, the skipped ones too, once all are in place.
    with outputs.writing(out, "the collectives table"):
        write_root(out)
    return results


def check_inputs(sources: Sequence[Source], deep: bool = False) -> None:
    """Every input is a readable regular file (or a URL), before anything is written; ``deep``:
    each is also opened and recognised as a profile (for many reports, so a bad one late in the
    list does not leave partitions of the ones before it)."""
    for source in sources:
        text = os.fspath(source)
        if "://" not in text:
            check_regular(Path(text))
        if deep and not _is_report(text):
            with Database(source) as db, db.translate_errors():
                detect(db)


def _is_report(text: str) -> bool:
    """An Nsight Systems report that is exported when its turn comes (nsys is needed then)."""
    return "://" not in text and Path(text).suffix.lower() in NSYS_REPORT_SUFFIXES


def _check_partitioned_destination(out: Path, sources: Sequence[Source]) -> None:
    """Several reports go into a new or empty directory, or one that is already such a dataset."""
    outputs.check_directory(out, sources)
    if out.exists() and any(p for p in out.iterdir() if not p.name.startswith(".")) and not outputs.is_dataset(out):
        raise ExportError(f"{out} is not an nvbridge dataset (it holds other files); choose another output directory.")


def _locally(
    todo: list[tuple[Source, Path]], force: bool, jobs: int, progress: Progress | None
) -> list[ConversionResult]:
    if jobs > 1 and len(todo) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # Fresh workers, never a fork of this process: a forked child inherits the reader
        # threads' state (ConnectorX's connection pool, where it reads) without the threads that
        # serve it, and its first read hangs.
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context(method)) as pool:
            futures = [pool.submit(convert_one, s, dest, force=force) for s, dest in todo]
            results = []
            for (s, _), f in zip(todo, futures):
                results.append(f.result())
                if progress:
                    progress(f"converted {Path(os.fspath(s)).name}", results[-1].rows_read)
            return results
    return [convert_one(s, dest, force=force, progress=progress) for s, dest in todo]


def _on_dask(address: str, out: Path, todo: list[tuple[Source, Path]], force: bool) -> list[ConversionResult]:
    """Convert on an existing Dask distributed cluster (the engine NVIDIA's multi-report
    recipes use), one task per report. The output directory is created once the scheduler answers."""
    try:
        from dask.distributed import Client
    except ImportError as exc:
        raise ExportError("--scheduler needs Dask; install it with: pip install 'nvbridge[cluster]'") from exc
    try:
        client = Client(address, timeout="10s")  # type: ignore[no-untyped-call]
    except (OSError, ValueError, TypeError) as exc:
        raise ExportError(f"cannot reach the Dask scheduler at {address} ({exc}); check the address.") from exc
    with client:
        created = outputs.make_dir(out)
        try:
            futures = client.map(lambda job: convert_one(job[0], job[1], force=force), todo, pure=False)
            return list(client.gather(futures))  # type: ignore[no-untyped-call]
        except BaseException:
            if created and not any(out.iterdir()):
                out.rmdir()
            raise
