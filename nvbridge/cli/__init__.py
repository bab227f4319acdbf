"""The ``nvbridge`` command: parse arguments, call one library function, translate errors.

Each command lives in its own module here (``convert``, ``summary``, ``trace``, ``plot``) and
is registered on the group below; ``_common`` holds what they share.
"""

from __future__ import annotations

import os
import sys

import click

from nvbridge._version import __version__
from nvbridge.cli.advise import advise_cmd
from nvbridge.cli.convert import convert_cmd
from nvbridge.cli.diff import diff_cmd
from nvbridge.cli.plot import plot_cmd
from nvbridge.cli.profile import profile_cmd
from nvbridge.cli.report import report_cmd
from nvbridge.cli.summary import summary_cmd
from nvbridge.cli.trace import trace_cmd
from nvbridge.output.interrupts import exit_on_interrupt
from nvbridge.output.process import set_up_process


@click.group()
@click.version_option(__version__, prog_name="nvbridge")
def cli() -> None:
    """PyTorch-level answers from Nsight Systems and nvprof profiles."""


for _command in (convert_cmd, summary_cmd, trace_cmd, plot_cmd, advise_cmd, diff_cmd, profile_cmd, report_cmd):
    cli.add_command(_command)


def main() -> None:
    """Console-script entry point.

    After the command finishes, the process exits without tearing down the interpreter: freeing
    millions of table rows one buffer at a time took 0.3-0.4 s after a large conversion, and
    every file is already closed and every output flushed by then.
    """
    set_up_process()  # done already when started by nvbridge.__main__
    exit_on_interrupt()
    try:
        cli(prog_name="nvbridge", standalone_mode=False)
        code = 0
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
