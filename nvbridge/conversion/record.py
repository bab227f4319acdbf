"""``nvbridge profile``: record a command under Nsight Systems, then convert what it recorded.

The recording uses the trace flags a PyTorch user wants (CUDA runtime and kernels, NVTX, cuBLAS,
cuDNN, OS runtime above 0.1 ms; no CPU sampling, which costs and is not used). Whatever options
the user passes to nsys win: ours that they also set are left out (nsys refuses an option given
twice), the rest of theirs come after ours.

Some nsys installations (2022.4 from Debian) cannot find their own importer: they leave the raw
capture (``.qdstrm``) and say "Importer error status: The importer binary and its dependencies
were not found." Then the capture is imported here with QdstrmImporter, as DESIGN.md describes,
so the report is an ``.nsys-rep`` whatever nsys managed, and nsys's complaint is held back
unless that import fails too.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, BinaryIO, cast

from nvbridge.conversion.launchers import Launch
from nvbridge.errors import InputError
from nvbridge.readers.sources import import_stream

NSYS_OPTIONS = (
    "--trace=cuda,nvtx,osrt,cublas,cudnn",
    "--sample=none",
    "--cpuctxsw=none",
    "--osrt-threshold=100000",
    "--force-overwrite=true",
)
# the long and short names of each option in NSYS_OPTIONS: nsys (2022.4 at least) refuses an
# option given twice ("Option '--trace' cannot be specified more than once"), so one the user
# gives replaces ours
_OPTION_NAMES = {
    "--trace": ("--trace", "-t"),
    "--sample": ("--sample", "-s"),
    "--cpuctxsw": ("--cpuctxsw",),
    "--osrt-threshold": ("--osrt-threshold",),
    "--force-overwrite": ("--force-overwrite", "-f"),
}
INSTALL_HINT = "install Nsight Systems (on Debian: scripts/install_nsys.sh, or NVIDIA's installer) so `nsys` is on PATH"
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")  # what nsys writes (.qdrep before 2021.4)
# nsys's lines when it could not import the capture itself (nvbridge does it next)
IMPORTER_NOISE = (b"Importer error status:", b"Unable to retrieve the importer version")


def nsys_path() -> str:
    """The nsys CLI, or a one-line error naming the install step."""
    found = shutil.which("nsys")
    if found is None:
        raise InputError(f"nsys (Nsight Systems' command line) is not on PATH; {INSTALL_HINT}.")
    return found


def nsys_options_with(user: Sequence[str]) -> list[str]:
    """NSYS_OPTIONS but those the user's options set too, then the user's: theirs win. Our OS
    runtime threshold goes too where their --trace leaves OS runtime out (nsys warns about it)."""
    given = {name: _value(user, name) for name in _OPTION_NAMES}
    trace = given["--trace"]
    if trace is not None and "osrt" not in trace.split(","):
        given["--osrt-threshold"] = ""
    return [o for o in NSYS_OPTIONS if given[o.split("=")[0]] is None] + list(user)


def _value(user: Sequence[str], name: str) -> str | None:
    """The value ``user`` gives option ``name`` (long or short, ``=``, attached or next), or None."""
    for i, arg in enumerate(user):
        for spelled in _OPTION_NAMES[name]:
            if arg == spelled:
                return user[i + 1] if i + 1 < len(user) else ""
            if arg.startswith(spelled + "="):
                return arg[len(spelled) + 1 :]
            if not spelled.startswith("--") and arg.startswith(spelled):
                return arg[len(spelled) :]
    return None


def record(command: Sequence[str], report: Path, nsys_options: Sequence[str] = ()) -> Path:
    """Run ``command`` under ``nsys profile``, writing the report ``report``.nsys-rep (or .qdrep
    for an nsys before 2021.4); returns its path. Where nsys left only the raw capture
    (``.qdstrm``), it is imported with QdstrmImporter into ``report``.nsys-rep.

    Raises:
        InputError: nsys is missing, the command could not be started, nothing was recorded, or
            the capture could not be imported.
    """
    if not command:
        raise InputError("give the command to profile after --, e.g. nvbridge profile -- python train.py")
    nsys = nsys_path()
    argv = [nsys, "profile", *nsys_options_with(nsys_options), "--output", str(report), *command]
    status, hidden = _run_relaying(argv)
    found = _reports(nsys, [report], hidden)
    if not found:
        _show(hidden)
        raise InputError(f"nsys profile recorded nothing (exit status {status}); run `{' '.join(argv)}` to see why.")
    return found[0]


def record_ranks(launch: Launch, folder: Path, nsys_options: Sequence[str] = ()) -> list[Path]:
    """Run a launcher with nsys around each rank, each writing ``folder/rank<K>.nsys-rep`` (K
    from the launcher's rank variable); returns the reports in rank order.

    Raises:
        InputError: as :func:`record`; or the launcher did not set its rank variable.
    """
    nsys = nsys_path()
    argv = launch.wrapped(rank_shim(nsys, nsys_options, folder, launch.rank_variable))
    status, hidden = _run_relaying(argv)
    stems = sorted({p.stem for p in folder.iterdir() if p.suffix in (*REPORT_SUFFIXES, ".qdstrm")})
    if "rank" in stems:  # the rank variable was not set
        raise InputError(
            f"{launch.kind} did not set {launch.rank_variable} in the ranks' environment; "
            "pass --one-report to record the launcher in one nsys session."
        )
    found = _reports(nsys, [folder / s for s in stems], hidden)
    if not found:
        _show(hidden)
        raise InputError(f"nsys profile recorded no rank (exit status {status}); run `{' '.join(argv)}` to see why.")
    if status != 0:  # a rank that failed after recording: say so, convert what was recorded
        sys.stderr.write(
            f"nvbridge: {launch.kind} exited with status {status}; converting the {len(found)} report(s) recorded.\n"
        )
    return sorted(found, key=lambda p: (len(p.stem), p.stem))


def rank_shim(nsys: str, nsys_options: Sequence[str], folder: Path, variable: str) -> list[str]:
    """What each rank runs before its program: ``sh -c 'exec nsys profile ... --output
    FOLDER/rank$VAR "$@"'``. The shell names the report, not nsys's ``%q{VAR}``: with the variable
    unset, nsys 2022.4 never finishes (it hangs before writing the report); the shell writes
    ``rank``, which :func:`record_ranks` refuses in one line."""
    head = shlex.join([nsys, "profile", *nsys_options_with(nsys_options), "--output"])
    script = f'exec {head} {shlex.quote(str(folder / "rank"))}"${{{variable}:-}}" "$@"'
    return ["sh", "-c", script, "nsys"]


def _reports(nsys: str, names: Sequence[Path], hidden: list[bytes]) -> list[Path]:
    """The report of each name (``.nsys-rep``/``.qdrep``, or a ``.qdstrm`` imported); names
    with neither are left out."""
    out = []
    for report in names:
        # nsys adds its suffix to the whole name: ``train.v2`` -> ``train.v2.nsys-rep``, never
        # with_suffix's ``train.nsys-rep``
        done = next((_plus(report, s) for s in REPORT_SUFFIXES if _plus(report, s).is_file()), None)
        stream = _plus(report, ".qdstrm")
        if done is None and stream.is_file():
            done = _plus(report, ".nsys-rep")
            try:
                import_stream(nsys, stream, done, stream.name)
            except InputError:
                _show(hidden)  # what nsys said about its own attempt
                raise
            stream.unlink()
        if done is not None:
            out.append(done)
    return out


def _plus(report: Path, suffix: str) -> Path:
    return report.with_name(report.name + suffix)


def _run_relaying(argv: list[str]) -> tuple[int, list[bytes]]:
    """Run nsys with the program's output going to the terminal as it comes, but nsys's lines
    about its missing importer held back; returns the exit status and those lines."""
    relay = _Relay(_stderr())
    try:
        proc = subprocess.Popen(argv, stderr=subprocess.PIPE)
    except OSError as exc:
        raise InputError(f"cannot run {argv[0]} ({exc.strerror}); {INSTALL_HINT}.") from exc
    with proc:
        pipe = cast("IO[bytes]", proc.stderr)  # stderr=PIPE: a pipe
        try:
            while data := os.read(pipe.fileno(), 65536):
                relay.feed(data)
            relay.close()
        except BaseException:  # Ctrl-C: nsys got it too; give it a moment to stop, as subprocess.run does
            try:
                proc.wait(timeout=0.25)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise
    return proc.returncode, relay.hidden


def _stderr() -> BinaryIO:
    sys.stderr.flush()  # what was written as text goes first
    return sys.stderr.buffer


def _show(lines: list[bytes]) -> None:
    out = _stderr()
    for line in lines:
        out.write(line)
    out.flush()


class _Relay:
    """Copies a byte stream to ``out`` as it arrives (a progress bar's ``\\r`` updates too),
    holding back only a line that is or may become one of IMPORTER_NOISE: those are kept in
    ``hidden``."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.held = b""  # the start of a line that may still turn out to be noise
        self.passing = False  # the current line was shown in part: show the rest as it comes
        self.hidden: list[bytes] = []

    def feed(self, data: bytes) -> None:
        buf, self.held = self.held + data, b""
        while buf:
            cut = buf.find(b"\n") + 1
            line, buf = (buf[:cut], buf[cut:]) if cut else (buf, b"")
            if self.passing:
                self.out.write(line)
            elif line.startswith(IMPORTER_NOISE):
                if cut:
                    self.hidden.append(line)
                else:
                    self.held = line
            elif not cut and any(p.startswith(line) for p in IMPORTER_NOISE):
                self.held = line
            else:
                self.out.write(line)
            self.passing = not cut and not self.held
        self.out.flush()

    def close(self) -> None:
        """The stream ended: a line held back is shown unless it is noise."""
        if self.held.startswith(IMPORTER_NOISE):
            self.hidden.append(self.held)
        elif self.held:
            self.out.write(self.held)
        self.held = b""
        self.out.flush()
