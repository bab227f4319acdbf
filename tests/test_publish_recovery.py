"""``--force`` can never lose the dataset, and nothing a killed run leaves stays (issue 24, item 4).

Publishing renames the old dataset aside, the new one in, then removes the old. A SIGKILL
between the two renames (reproduced by holding the process after the first) left nothing at
the output's name, and the next run into that folder, even one failing on a bad input, deleted
both copies. ``--force`` over a symlinked output or ``report=`` partition renamed the link aside
and could never remove it; ``plot -o`` killed while saving left ``.p.png.<hex>.png`` that no
later run removed. Each case here is reproduced in a subprocess, killed, and run again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from tests.conftest import ROOT, SAMPLE_DB

SAMPLE = SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite"
OTHER = SAMPLE_DB / "threads_cpu.sqlite"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

# Runs the command line with one call held once it happened: ``HOLD`` names the method
# (Path.rename, or a figure's savefig), ``WHEN`` a text its first argument must hold. Says "held"
# on stdout and sleeps, for the test to kill it there.
_HELD = """
import os, pathlib, sys, time
hold, when = os.environ["HOLD"], os.environ["WHEN"]
def held(original):
    def call(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        if when in str(args[0] if args else ""):
            print("held", flush=True)
            time.sleep(120)
        return result
    return call
if hold == "rename":
    pathlib.Path.rename = held(pathlib.Path.rename)
else:
    import matplotlib.figure
    def saving(original):
        def call(self, fname, *args, **kwargs):
            fname.write(b"half a picture")
            fname.flush()
            print("held", flush=True)
            time.sleep(120)
        return call
    matplotlib.figure.Figure.savefig = saving(matplotlib.figure.Figure.savefig)
from nvbridge.cli import main
sys.argv[0] = "nvbridge"
main()
"""


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvbridge", *map(str, args)], capture_output=True, text=True, timeout=120, env=ENV
    )


def _killed_when(hold: str, when: str, *args: str | Path) -> None:
    """Run ``nvbridge ARGS`` held at ``hold`` once ``when`` happened, and SIGKILL it there."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HELD, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**ENV, "HOLD": hold, "WHEN": when},
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 90
    line = proc.stdout.readline()
    assert line == "held\n" and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)


def _tables(ds: Path) -> dict[str, object]:
    return {p.name: pq.read_table(p) for p in sorted(ds.glob("*.parquet")) if p.name != "meta.parquet"}


def test_a_run_killed_between_the_renames_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    assert _cli("convert", SAMPLE, "-o", out, "-q").returncode == 0
    before = _tables(out)
    _killed_when("rename", ".nvbridge-old.", "convert", OTHER, "-o", out, "--force", "-q")
    assert not out.exists()  # the old dataset aside, the new one still staged
    assert sorted(p.name.split(".nvbridge-")[1].split(".")[0] for p in tmp_path.iterdir()) == ["old", "staging"]
    # The next run into the folder, even one failing on a bad input, puts the old one back first.
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database" * 10)
    proc = _cli("convert", junk, "-o", out, "--force")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "junk.sqlite"]
    after = _tables(out)
    assert after.keys() == before.keys() and all(after[k].equals(before[k]) for k in before)  # type: ignore[attr-defined]


def test_a_killed_run_is_recovered_before_its_output_is_judged(tmp_path: Path) -> None:
    """Without --force, the recovered dataset is there: the run says so instead of writing."""
    out = tmp_path / "ds"
    assert _cli("convert", SAMPLE, "-o", out, "-q").returncode == 0
    _killed_when("rename", ".nvbridge-old.", "convert", OTHER, "-o", out, "--force", "-q")
    proc = _cli("convert", OTHER, "-o", out)
    assert proc.returncode == 1 and "already exists" in proc.stderr
    assert pq.read_table(out / "ops.parquet").num_rows == pq.read_table(tmp_path / "ds" / "ops.parquet").num_rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_force_over_a_symlinked_output_writes_through_it(tmp_path: Path) -> None:
    real, link = tmp_path / "real", tmp_path / "link"
    assert _cli("convert", SAMPLE, "-o", real, "-q").returncode == 0
    link.symlink_to(real)
    assert _cli("convert", OTHER, "-o", link, "--force", "-q").returncode == 0
    assert link.is_symlink() and link.resolve() == real
    assert (
        pq.read_table(real / "meta.parquet").to_pydict()["value"][
            pq.read_table(real / "meta.parquet").to_pydict()["key"].index("source")
        ]
        == OTHER.name
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def test_force_over_a_symlinked_partition_leaves_no_link_aside(tmp_path: Path) -> None:
    out, elsewhere = tmp_path / "many", tmp_path / "elsewhere"
    assert _cli("convert", SAMPLE, OTHER, "-o", out, "-q").returncode == 0
    elsewhere.mkdir()
    (out / f"report={SAMPLE.stem}").rename(elsewhere / "part")
    (out / f"report={SAMPLE.stem}").symlink_to(elsewhere / "part")
    assert _cli("convert", SAMPLE, OTHER, "-o", out, "--force", "-q").returncode == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([f"report={OTHER.stem}", f"report={SAMPLE.stem}"])
    assert sorted(p.name for p in elsewhere.iterdir()) == ["part"]
    assert (elsewhere / "part" / "meta.parquet").is_file()


def test_a_plot_killed_while_saving_is_cleaned_up_by_the_next(tmp_path: Path) -> None:
    picture = tmp_path / "p.png"
    _killed_when("savefig", "", "plot", SAMPLE, "-o", picture)
    [left] = list(tmp_path.iterdir())
    assert left.name.startswith(".p.png.nvbridge-staging.") and left.name.endswith(".png")
    assert _cli("plot", SAMPLE, "-o", tmp_path / "q.png").returncode == 0  # another picture, same folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.png"]


def test_a_trace_is_put_in_place_only_with_its_dataset(tmp_path: Path) -> None:
    """``convert --chrome``: a dataset that fails to publish takes its trace with it."""
    code = (  # the dataset's rename into place fails as on a full disk
        "import sys, errno, pathlib\n"
        "rename = pathlib.Path.rename\n"
        "def full(self, target):\n"
        "    if str(target).endswith('/ds'): raise OSError(errno.ENOSPC, 'No space left on device')\n"
        "    return rename(self, target)\n"
        "pathlib.Path.rename = full\n"
        "from nvbridge.cli import main; sys.argv[0] = 'nvbridge'; main()\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "convert",
            str(SAMPLE),
            "-o",
            str(tmp_path / "ds"),
            "--chrome",
            str(tmp_path / "t.json.gz"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "the disk is full" in proc.stderr
    assert list(tmp_path.iterdir()) == []
