"""``nvbridge.report``: write the page of a report, whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

from nvbridge.errors import ExportError
from nvbridge.output import publish as outputs
from nvbridge.output.names import write_error
from nvbridge.page.build import Source, collect
from nvbridge.page.focus import ADVISE_OPS
from nvbridge.page.html import document

SUFFIXES = (".html", ".htm")


def html_of(
    source: Source,
    *,
    step: int | None = None,
    compare: Source | None = None,
    advise_ops: int = ADVISE_OPS,
    peak_tflops: float | None = None,
    peak_gbps: float | None = None,
) -> str:
    """The page of ``source`` as one HTML document (see :func:`report`)."""
    page = collect(
        source, step=step, compare=compare, advise_ops=advise_ops, peak_tflops=peak_tflops, peak_gbps=peak_gbps
    )
    return document(page)


def report(
    source: Source,
    output: str | os.PathLike[str],
    *,
    step: int | None = None,
    compare: Source | None = None,
    advise_ops: int = ADVISE_OPS,
    peak_tflops: float | None = None,
    peak_gbps: float | None = None,
    force: bool = False,
) -> Path:
    """Write one self-contained HTML page of a report: the capture, per-step bars, the op table,
    GPU time by module, the roofline, advise's findings, a timeline of one step, the cross-rank
    view and, with ``compare``, diff's comparison (docs/report.md).

    Args:
        source: a report database, a dataset directory, a partitioned dataset or a loaded Report.
        output: the page to write (``.html``); its folder must exist.
        step: the step whose timeline is drawn (default: the median step by duration).
        compare: a second run (B) for diff's table and both runs' per-step bars.
        advise_ops: reports with more ops are advised over the focus step only (-1: never).
        peak_tflops, peak_gbps: the GPU's peaks, over the table's (as ``summary``).
        force: replace ``output`` if it exists.

    Returns:
        The path written.

    Raises:
        NvbridgeError: an input that cannot be read, an output that cannot be written.
        MissingDependency: vl-convert-python (``pip install 'nvbridge[report]'``) is missing.
    """
    path = Path(os.fspath(output))
    if path.suffix.lower() not in SUFFIXES:
        raise ExportError(f"{path} does not end in .html; name the page like {path.stem}.html.")
    outputs.check_file_destination(path, force, "the page")
    text = html_of(
        source, step=step, compare=compare, advise_ops=advise_ops, peak_tflops=peak_tflops, peak_gbps=peak_gbps
    )
    tmp = outputs.staging_file(path, suffix=path.suffix)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise write_error(path, "the page", exc) from exc
    finally:
        tmp.unlink(missing_ok=True)
        outputs.release(tmp)
    return path
