"""Where ``nvbridge profile`` puts nsys in a launcher's command (nvbridge.conversion.launchers):
around each rank's program, with the rank's variable for the report's name. The torchrun cases
are checked against torchrun's own parser run on the rewritten command: it must find nsys as the
program, with --no-python, and the rank's program must be what torchrun would have run."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvbridge.conversion import launchers
from nvbridge.conversion.launchers import find_launch
from nvbridge.errors import InputError

NSYS = ["nsys", "profile", "--output", "rank%q{RANK}"]


def torchrun_parse(argv: list[str]) -> tuple[str, list[str], bool, bool]:
    """torchrun's own reading of a command: (script, its args, --no-python, --module)."""
    run = pytest.importorskip("torch.distributed.run")
    ns = run.get_args_parser().parse_args(argv)
    return ns.training_script, list(ns.training_script_args), bool(ns.no_python), bool(ns.module)


@pytest.mark.parametrize(
    ("command", "options", "program"),
    [
        ("torchrun --nproc-per-node 2 train.py --lr 3", "--nproc-per-node 2", "-u train.py --lr 3"),
        (
            "torchrun --standalone --nproc_per_node=2 -m pkg.train --x",
            "--standalone --nproc_per_node=2",
            "-u -m pkg.train --x",
        ),
        ("torchrun --nnodes 1 --run-path /abs/train.py", "--nnodes 1", "-u /abs/train.py"),
        ("torchrun --nproc-per-node 2 --mod pkg.train", "--nproc-per-node 2", "-u -m pkg.train"),  # a prefix
        ("torchrun --nproc-per-node 2 train.py -m --no-python", "--nproc-per-node 2", "-u train.py -m --no-python"),
    ],
)
def test_torchrun_runs_nsys_around_what_it_would_have_run(command: str, options: str, program: str) -> None:
    """torchrun's parser on the rewritten command finds nsys as the program, with --no-python;
    the rank runs PYTHON with what torchrun would have given it; --module and --run-path (which
    torchrun refuses beside, or prefers over, --no-python) are dropped."""
    launch = find_launch(command.split())
    assert launch is not None and launch.kind == "torchrun" and launch.rank_variable == "RANK"
    wrapped = launch.wrapped(NSYS)
    assert wrapped[: wrapped.index("nsys")] == ["torchrun", *options.split(), "--no-python"]
    script, args, no_python, module = torchrun_parse(wrapped[1:])
    assert (script, no_python, module) == ("nsys", True, False)
    assert args[: len(NSYS) - 1] == NSYS[1:]
    python, *rest = args[len(NSYS) - 1 :]
    assert rest == program.split() and Path(python).name.startswith("python")


def test_torchrun_given_no_python_wraps_the_program_as_is() -> None:
    launch = find_launch("torchrun --nproc-per-node 2 --no-python ./run.sh a b".split())
    assert launch is not None
    assert launch.wrapped(NSYS) == ["torchrun", "--nproc-per-node", "2", "--no-python", *NSYS, "./run.sh", "a", "b"]


def test_python_m_torch_distributed_run_keeps_its_interpreter() -> None:
    launch = find_launch("python3 -u -m torch.distributed.run --nproc-per-node 2 train.py".split())
    assert launch is not None
    assert launch.wrapped(NSYS) == [
        *"python3 -u -m torch.distributed.run --nproc-per-node 2 --no-python".split(),
        *NSYS,
        *"python3 -u train.py".split(),
    ]


def test_torchrun_python_is_python_exec_or_its_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHON_EXEC", "/opt/py/bin/python3.12")
    assert launchers._launcher_python("torchrun") == "/opt/py/bin/python3.12"
    monkeypatch.delenv("PYTHON_EXEC")
    script = tmp_path / "torchrun"
    script.write_text("#!/usr/bin/env python3.9\nimport sys\n")
    script.chmod(0o755)
    assert launchers._launcher_python(str(script)) == "python3.9"
    script.write_text("#!/usr/bin/env bash\nexec pyenv exec torchrun\n")  # a pyenv shim
    (tmp_path / "python").write_text("#!/bin/sh\n")
    assert launchers._launcher_python(str(script)) == str(tmp_path / "python")


def test_torchrun_commands_it_cannot_wrap_are_refused_in_one_line() -> None:
    with pytest.raises(InputError, match="--local-rank to the script itself"):
        find_launch("python -m torch.distributed.launch --nproc-per-node 2 train.py".split())
    launch = find_launch("python -m torch.distributed.launch --nproc-per-node 2 --use-env train.py".split())
    assert launch is not None and launch.program[-1] == "train.py"
    with pytest.raises(InputError, match="unrecognized arguments: --bogus"):
        find_launch("torchrun --bogus 3 train.py".split())


def test_torchrun_without_torch_in_its_python_reads_its_known_flags(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """torchrun's parser runs in the launcher's Python; one without torch (here a stand-in that
    says so, as the parser script does) leaves the known flags to read the options."""
    python = tmp_path / "python3"
    python.write_text("#!/bin/sh\necho null\n")
    python.chmod(0o755)
    monkeypatch.setenv("PYTHON_EXEC", str(python))
    launch = find_launch("torchrun --standalone --nproc-per-node 2 -m pkg.train --x 1".split())
    assert launch is not None
    assert launch.launcher == ("torchrun", "--standalone", "--nproc-per-node", "2", "--no-python")
    assert launch.program == (str(python), "-u", "-m", "pkg.train", "--x", "1")
    with pytest.raises(InputError, match="cannot find the training script"):
        find_launch("torchrun --nproc-per-node 2".split())


def test_srun_and_mpirun_put_nsys_before_the_first_program(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    launch = find_launch("srun -n 4 --ntasks-per-node 2 --gpus-per-task=1 python train.py --a".split())
    assert launch is not None and launch.rank_variable == "SLURM_PROCID"
    assert (
        launch.wrapped(["NSYS"]) == "srun -n 4 --ntasks-per-node 2 --gpus-per-task=1 NSYS python train.py --a".split()
    )
    launch = find_launch("srun -N2 -- python train.py".split())
    assert launch is not None and launch.wrapped(["NSYS"]) == "srun -N2 -- NSYS python train.py".split()
    with pytest.raises(InputError, match="cannot find the program"):
        find_launch("srun -n 2 no-such-program-here".split())
    # mpirun: the rank's variable is Open MPI's where `mpirun --version` says Open MPI
    for says, variable in (("mpirun (Open MPI) 4.1.5", "OMPI_COMM_WORLD_RANK"), ("HYDRA build details:", "PMI_RANK")):
        fake = tmp_path / "mpirun"
        fake.write_text(f"#!/bin/sh\necho '{says}'\n")
        fake.chmod(0o755)
        launch = find_launch([str(fake), "-np", "4", "-x", "NCCL_DEBUG=INFO", "python", "train.py"])
        assert launch is not None and launch.rank_variable == variable
        assert launch.program == ("python", "train.py")


def test_other_commands_are_no_launcher() -> None:
    for command in ("python train.py", "python -m pkg.train", "python -c pass", "./train.sh"):
        assert find_launch(command.split()) is None
