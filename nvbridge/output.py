"""Where outputs go: destination checks, staging, exclusive publishing, interrupt clean-up.

A dataset is built in a staging directory beside its destination and renamed into place only
once complete, so no reader ever sees half a dataset. The rules users rely on:

- ``--force`` replaces only an nvbridge dataset (its ``meta.parquet`` says so, and the
  directory holds nothing nvbridge did not write); any other directory is refused.
- Publishing is exclusive: the check and the rename happen under a lock on the parent
  directory, so of two runs racing to one new destination exactly one wins and the other says so.
- A run that is interrupted (SIGINT, SIGTERM) removes its staging directories and exits at
  once; one that was killed (SIGKILL) leaves a staging directory whose name carries its host
  and process id, and the next run in that folder removes it.
- Directories are created with the permissions the user's umask gives, like ``mkdir``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
import signal
import socket
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

from nvbridge.errors import ExportError

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
    }
)
_STAGING = ".nvbridge-staging"  # in staging names: .<dest>.nvbridge-staging.<host>.<pid>.<random>
_OLD = ".nvbridge-old"  # a replaced dataset, removed once its successor is in place


def _host() -> str:
    return socket.gethostname().replace(".", "_") or "host"


# Errors writing an output that are the machine's, not a bug: the message says which.
_WRITE_ERRNOS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EFBIG: "the file is too large for the file system",
}


@contextlib.contextmanager
def writing(path: Path, what: str) -> Iterator[None]:
    """Turn a write that the machine refused (disk full, read-only, permissions) into one line."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS:
            raise
        raise ExportError(
            f"cannot write {what} {path}: {_WRITE_ERRNOS[exc.errno]}; free space or choose another path."
        ) from exc


def check_parent(path: Path, what: str) -> None:
    """The folder an output goes into must exist (nothing is created silently)."""
    parent = path.absolute().parent
    if parent.exists() and not parent.is_dir():
        raise ExportError(f"cannot write {what} {path}: {parent} is a file, not a folder; choose another path.")
    if not parent.is_dir():
        raise ExportError(
            f"cannot write {what} {path}: the folder {parent} does not exist; create the folder first or choose "
            "another path."
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ExportError(f"cannot write {what} {path}: the folder {parent} is not writable; choose another path.")


def check_file_destination(path: Path, force: bool, what: str) -> None:
    """A single output file (trace, picture, kept report): its folder exists, it is not a folder,
    and an existing file is replaced only with ``force``."""
    check_parent(path, what)
    if path.is_dir():
        raise ExportError(f"{path} is a folder; give a file name for {what}.")
    if path.exists() and not force:
        raise ExportError(f"{path} already exists; choose another file or pass --force to replace it.")


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


def check_directory(output: Path, inputs: Sequence[str | os.PathLike[str]]) -> None:
    """A dataset directory may go at ``output``: its folder exists, it is not a file, and no input
    (local paths; URLs are skipped) lives inside it."""
    check_parent(output, "the dataset")
    if not output.exists():
        return
    if not output.is_dir():
        raise ExportError(f"{output} is a file; pass a directory path for the dataset.")
    out = output.resolve()
    for source in inputs:
        if "://" not in os.fspath(source) and out in Path(os.fspath(source)).resolve().parents:
            raise ExportError(
                f"the input {source} is inside the output directory {output}; "
                f"choose an output directory that does not hold the input."
            )


def check_destination(output: Path, force: bool, inputs: Sequence[str | os.PathLike[str]]) -> None:
    """A dataset may be written to ``output``: :func:`check_directory`, and ``output`` is new, an
    empty directory, or (with ``force``) an nvbridge dataset."""
    check_directory(output, inputs)
    if not output.exists() or _is_empty(output):
        return
    if not force:
        raise ExportError(f"{output} already exists; choose another output directory or pass --force to replace it.")
    if not is_dataset(output):
        raise ExportError(
            f"{output} is not an nvbridge dataset (it holds other files); --force replaces only a "
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
            raise ExportError(f"{path} is a file; pass a directory path for the dataset.") from None
        return False
    except OSError as exc:
        raise ExportError(f"cannot create {path} ({exc.strerror}); choose another path.") from exc


@contextlib.contextmanager
def staging(output: Path) -> Iterator[Path]:
    """A fresh directory beside ``output`` to build it in, removed unless published in the block.

    Stale staging directories of runs on this host that no longer exist are removed first.
    """
    parent = output.absolute().parent
    remove_stale(parent, output.name)
    tmp = parent / f".{output.name}{_STAGING}.{_host()}.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        tmp.mkdir(mode=0o777)
    except OSError as exc:
        raise ExportError(f"cannot write in {parent} ({exc.strerror}); choose another output directory.") from exc
    _LIVE.add(tmp)
    try:
        yield tmp
    finally:  # published (renamed away), or failed: either way nothing stays behind
        if tmp.exists():
            _remove(tmp)
        _LIVE.discard(tmp)


def staging_file(dest: Path) -> Path:
    """A file name beside ``dest`` to write it under until it is complete (then renamed over
    ``dest``): removed on SIGINT/SIGTERM (:func:`exit_on_interrupt`), and by the next run into
    the folder if this process is killed. Call :func:`release` once it is renamed or removed."""
    parent = dest.absolute().parent
    remove_stale(parent, dest.name)
    tmp = parent / f".{dest.name}{_STAGING}.{_host()}.{os.getpid()}.{secrets.token_hex(4)}"
    _LIVE.add(tmp)
    return tmp


def release(path: Path) -> None:
    """``path`` (from :func:`staging_file`) is gone or published: an interrupt leaves it alone."""
    _LIVE.discard(path)


def remove_stale(parent: Path, name: str) -> None:
    """Remove staging files and directories, and replaced datasets, left by killed runs of
    ``name`` on this host."""
    prefix = f".{name}"
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            if not entry.name.startswith(prefix):
                continue
            rest = entry.name[len(prefix) :]
            for marker in (_STAGING, _OLD):
                if rest.startswith(marker + "."):
                    fields = rest[len(marker) + 1 :].split(".")
                    if len(fields) == 3 and fields[0] == _host() and fields[1].isdigit() and not _alive(int(fields[1])):
                        _remove(entry)


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
    until the names are settled, so an interrupted ``--force`` never loses the old dataset.
    """
    parent = output.absolute().parent
    with _parent_lock(parent), deferred_interrupts():
        old = None
        if output.exists() and not (output.is_dir() and _is_empty(output)):
            if not force:
                raise ExportError(
                    f"{output} was created by another run while this one converted; "
                    f"choose another output directory or pass --force to replace it."
                )
            if not is_dataset(output):
                raise ExportError(
                    f"{output} is not an nvbridge dataset (it holds other files); --force replaces "
                    f"only a dataset nvbridge wrote: choose another output directory."
                )
            old = parent / f".{output.name}{_OLD}.{_host()}.{os.getpid()}.{secrets.token_hex(4)}"
            output.rename(old)
        try:
            tmp.rename(output)  # replaces an empty directory, refuses a non-empty one
        except OSError as exc:
            if old is not None:
                old.rename(output)
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise ExportError(
                    f"{output} was created by another run while this one converted; "
                    f"choose another output directory or pass --force to replace it."
                ) from exc
            raise ExportError(f"cannot move the dataset into {output} ({exc.strerror}).") from exc
    if old is not None:
        _remove(old)


@contextlib.contextmanager
def _parent_lock(parent: Path) -> Iterator[None]:
    fd = os.open(parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _remove(path: Path) -> None:
    if not path.is_dir():
        path.unlink(missing_ok=True)
        return
    # A writer thread may still create a file in it while it is removed: try a few times.
    for _ in range(5):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return


# ---- interrupts: staging directories are removed and the process exits at once ----

_LIVE: set[Path] = set()  # staging directories of this process
_pending: list[int] = []  # signals that arrived inside deferred_interrupts()
_depth = 0


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT/SIGTERM (as handled by :func:`exit_on_interrupt`) until the block ends."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth and _pending:
            _on_signal(_pending.pop(), None)


def exit_on_interrupt() -> None:
    """Make SIGINT and SIGTERM remove this process's staging files and directories and exit at once.

    For the command line only (``nvbridge.cli.main``): the reader and writer threads are not waited for (a bulk
    read cannot be interrupted, and waiting for them took 3-6 s), nothing they write survives.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    if _depth:
        _pending.append(signum)
        return
    removed = bool(_LIVE)
    for tmp in list(_LIVE):
        _remove(tmp)
    name = "interrupted" if signum == signal.SIGINT else "terminated"
    sys.stderr.write(f"\nnvbridge: {name}" + ("; the unfinished output was removed.\n" if removed else ".\n"))
    sys.stderr.flush()
    os._exit(128 + signum)
