"""``nvbridge profile``: record a command under Nsight Systems, then convert what it recorded.

The recording uses the trace flags a PyTorch user wants (CUDA runtime and kernels, NVTX, cuBLAS,
cuDNN, OS runtime above 0.1 ms; no CPU sampling, which costs and is not used). Whatever options
the user passes to nsys come after ours, so they win.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from nvbridge.errors import InputError

NSYS_OPTIONS = (
    "--trace=cuda,nvtx,osrt,cublas,cudnn",
    "--sample=none",
    "--cpuctxsw=none",
    "--osrt-threshold=100000",
    "--force-overwrite=true",
)
INSTALL_HINT = "install Nsight Systems (on Debian: scripts/install_nsys.sh, or NVIDIA's installer) so `nsys` is on PATH"


def nsys_path() -> str:
    """The nsys CLI, or a one-line error naming the install step."""
    found = shutil.which("nsys")
    if found is None:
        raise InputError(f"nsys (Nsight Systems' command line) is not on PATH; {INSTALL_HINT}.")
    return found


def record(command: Sequence[str], report: Path, nsys_options: Sequence[str] = ()) -> Path:
    """Run ``command`` under ``nsys profile``, writing ``report``.nsys-rep; returns its path, or
    the raw ``.qdstrm`` where nsys could not import it (2022.4 from Debian often cannot find its
    importer; :func:`nvbridge.readers.exported` imports it).

    Raises:
        InputError: nsys is missing, the command could not be started, or nothing was recorded.
    """
    if not command:
        raise InputError("give the command to profile after --, e.g. nvbridge profile -- python train.py")
    nsys = nsys_path()
    rep = report.with_suffix(".nsys-rep")
    argv = [nsys, "profile", *NSYS_OPTIONS, *nsys_options, "--output", str(report), *command]
    # The program's own output goes to the terminal, as it would without the profiler.
    done = subprocess.run(argv, check=False)
    for made in (rep, report.with_suffix(".qdstrm")):
        if made.exists():
            return made
    raise InputError(
        f"nsys profile recorded nothing (exit status {done.returncode}); run `{' '.join(argv)}` to see why."
    )
