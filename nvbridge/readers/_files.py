"""What the database layer opens: the input checked as a plain SQLite file first, and a read
path that never writes beside it (WAL-mode files, hot journals)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
import urllib.parse
from pathlib import Path

from nvbridge.errors import DamagedDatabase, NotAProfileDatabase
from nvbridge.output.names import PATH_MAX, printable

SQLITE_MAGIC = b"SQLite format 3\x00"
# Nsight Systems' own report formats: the user has to export them to SQLite first.
NSYS_REPORT_SUFFIXES = (".nsys-rep", ".qdrep", ".qdstrm")


def check_regular(path: Path) -> None:
    """An input that exists and is a regular file: a FIFO or a device is refused before anything
    opens it (opening would block or never end). Checked for every input before a conversion
    writes anything, Nsight Systems reports included."""
    name = printable(path.name)
    full = len(os.fsencode(path.absolute()))
    if full >= PATH_MAX:  # SQLite opens it by its full path, which the kernel would refuse
        raise NotAProfileDatabase(
            f"{name}: its full path is {full} bytes, more than the system allows ({PATH_MAX}); move it, or work, "
            "in a folder nearer the root."
        )
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise NotAProfileDatabase(f"{name}: no such file; check the path.") from None
    except OSError as exc:  # a symlink loop, a name too long, a folder we may not enter
        raise NotAProfileDatabase(f"{name} cannot be opened ({exc.strerror}); check the path.") from None
    if stat.S_ISDIR(mode):
        raise NotAProfileDatabase(f"{name} is a directory, not a profiler database; pass the .sqlite file itself.")
    if not stat.S_ISREG(mode):
        raise NotAProfileDatabase(
            f"{name} is not a regular file (a pipe or device); save the export to a file and pass that."
        )
    if not os.access(path, os.R_OK):
        raise NotAProfileDatabase(f"{name} is not readable (permission denied); check its permissions.")


def check_file(path: Path) -> None:
    """Reject what is plainly not an SQLite profile, before any driver touches it."""
    name = printable(path.name)
    check_regular(path)
    try:
        with path.open("rb") as fh:
            header = fh.read(100)
    except PermissionError:
        raise NotAProfileDatabase(f"{name} is not readable (permission denied); check its permissions.") from None
    if not header.startswith(SQLITE_MAGIC):
        if path.suffix.lower() in NSYS_REPORT_SUFFIXES:
            raise NotAProfileDatabase(
                f"{name} is an Nsight Systems report, not its SQLite export; run "
                f"`nsys export --type sqlite -o {path.stem}.sqlite {name}` and convert that."
            )
        raise NotAProfileDatabase(
            f"{name} is not an SQLite database; nvbridge reads the SQLite export of Nsight "
            "Systems (`nsys export --type sqlite`) or nvprof (`nvprof -o profile.sqlite`)."
        )
    if len(header) < 100:
        raise DamagedDatabase(f"{name} is truncated (header incomplete); export it again.")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    page_count = int.from_bytes(header[28:32], "big")
    # The in-header page count is valid only when the two change counters agree.
    counters_agree = header[24:28] == header[92:96]
    expected = page_size * page_count
    actual = path.stat().st_size
    if counters_agree and page_count and actual < expected:
        raise DamagedDatabase(f"{name} is truncated ({actual} of {expected} bytes); copy or export it again.")


def sqlite_uri(path: Path, immutable: bool = False) -> str:
    """A read-only SQLite URI for ``path`` (percent-encoded, so odd file names work: the bytes
    of the name, so a name that is not UTF-8 too)."""
    return (
        "file:" + urllib.parse.quote(os.fsencode(path.resolve())) + "?mode=ro" + ("&immutable=1" if immutable else "")
    )


def _is_wal(path: Path) -> bool:
    """A WAL-mode database (header bytes 18-19 are 2): SQLite would create -shm beside it even
    to read it."""
    with path.open("rb") as fh:
        header = fh.read(20)
    return header[18:20] == b"\x02\x02"


def readable_copy(path: Path) -> tuple[Path, bool, Path | None]:
    """What to open so nothing is ever written beside ``path``: (file, immutable, temp dir).

    A WAL-mode file without a -wal beside it opens immutable (nothing to merge, no -shm);
    with one, the pair is copied into a temporary folder and read there. A hot journal means
    another program's write was cut short: say so rather than call the file damaged.
    """
    journal = path.with_name(path.name + "-journal")
    if _nonempty(journal):
        raise DamagedDatabase(
            f"{path.name} is locked / in use by another program ({journal.name} beside it: a write "
            "in progress or cut short); let that program finish, or copy both files elsewhere and "
            "open the copy once with sqlite3 to complete the recovery."
        )
    if not _is_wal(path):
        return path, False, None
    wal = path.with_name(path.name + "-wal")
    if not _nonempty(wal):
        return path, True, None
    tmp = Path(tempfile.mkdtemp(prefix="nvbridge-wal-"))
    shutil.copyfile(path, tmp / path.name)
    shutil.copyfile(wal, tmp / wal.name)
    return tmp / path.name, False, tmp


def _nonempty(path: Path) -> bool:
    """A non-empty file at ``path``; a name too long to exist (beside a 250-255-byte input name,
    ``-journal`` overflows the file system's limit) is no file."""
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return False
        raise
