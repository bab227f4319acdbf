"""Whether a single output file is one nvbridge wrote: the rule that lets ``--force`` replace it.

``--force`` replaces a dataset only if nvbridge wrote it (nvbridge.output.publish.is_dataset);
a single file gets the same rule. Each writer marks its file where a reader of the format
looks for its author, near the start so the check reads a few kilobytes, not the file:

- the report page: ``<meta name="generator" content="nvbridge">`` in its head;
- a Chrome trace: its ``"nvbridge": {"dataset_schema_version": ...}`` block, written before
  the events (in a .json.gz, in the first decompressed kilobytes);
- a picture: PNG's ``Software`` text chunk, SVG's and PDF's ``Creator`` (:func:`picture_metadata`);
  PDF keeps its document information at the end, so the check also reads the file's tail.

A kept Nsight Systems report is written by nsys, which nvbridge cannot mark: ``--force``
replaces a file there only if it is an Nsight Systems report (its magic), never another file.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from nvbridge._version import __version__

GENERATOR = "nvbridge"
HTML_MARK = f'<meta name="generator" content="{GENERATOR}">'
# Where a picture's author goes, per format (matplotlib's savefig(metadata=...) keys).
_PICTURE_KEY = {"png": "Software", "svg": "Creator", "pdf": "Creator"}
_HEAD = 1 << 16
_PDF_TAIL = 1 << 18  # the Info dictionary and the cross-reference table after it
_NSYS_MAGIC = b"NVIDIA Tegra Profiler Report"

__all__ = ["GENERATOR", "HTML_MARK", "picture_metadata", "written_by_nvbridge"]


def picture_metadata(fmt: str) -> dict[str, str]:
    """savefig's ``metadata`` for a picture of format ``fmt`` (png, svg, pdf): the mark."""
    return {_PICTURE_KEY[fmt.lower()]: f"{GENERATOR} {__version__}"}


def written_by_nvbridge(path: Path) -> bool:
    """Whether the existing file ``path`` carries nvbridge's mark for its kind (by suffix)."""
    name = path.name.lower()
    try:
        if name.endswith(".json.gz"):
            return _TRACE_MARK in _gunzipped_head(path)
        if name.endswith(".json"):
            return _TRACE_MARK in _head(path)
        if name.endswith((".html", ".htm")):
            return HTML_MARK.encode() in _head(path)
        if name.endswith(".png"):
            return _png_software(_head(path)).startswith(GENERATOR.encode())
        if name.endswith(".svg"):
            return f"<dc:title>{GENERATOR} ".encode() in _head(path)
        if name.endswith(".pdf"):
            return f"/Creator ({GENERATOR} ".encode() in _tail(path, _PDF_TAIL)
        if name.endswith((".nsys-rep", ".qdrep")):
            return _head(path).startswith(_NSYS_MAGIC)
    except OSError:
        return False
    return False


_TRACE_MARK = b'"nvbridge": {"dataset_schema_version"'


def _head(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(_HEAD)


def _tail(path: Path, size: int) -> bytes:
    with path.open("rb") as f:
        f.seek(0, 2)
        f.seek(max(0, f.tell() - size))
        return f.read()


def _gunzipped_head(path: Path) -> bytes:
    try:
        with gzip.open(path, "rb") as f:
            return f.read(4096)
    except (EOFError, zlib.error, gzip.BadGzipFile):
        return b""


def _png_software(head: bytes) -> bytes:
    """The PNG's ``Software`` text before its image data (b"" if none, or not a PNG)."""
    if not head.startswith(b"\x89PNG\r\n\x1a\n"):
        return b""
    at = 8
    while at + 8 <= len(head):
        length = int.from_bytes(head[at : at + 4], "big")
        kind = head[at + 4 : at + 8]
        if kind in (b"IDAT", b"IEND"):
            break
        body = head[at + 8 : at + 8 + length]
        if kind == b"tEXt" and body.startswith(b"Software\x00"):
            return body[len(b"Software\x00") :]
        at += 12 + length
    return b""
