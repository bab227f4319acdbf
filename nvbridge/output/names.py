"""Output names the system can take, and the machine's refusals as one line.

A name longer than the file system allows, a path longer than the kernel takes (a working
directory nested too deep), a path that is not UTF-8 where Arrow opens it, a full disk: each is
one line naming the problem and the fix, never an internal error. Names in messages are made
printable: a newline in a file name cannot split the error line; counts are spelled with their
noun (``plural``), in messages and in the tables the commands print.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

from nvbridge.errors import ExportError

NAME_MAX = 255  # bytes of one name (ext4, xfs, btrfs, tmpfs, NTFS via Linux: all 255)
PATH_MAX = 4096  # bytes of a path the kernel takes (Linux)


def plural(n: int, noun: str) -> str:
    """``1 kernel``, ``2 kernels``, ``1,234 GPU ops``, ``3 processes``: counts read as English."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}es" if noun.endswith("s") else f"{n:,} {noun}s"


def printable(text: str) -> str:
    """``text`` as one printable line: bytes of a file name that are not UTF-8 as ``\\xNN``, line
    breaks and other control characters escaped (a name with a newline cannot split a message)."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif 0xDC80 <= ord(ch) <= 0xDCFF:  # a byte os.fsdecode could not decode
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def utf8_text(text: str) -> str:
    """``text`` with the bytes of a file name that are not UTF-8 as ``\\xNN``, everything else
    kept: what a Parquet or JSON string can hold."""
    if not any(0xDC80 <= ord(ch) <= 0xDCFF for ch in text):
        return text
    return os.fsencode(text).decode("utf-8", "backslashreplace")


# Errors writing an output that are the machine's, not a bug: (what happened, the fix).
_WRITE_ERRNOS = {
    errno.ENOSPC: ("the disk is full", "free space or choose another path"),
    errno.EDQUOT: ("the disk quota is exceeded", "free space or choose another path"),
    errno.EROFS: ("the file system is read-only", "choose another path"),
    errno.EACCES: ("permission denied", "choose another path"),
    errno.EPERM: ("permission denied", "choose another path"),
    errno.EFBIG: ("the file is too large for the file system", "choose another file system"),
    errno.ENAMETOOLONG: ("a name is too long for the file system", "choose a shorter name"),
}


@contextlib.contextmanager
def writing(path: Path, what: str) -> Iterator[None]:
    """Turn a write that the machine refused (disk full, read-only, permissions) into one line."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS:
            raise
        happened, fix = _WRITE_ERRNOS[exc.errno]
        raise ExportError(f"cannot write {what} {printable(str(path))}: {happened}; {fix}.") from exc


def write_error(path: Path, what: str, exc: OSError) -> ExportError:
    """An OSError writing ``path`` as one line naming what happened and the fix."""
    happened, fix = _WRITE_ERRNOS.get(exc.errno or 0, (exc.strerror or str(exc), "choose another path"))
    return ExportError(f"cannot write {what} {printable(str(path))}: {happened}; {fix}.")


def check_name(path: Path, what: str, utf8: bool = False) -> None:
    """``path`` can be named on this system: its name fits NAME_MAX bytes and its absolute path
    PATH_MAX (a working directory nested too deep gives paths the kernel refuses); ``utf8``: its
    path is UTF-8 (Arrow opens files only by UTF-8 paths)."""
    shown = printable(str(path))
    name = len(os.fsencode(path.name))
    if name > NAME_MAX:
        raise ExportError(
            f"cannot use {what} {shown}: its name is {name} bytes, more than the file system allows "
            f"({NAME_MAX}); choose a shorter name."
        )
    full = len(os.fsencode(path.absolute()))
    if full >= PATH_MAX:
        raise ExportError(
            f"cannot use {what} {shown}: its full path is {full} bytes, more than the system allows ({PATH_MAX}); "
            "work in a folder nearer the root or give a shorter path."
        )
    if utf8:
        try:
            os.fspath(path.absolute()).encode("utf-8")
        except UnicodeEncodeError:
            raise ExportError(
                f"cannot use {what} {shown}: its path is not valid UTF-8, which Parquet files need; "
                "rename it or choose a UTF-8 path."
            ) from None
