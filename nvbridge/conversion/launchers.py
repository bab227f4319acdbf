"""Distributed launchers (torchrun, srun, mpirun): where nsys goes so each rank gets its own report.

``nvbridge profile -- torchrun --nproc-per-node 4 train.py`` records one report per rank: nsys
wraps each rank's process, not the launcher, and its report is named after the variable the
launcher sets in each rank's environment (nvbridge.conversion.record.rank_shim):

- torchrun / ``python -m torch.distributed.run`` (and ``.launch``): ``--no-python`` is added and
  the rank's program becomes ``nsys profile ... -o rank$RANK PYTHON -u train.py ...``, what
  torchrun itself would have run (``-m`` kept as ``PYTHON -u -m module``; a command already given
  with ``--no-python`` is wrapped as is). Where torchrun's options end is decided by torchrun's
  own argument parser, run by the launcher's Python (else, without torch there, by its known flags).
- ``srun``: ``srun ... nsys profile ... -o rank$SLURM_PROCID PROGRAM ...``.
- ``mpirun``/``mpiexec``: likewise, named by ``OMPI_COMM_WORLD_RANK`` (Open MPI) or ``PMI_RANK``.
  For srun and mpirun the program is the first argument after the launcher that is a program
  (found on PATH, or a path to an executable file) and is not the value of an option.

Anything else is not a launcher: one nsys session records it whole, every process it starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nvbridge.errors import InputError

TORCH_MODULES = ("torch.distributed.run", "torch.distributed.launch")
# torchrun's options that take no value (torch 1.10-2.13), for when torch does not import here
TORCHRUN_FLAGS = frozenset(
    "-h --help --standalone -m --module --no-python --no_python --run-path --run_path "
    "--virtual-local-rank --virtual_local_rank --use-env --use_env".split()
)
# the short options of srun and mpirun that take a value as the next argument
SRUN_VALUED = frozenset("-A -B -c -C -d -D -e -G -i -J -L -m -M -n -N -o -p -q -r -S -t -T -w -W -x".split())
MPIRUN_VALUED = frozenset("-n -np -c -N -H -host -hostfile -machinefile -x -wdir -genv -env -ppn -f".split())


@dataclass(frozen=True)
class Launch:
    """A launcher command split where each rank's program starts."""

    kind: str  # "torchrun", "srun" or "mpirun"
    launcher: tuple[str, ...]  # the launcher and its options (for torchrun with --no-python)
    program: tuple[str, ...]  # what each rank runs
    rank_variable: str  # set by the launcher in every rank's environment

    def wrapped(self, nsys_profile: Sequence[str]) -> list[str]:
        """The command with ``nsys_profile`` (``nsys profile ... --output X``) around each rank."""
        return [*self.launcher, *nsys_profile, *self.program]


def find_launch(command: Sequence[str]) -> Launch | None:
    """The launcher ``command`` starts with, split; None when it is not one nvbridge knows."""
    if not command:
        return None
    name = Path(command[0]).name
    if name == "torchrun":
        return _torchrun(list(command), 1, _launcher_python(command[0]), "torch.distributed.run")
    module = _python_module(command)
    if module is not None:
        return _torchrun(list(command), module[0], command[0], module[1])
    if name == "srun":
        return _split(list(command), "srun", SRUN_VALUED, "SLURM_PROCID")
    if name in ("mpirun", "mpiexec", "orterun"):
        return _split(list(command), "mpirun", MPIRUN_VALUED, _mpi_rank_variable(command[0]))
    return None


def _python_module(command: Sequence[str]) -> tuple[int, str] | None:
    """``python [-u ...] -m torch.distributed.run ARGS``: (index of ARGS, module)."""
    if not Path(command[0]).name.startswith("python"):
        return None
    for i, arg in enumerate(command[1:], 1):
        if arg == "-m" and i + 1 < len(command) and command[i + 1] in TORCH_MODULES:
            return i + 2, command[i + 1]
        if not arg.startswith("-") or arg in ("-c", "-m"):
            return None
    return None


def _launcher_python(launcher: str) -> str:
    """The Python torchrun runs its ranks with: ``$PYTHON_EXEC`` (torchrun honours it), else
    the interpreter of torchrun's ``#!`` line, else the ``python`` beside torchrun (a pyenv
    shim's), else this one."""
    if os.environ.get("PYTHON_EXEC"):
        return os.environ["PYTHON_EXEC"]
    path = shutil.which(launcher)
    if path is not None:
        with contextlib.suppress(OSError), open(path, "rb") as f:
            first = f.readline(512).decode("utf-8", "replace").strip()
            words = first[2:].split() if first.startswith("#!") else []
            if words and Path(words[0]).name == "env" and len(words) > 1:
                words = words[1:]
            if words and Path(words[0]).name.startswith("python"):
                return words[0]
        for sibling in ("python", "python3"):
            if (Path(path).parent / sibling).is_file():
                return str(Path(path).parent / sibling)
    return sys.executable


def _torchrun(command: list[str], first: int, python: str, module: str) -> Launch:
    args = command[first:]
    parsed = _parse_torchrun(args, module, python)
    if parsed is None:
        raise InputError(
            f"cannot find the training script in `{' '.join(command)}`; give it after torchrun's options, "
            "e.g. torchrun --nproc-per-node 2 train.py."
        )
    script, no_python, as_module, use_env = parsed
    options, program = args[:script], args[script:]
    if not use_env:  # torch.distributed.launch would put --local-rank=K before the script: nsys's place
        raise InputError(
            "torch.distributed.launch without --use-env passes --local-rank to the script itself; "
            "launch with torchrun (or add --use-env), or pass --one-report to record it in one session."
        )
    if no_python:
        return Launch("torchrun", tuple(command[:first] + options), tuple(program), "RANK")
    # torchrun refuses --module beside --no-python, and --run-path would win over it: both are
    # dropped, and the rank runs PYTHON -u [-m] SCRIPT as torchrun itself would have
    kept = [a for a in options if not _is_flag(a, ("--module", "--run-path", "--run_path")) and a != "-m"]
    head = [python, "-u", *(["-m"] if as_module else [])]
    return Launch("torchrun", (*command[:first], *kept, "--no-python"), (*head, *program), "RANK")


def _is_flag(arg: str, names: tuple[str, ...]) -> bool:
    """``arg`` spells one of ``names``, whole or abbreviated (argparse accepts a unique prefix)."""
    return arg.startswith("--") and len(arg) > 3 and any(name.startswith(arg) for name in names)


# Run by the launcher's own Python: torchrun's parser as that torch has it (no torch in nvbridge's
# process: only the training process imports it)
_PARSE = """
import json, sys
try:
    from torch.distributed.run import get_args_parser
except ImportError:
    print("null")
    sys.exit(0)
parser = get_args_parser()
if sys.argv[1] == "launch":
    parser.add_argument("--use-env", "--use_env", default=False, action="store_true")
try:
    ns = parser.parse_args(sys.argv[2:])
except SystemExit:
    sys.exit(3)
print(json.dumps([len(ns.training_script_args), ns.no_python, ns.module, getattr(ns, "use_env", True)]))
"""


def _parse_torchrun(args: list[str], module: str, python: str) -> tuple[int, bool, bool, bool] | None:
    """(index of the training script in ``args``, --no-python, --module, --use-env) by torchrun's
    own parser in ``python``, else (no torch there) by its known flags."""
    launch = module.endswith(".launch")
    try:
        said = subprocess.run(
            [python, "-c", _PARSE, "launch" if launch else "run", *args], capture_output=True, timeout=300, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return _scan_torchrun(args, launch)
    if said.returncode == 3:
        lines = said.stderr.decode("utf-8", "replace").strip().splitlines()
        why = lines[-1].split("error: ", 1)[-1] if lines else " ".join(args)
        raise InputError(f"torchrun refuses these options: {why}.")
    try:
        found = json.loads(said.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        found = None
    if said.returncode != 0 or not isinstance(found, list):
        return _scan_torchrun(args, launch)
    rest, no_python, as_module, use_env = found
    return len(args) - int(rest) - 1, bool(no_python), bool(as_module), bool(use_env)


def _scan_torchrun(args: list[str], launch: bool) -> tuple[int, bool, bool, bool] | None:
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        i += 1 if args[i] in TORCHRUN_FLAGS or "=" in args[i] else 2
    script = i + 1 if i < len(args) and args[i] == "--" else i
    if script >= len(args):
        return None
    options = set(args[:i])
    return (
        script,
        bool({"--no-python", "--no_python"} & options),
        bool({"-m", "--module"} & options),
        not launch or bool({"--use-env", "--use_env"} & options),
    )


def _split(command: list[str], kind: str, valued: frozenset[str], variable: str) -> Launch:
    """srun/mpirun: the program is the first argument that is a program and no option's value."""
    i = 1
    while i < len(command):
        arg = command[i]
        if arg == "--":
            i += 1
            break
        if arg.startswith("-"):
            i += 2 if arg in valued else 1
            continue
        if shutil.which(arg) is not None:
            break
        i += 1
    if i >= len(command):
        raise InputError(
            f"cannot find the program in `{' '.join(command)}` (the first argument found on PATH or an "
            f"executable path); write it as {kind} [OPTIONS] -- PROGRAM ARGS, or pass --one-report."
        )
    return Launch(kind, tuple(command[:i]), tuple(command[i:]), variable)


def _mpi_rank_variable(mpirun: str) -> str:
    """Open MPI sets OMPI_COMM_WORLD_RANK; MPICH, Intel MPI and MVAPICH set PMI_RANK."""
    try:
        said = subprocess.run([mpirun, "--version"], capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "PMI_RANK"
    text = (said.stdout + said.stderr).decode("utf-8", "replace")
    return "OMPI_COMM_WORLD_RANK" if "Open MPI" in text or "OpenRTE" in text else "PMI_RANK"
