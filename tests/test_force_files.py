"""--force replaces a single output file only if nvbridge wrote it, as it replaces only a dataset.

Before nvbridge.output.owned, ``--force`` replaced any existing file with the right suffix: a
user's own notes.json, photo.png or index.html named as an output was lost. Each kind of file
is written here by nvbridge itself (then --force replaces it) and by something else with the same
suffix (then --force refuses, one line, and the file is untouched).
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvbridge.cli import cli
from nvbridge.cli.profile import keep
from nvbridge.errors import ExportError
from nvbridge.output.owned import written_by_nvbridge
from tests.conftest import SAMPLE_DB, real_db

CNN = SAMPLE_DB / "cnn_cpu.sqlite"
ADVISE = SAMPLE_DB / "advise_cpu+synthetic_gpu.sqlite"


def _command(name: str, out: Path) -> list[str]:
    if name.endswith(".html"):
        return ["report", str(ADVISE), "-o", str(out)]
    if name.endswith((".json", ".json.gz")):
        return ["trace", str(CNN), "-o", str(out)]
    if name.startswith("memory"):
        return ["plot", str(SAMPLE_DB / "memory_cpu.sqlite"), "-o", str(out), "--memory"]
    if name.startswith("blocks"):
        return ["plot", str(SAMPLE_DB / "memory_cpu.sqlite"), "-o", str(out), "--memory-blocks"]
    if name.startswith("roofline"):
        return ["plot", str(real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite")), "-o", str(out), "--roofline"]
    return ["plot", str(CNN), "-o", str(out), "--step", "0"]


def _foreign(name: str) -> bytes:
    """A file someone else wrote with that suffix, mentioning nvbridge where a reader would not
    take it for the author."""
    if name.endswith(".html"):
        return b'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>Notes on nvbridge</body></html>'
    if name.endswith(".json.gz"):
        return gzip.compress(b'{"traceEvents": [], "note": "nvbridge"}')
    if name.endswith(".json"):
        return b'{"traceEvents": [], "nvbridge": {}}'
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure()
    fig.suptitle("nvbridge")
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(name).suffix[1:])  # matplotlib's own Software/Creator
    plt.close(fig)
    return buf.getvalue()


NAMES = ["page.html", "t.json", "t.json.gz", "p.png", "p.svg", "p.pdf", "roofline.png", "roofline.pdf"]
NAMES += ["memory.png", "memory.svg", "blocks.pdf"]


@pytest.mark.parametrize("name", NAMES)
def test_force_replaces_only_what_nvbridge_wrote(tmp_path: Path, name: str) -> None:
    out = tmp_path / name
    foreign = _foreign(name)
    out.write_bytes(foreign)
    assert not written_by_nvbridge(out)
    result = CliRunner().invoke(cli, [*_command(name, out), "--force"])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert "was not written by nvbridge; --force replaces only nvbridge's own files" in result.output
    assert out.read_bytes() == foreign
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no staging file left
    out.unlink()
    for force in ([], ["--force"]):  # written, then replaced
        result = CliRunner().invoke(cli, [*_command(name, out), *force])
        assert result.exit_code == 0, result.output
        assert written_by_nvbridge(out)
        assert out.read_bytes() != foreign


def test_a_kept_report_replaces_only_an_nsys_report(tmp_path: Path) -> None:
    """nsys writes the kept report, so nvbridge cannot mark it: --force replaces a file there only
    if it is an Nsight Systems report (its magic), never another file named .nsys-rep."""
    recorded = tmp_path / "new.nsys-rep"
    recorded.write_bytes(b"NVIDIA Tegra Profiler Report 1.\nnew")
    dest = tmp_path / "kept.nsys-rep"
    dest.write_bytes(b"my notes")
    with pytest.raises(ExportError, match="kept.nsys-rep was not written by nvbridge"):
        keep(recorded, dest, force=True)
    assert dest.read_bytes() == b"my notes" and recorded.exists()
    dest.write_bytes(b"NVIDIA Tegra Profiler Report 1.\nold")
    with pytest.raises(ExportError, match="already exists"):
        keep(recorded, dest, force=False)
    assert keep(recorded, dest, force=True) == dest
    assert dest.read_bytes().endswith(b"new") and not recorded.exists()


def test_unreadable_or_truncated_files_are_not_ours(tmp_path: Path) -> None:
    for name, data in (
        ("t.json.gz", b"\x1f\x8b\x08\x00garbage"),  # a broken gzip stream
        ("p.png", b"\x89PNG\r\n\x1a\n\x00\x00"),  # a PNG cut after its signature
        ("page.html", b""),
        ("other.txt", b"anything"),  # a suffix no output has
    ):
        path = tmp_path / name
        path.write_bytes(data)
        assert not written_by_nvbridge(path), name
