"""What a path holds before it is read: Nsight Systems' own report formats are exported to
SQLite first, and the rows a conversion will read are estimated for progress displays."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from nvbridge.errors import NotAProfileDatabase
from nvbridge.readers._files import NSYS_REPORT_SUFFIXES, sqlite_uri

_EVENT_TABLES = (
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "CUPTI_ACTIVITY_KIND_MARKER",
    "CUPTI_ACTIVITY_KIND_DRIVER",
    "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL",
)
_INSTALL = (
    "install Nsight Systems (https://developer.nvidia.com/nsight-systems; on Debian/Ubuntu "
    "`apt install nsight-systems-cli`) so `nsys` is on PATH, or run `nsys export --type sqlite` "
    "where it is installed and convert the .sqlite"
)
EXPORT_TIMEOUT_S = 3600


def estimate_rows(source: str | os.PathLike[str]) -> int:
    """Rows a conversion will read, from each event table's largest rowid (no scan); 0 if unknown."""
    path = Path(os.fspath(source))
    if "://" in os.fspath(source) or not path.is_file():
        return 0
    try:
        # immutable: an estimate needs no locks, and a WAL-mode file then gets no -shm beside it
        con = sqlite3.connect(sqlite_uri(path, immutable=True), uri=True)
        try:
            have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            return sum(
                int(con.execute(f'SELECT max(rowid) FROM "{t}"').fetchone()[0] or 0) for t in _EVENT_TABLES if t in have
            )
        finally:
            con.close()
    except (sqlite3.Error, OSError, ValueError, TypeError, OverflowError):
        return 0  # the conversion itself reports what is wrong with the file


@contextlib.contextmanager
def exported(source: str | os.PathLike[str]) -> Iterator[str | os.PathLike[str]]:
    """``source`` itself, or for an ``.nsys-rep``/``.qdrep``/``.qdstrm`` report its SQLite export,
    made with the user's ``nsys`` into a temporary folder that is removed afterwards (nothing is
    written beside the report).

    Raises:
        NotAProfileDatabase: the report is missing, nsys (or, for .qdstrm, its QdstrmImporter)
            is not installed, or the export failed.
    """
    text = os.fspath(source)
    path = Path(text)
    if "://" in text or path.suffix.lower() not in NSYS_REPORT_SUFFIXES or _is_sqlite(path):
        yield source
        return
    if not path.is_file():
        raise NotAProfileDatabase(f"{path.name}: no such file; check the path.")
    nsys = shutil.which("nsys")
    if nsys is None:
        raise NotAProfileDatabase(f"{path.name} is an Nsight Systems report and nsys is not on PATH; {_INSTALL}.")
    with tempfile.TemporaryDirectory(prefix="nvbridge-export-") as tmp:
        report = path
        if path.suffix.lower() == ".qdstrm":
            # QdstrmImporter rewrites the stream it imports (measured: its bytes change), so it
            # gets a copy.
            stream = Path(tmp) / path.name
            shutil.copyfile(path, stream)
            report = Path(tmp) / (path.stem + ".nsys-rep")
            import_stream(nsys, stream, report, path.name)
        out = Path(tmp) / (path.stem + ".sqlite")
        _run(path.name, [nsys, "export", "--type", "sqlite", "-o", str(out), str(report)])
        if not out.is_file():
            raise NotAProfileDatabase(
                f"nsys export wrote no database for {path.name}; run `nsys export --type "
                f"sqlite {path.name}` to see why."
            )
        # The export takes the report's own name (it is read by its content, not its suffix),
        # so what the conversion says it read, and the dataset's meta source, name the user's file.
        named = Path(tmp) / "export" / path.name
        named.parent.mkdir()
        out.rename(named)
        yield named


def import_stream(nsys: str, stream: Path, report: Path, name: str) -> None:
    """Import a raw capture (``.qdstrm``) into the report ``report`` (``.nsys-rep``) with
    QdstrmImporter, which rewrites ``stream``: give it a copy. ``name`` names the user's file
    in errors.

    Raises:
        NotAProfileDatabase: QdstrmImporter is not installed or failed.
    """
    _run(name, [_importer(nsys, name), "-i", str(stream), "-o", str(report)])
    if not report.is_file():
        raise NotAProfileDatabase(
            f"QdstrmImporter wrote no report for {name}; run `QdstrmImporter -i {name}` to see why."
        )


def _is_sqlite(path: Path) -> bool:
    """A report suffix on what is really an SQLite export (renamed): read it as it is."""
    try:
        with path.open("rb") as fh:
            return fh.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def _importer(nsys: str, name: str) -> str:
    """QdstrmImporter: $NVBRIDGE_QDSTRM_IMPORTER, on PATH, or in the host-linux-x64 folder beside
    the nsys installation (where 2022-era packages keep it)."""
    candidates = [os.environ.get("NVBRIDGE_QDSTRM_IMPORTER", ""), shutil.which("QdstrmImporter") or ""]
    real = Path(nsys).resolve()
    candidates += [str(d / "host-linux-x64" / "QdstrmImporter") for d in (real.parents[1], real.parents[2])]
    candidates.append("/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter")
    for c in candidates:
        if c and os.access(c, os.X_OK) and Path(c).is_file():
            return c
    raise NotAProfileDatabase(
        f"{name} is an unimported capture (.qdstrm) and QdstrmImporter was not found; set "
        "NVBRIDGE_QDSTRM_IMPORTER to it (host-linux-x64/QdstrmImporter in the Nsight Systems install), or run "
        f"`QdstrmImporter -i {name}` and convert the .nsys-rep it writes."
    )


def _run(name: str, argv: list[str]) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NotAProfileDatabase(f"{Path(argv[0]).name} failed on {name} ({exc}); {_INSTALL}.") from exc
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        detail = lines[-1] if lines else f"exit status {done.returncode}"
        raise NotAProfileDatabase(
            f"{Path(argv[0]).name} could not read {name} ({detail}); the report may be "
            "damaged or from a newer Nsight Systems than the installed one."
        )
