"""Where outputs go: destination checks, staging, exclusive publishing, recovery, clean-up.

A dataset is built in a staging directory beside its destination and renamed into place only
once complete, so no reader ever sees half a dataset. The rules users rely on:

- ``--force`` replaces only an nvbridge dataset (its ``meta.parquet`` says so, and the
  directory holds nothing nvbridge did not write); any other directory is refused. A symlinked
  destination is written through: the dataset replaces the one the link points to.
- Publishing is exclusive: the check and the renames happen under a lock on the parent
  directory, so of two runs racing to one new destination exactly one wins and the other says so.
- A replaced dataset is renamed aside, its successor renamed in, and only then removed. A run
  killed between the two renames leaves the old one aside and nothing at the name: the next run
  into that folder puts it back before it removes anything.
- A run that is interrupted (SIGINT, SIGTERM) removes its staging directories and exits at
  once; one that was killed (SIGKILL) leaves a staging directory whose name carries its host
  and process id, and the next run in that folder removes it.
- Staging names fit the file system's limit whatever the destination's name: a long name is
  cut, with a hash of the whole, so 220-255-byte names work.
- Directories are created with the permissions the user's umask gives, like ``mkdir``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import secrets
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path

from nvbridge.errors import ExportError
from nvbridge.output.interrupts import LIVE, deferred_interrupts, remove
from nvbridge.output.interrupts import exit_on_interrupt as exit_on_interrupt  # part of this module's API
from nvbridge.output.names import NAME_MAX, printable, write_error
from nvbridge.output.names import check_name as check_name  # part of this module's API
from nvbridge.output.names import writing as writing  # part of this module's API
from nvbridge.output.owned import written_by_nvbridge

# Files a dataset directory holds (see export/parquet.py): anything else in a directory means it
# is not ours to replace.
DATASET_FILES = frozenset(
    {
        "meta.parquet",
        "ops.parquet",
        "gpu_ops.parquet",
        "api_calls.parquet",
        "marks.parquet",
        "syncs.parquet",
        "threads.parquet",
        "devices.parquet",
        "memory.parquet",
    }
)
# In-flight names: .<dest>.nvbridge-staging.<host>.<pid>.<random>[<suffix>] (built, not yet in
# place) and .<dest>.nvbridge-old.<host>.<pid>.<random> (a replaced dataset, removed once its
# successor is in place).
_STAGING = ".nvbridge-staging"
_OLD = ".nvbridge-old"
_HOST_CHARS = 40
_SUFFIX_CHARS = 8
# The longest tail an in-flight name adds after its stem: marker, host, pid (at most 7 digits on
# Linux), 8 hex digits and a suffix.
_TAIL_MAX = len(_STAGING) + 1 + _HOST_CHARS + 1 + 7 + 1 + 8 + _SUFFIX_CHARS


def _host() -> str:
    return (socket.gethostname().replace(".", "_") or "host")[:_HOST_CHARS]


def check_parent(path: Path, what: str) -> None:
    """The folder an output goes into must exist (nothing is created silently), and the output
    can be named there (:func:`check_name`)."""
    check_name(path, what)
    parent = path.absolute().parent
    shown = printable(str(path))
    if parent.exists() and not parent.is_dir():
        raise ExportError(
            f"cannot write {what} {shown}: {printable(str(parent))} is a file, not a folder; choose another path."
        )
    if not parent.is_dir():
        raise ExportError(
            f"cannot write {what} {shown}: the folder {printable(str(parent))} does not exist; create the folder "
            "first or choose another path."
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ExportError(
            f"cannot write {what} {shown}: the folder {printable(str(parent))} is not writable; choose another path."
        )


def check_file_destination(path: Path, force: bool, what: str) -> None:
    """A single output file (trace, picture, page, kept report): its folder exists, it is not a
    folder, and an existing file is replaced only with ``force`` and only if nvbridge wrote it
    (nvbridge.output.owned: a file of the right suffix is not enough)."""
    check_parent(path, what)
    shown = printable(str(path))
    if path.is_dir():
        raise ExportError(f"{shown} is a folder; give a file name for {what}.")
    if path.exists() and not force:
        raise ExportError(f"{shown} already exists; choose another file or pass --force to replace it.")
    if path.exists() and not written_by_nvbridge(path):
        raise ExportError(
            f"{shown} was not written by nvbridge; --force replaces only nvbridge's own files: "
            f"choose another file for {what} or remove this one yourself."
        )


def is_dataset(path: Path) -> bool:
    """An nvbridge dataset: a report directory (meta.parquet written by nvbridge, nothing foreign)
    or a directory of ``report=<name>`` report directories. Hidden entries count as foreign too
    (``.ipynb_checkpoints``, a user's dot-file), except nvbridge's own staging and replaced ones."""
    try:
        entries = [p for p in path.iterdir() if not _ours_in_flight(p.name)]
    except OSError:
        return False
    if (path / "meta.parquet").is_file():
        return _our_meta(path / "meta.parquet") and all(p.name in DATASET_FILES for p in entries)
    return bool(entries) and all(p.name.startswith("report=") and p.is_dir() and is_dataset(p) for p in entries)


def _ours_in_flight(name: str) -> bool:
    """A staging or replaced directory nvbridge names (``.<name>.nvbridge-staging.<host>.<pid>.<rand>``)."""
    return name.startswith(".") and (f"{_STAGING}." in name or f"{_OLD}." in name)


def _our_meta(meta: Path) -> bool:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(meta)
        return "nvbridge_version" in table.column("key").to_pylist()
    except Exception:  # unreadable or foreign parquet: not a dataset we wrote
        return False


def dataset_path(output: Path) -> Path:
    """Where a dataset named ``output`` goes: a symlink is written through (the dataset replaces
    what it points to, beside it, so the renames stay in one file system and no link is left
    aside)."""
    return output.resolve() if output.is_symlink() else output


def check_directory(output: Path, inputs: Sequence[str | os.PathLike[str]]) -> None:
    """A dataset directory may go at ``output``: its folder exists, it is not a file, its path
    is UTF-8, and no input (local paths; URLs are skipped) lives inside it."""
    check_name(output, "the dataset", utf8=True)
    output = dataset_path(output)
    check_parent(output, "the dataset")
    check_name(output, "the dataset", utf8=True)
    if not output.exists():
        return
    shown = printable(str(output))
    if not output.is_dir():
        raise ExportError(f"{shown} is a file; pass a directory path for the dataset.")
    out = output.resolve()
    for source in inputs:
        if "://" not in os.fspath(source) and out in Path(os.fspath(source)).resolve().parents:
            raise ExportError(
                f"the input {printable(os.fspath(source))} is inside the output directory {shown}; "
                f"choose an output directory that does not hold the input."
            )


def check_destination(output: Path, force: bool, inputs: Sequence[str | os.PathLike[str]]) -> None:
    """A dataset may be written to ``output``: :func:`check_directory`, and ``output`` is new, an
    empty directory, or (with ``force``) an nvbridge dataset."""
    check_directory(output, inputs)
    output = dataset_path(output)
    # What killed runs left goes first: a dataset one left aside is back before it is judged.
    remove_stale(output.absolute().parent, output.name)
    if not output.exists() or _is_empty(output):
        return
    shown = printable(str(output))
    if not force:
        raise ExportError(f"{shown} already exists; choose another output directory or pass --force to replace it.")
    if not is_dataset(output):
        raise ExportError(
            f"{shown} is not an nvbridge dataset (it holds other files); --force replaces only a "
            f"dataset nvbridge wrote: choose another output directory."
        )


def _is_empty(path: Path) -> bool:
    return not any(path.iterdir())


def make_dir(path: Path) -> bool:
    """Create ``path`` (parent must exist) with the umask's permissions; False if it existed."""
    try:
        path.mkdir(mode=0o777)
        return True
    except FileExistsError:
        if not path.is_dir():
            raise ExportError(f"{printable(str(path))} is a file; pass a directory path for the dataset.") from None
        return False
    except OSError as exc:
        raise write_error(path, "the dataset", exc) from exc


# ---- in-flight names: staging, replaced datasets; recovery and clean-up of killed runs ----


def _stem(name: str) -> str:
    """``.<name>``, or, where that and the longest tail would not fit in one name, its first bytes
    and a hash of the whole: the same for every run, so a later one finds what a killed one left."""
    stem = os.fsencode("." + name)
    room = NAME_MAX - _TAIL_MAX
    if len(stem) <= room:
        return "." + name
    digest = hashlib.sha1(stem).hexdigest()[:8]
    cut = os.fsdecode(stem[: room - len(digest) - 1])
    # No half of a multi-byte character at the cut: the name stays UTF-8 if the destination's is.
    return cut.rstrip("".join(map(chr, range(0xDC80, 0xDD00)))) + "~" + digest


def in_flight(dest: Path, marker: str = _STAGING, suffix: str = "") -> Path:
    """A fresh hidden name beside ``dest``: ``.<dest>`` (see :func:`_stem`), the marker, this
    host and process, a random part and ``suffix`` (a file's own, for what reads it)."""
    tail = f"{marker}.{_host()}.{os.getpid()}.{secrets.token_hex(4)}{suffix[:_SUFFIX_CHARS]}"
    return dest.absolute().parent / (_stem(dest.name) + tail)


@contextlib.contextmanager
def staging(output: Path) -> Iterator[Path]:
    """A fresh directory beside ``output`` to build it in, removed unless published in the block.

    What killed runs left for ``output`` is recovered or removed first (:func:`remove_stale`).
    """
    output = dataset_path(output)
    parent = output.absolute().parent
    remove_stale(parent, output.name)
    tmp = in_flight(output)
    try:
        tmp.mkdir(mode=0o777)
    except OSError as exc:
        raise write_error(output, "the dataset", exc) from exc
    LIVE.add(tmp)
    try:
        yield tmp
    finally:  # published (renamed away), or failed: either way nothing stays behind
        if tmp.exists():
            remove(tmp)
        LIVE.discard(tmp)


def staging_file(dest: Path, suffix: str = "") -> Path:
    """A file name beside ``dest`` to write it under until it is complete (then renamed over
    ``dest``): removed on SIGINT/SIGTERM (:func:`exit_on_interrupt`), and by the next run into
    the folder if this process is killed. Call :func:`release` once it is renamed or removed."""
    remove_stale(dest.absolute().parent, dest.name)
    tmp = in_flight(dest, suffix=suffix)
    LIVE.add(tmp)
    return tmp


def release(path: Path) -> None:
    """``path`` (from :func:`staging_file`) is gone or published: an interrupt leaves it alone."""
    LIVE.discard(path)


# An in-flight name's tail: marker, host, pid, random part, and a file's own suffix.
_TAIL = re.compile(r"(\.nvbridge-staging|\.nvbridge-old)\.([^.]+)\.([0-9]+)\.[0-9a-f]{8}(?:\.(?!nvbridge-)[^.]*)*$")


def _stale(parent: Path, name: str) -> list[tuple[Path, str]]:
    """(entry, marker) of in-flight names left in ``parent`` by runs of this host that are gone:
    every staging name (whatever it was for: a file written under a staging name is itself
    staged by its writer), and the replaced datasets of ``name``."""
    prefix = _stem(name) + _OLD + "."
    found = []
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            m = _TAIL.search(entry.name)
            if not entry.name.startswith(".") or m is None or m.group(2) != _host() or _alive(int(m.group(3))):
                continue
            if m.group(1) == _STAGING or entry.name.startswith(prefix):
                found.append((entry, m.group(1)))
    return found


def recover(output: Path) -> None:
    """A dataset a killed run had renamed aside, with nothing at its name (killed between
    publishing's two renames): put back, under the folder's lock, before anything is removed."""
    parent = output.absolute().parent
    if os.path.lexists(output):
        return
    with _parent_lock(parent), deferred_interrupts():
        aside = [entry for entry, marker in _stale(parent, output.name) if marker == _OLD]
        if aside and not os.path.lexists(output):
            newest = max(aside, key=lambda p: p.lstat().st_mtime_ns)
            with contextlib.suppress(OSError):
                newest.rename(output)


def remove_stale(parent: Path, name: str) -> None:
    """Recover (:func:`recover`), then remove what killed runs of this host left in ``parent``:
    staging files and directories, and replaced datasets of ``name``."""
    with contextlib.suppress(OSError):
        recover(parent / name)
    for entry, _marker in _stale(parent, name):
        remove(entry)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def publish(tmp: Path, output: Path, force: bool) -> None:
    """Move a finished dataset into place, exclusively.

    Under a lock on the parent directory: a destination that appeared since the start is refused
    (another run got there first) unless ``force`` and it is a dataset; a replaced dataset is
    renamed aside, the new one renamed in, and only then the old one removed. Interrupts wait
    until the names are settled, so an interrupted ``--force`` never loses the old dataset; a
    killed one leaves it aside for the next run to put back (:func:`recover`).
    """
    output = dataset_path(output)
    parent = output.absolute().parent
    shown = printable(str(output))
    with _parent_lock(parent), deferred_interrupts():
        old = None
        if output.exists() and not (output.is_dir() and _is_empty(output)):
            if not force:
                raise ExportError(
                    f"{shown} was created by another run while this one converted; "
                    f"choose another output directory or pass --force to replace it."
                )
            if not is_dataset(output):
                raise ExportError(
                    f"{shown} is not an nvbridge dataset (it holds other files); --force replaces "
                    f"only a dataset nvbridge wrote: choose another output directory."
                )
            old = in_flight(output, _OLD)
            output.rename(old)
        try:
            tmp.rename(output)  # replaces an empty directory, refuses a non-empty one
        except OSError as exc:
            if old is not None:
                old.rename(output)
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise ExportError(
                    f"{shown} was created by another run while this one converted; "
                    f"choose another output directory or pass --force to replace it."
                ) from exc
            raise write_error(output, "the dataset", exc) from exc
    if old is not None:
        remove(old)


@contextlib.contextmanager
def _parent_lock(parent: Path) -> Iterator[None]:
    fd = os.open(parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
