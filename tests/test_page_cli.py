"""nvbridge report's errors: one line naming the problem and the fix, a non-zero exit, no page
(not even a partial one) and the input untouched."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvbridge.cli import cli
from tests.conftest import SAMPLE_DB

ADVISE = SAMPLE_DB / "advise_cpu+synthetic_gpu.sqlite"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "args, code, says",
    [
        (["--step", "999"], 2, "no steps 999..999 in the report (it has steps 0..3)"),
        (["--advise-ops", "-5"], 2, "give a count, or -1 for always"),
        (["--compare", "missing.sqlite"], 1, "missing.sqlite: no such file; check the path."),
    ],
)
def test_bad_options_write_nothing(tmp_path: Path, args: list[str], code: int, says: str) -> None:
    before = _digest(ADVISE)
    out = tmp_path / "page.html"
    result = CliRunner().invoke(cli, ["report", str(ADVISE), "-o", str(out), *args])
    assert result.exit_code == code and says in result.output, result.output
    assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []
    assert _digest(ADVISE) == before


def test_page_name_folder_and_existing_page(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["report", str(ADVISE), "-o", str(tmp_path / "page.txt")])
    assert result.exit_code == 1 and "does not end in .html; name the page like page.html" in result.output
    result = runner.invoke(cli, ["report", str(ADVISE), "-o", str(tmp_path / "nowhere" / "page.html")])
    assert result.exit_code == 1 and "does not exist; create the folder first" in result.output
    assert list(tmp_path.iterdir()) == []
    page = tmp_path / "page.html"
    page.write_text("mine", "utf-8")
    result = runner.invoke(cli, ["report", str(ADVISE), "-o", str(page)])
    assert result.exit_code == 1 and "already exists; choose another file or pass --force" in result.output
    assert page.read_text("utf-8") == "mine"
    result = runner.invoke(cli, ["report", str(ADVISE), "-o", str(page), "--force"])
    assert result.exit_code == 1 and "was not written by nvbridge; --force replaces only" in result.output
    assert page.read_text("utf-8") == "mine"  # --force replaces only a page nvbridge wrote
    page.unlink()
    for force in ([], ["--force"]):  # written, then replaced
        result = runner.invoke(cli, ["report", str(ADVISE), "-o", str(page), *force])
        assert result.exit_code == 0, result.output
        assert page.read_text("utf-8").startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html"]  # no staging file left


def test_missing_input_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", str(tmp_path / "none.sqlite"), "-o", str(tmp_path / "p.html")])
    assert result.exit_code == 1 and "none.sqlite: no such file; check the path." in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_rich_display_without_and_with_the_page_renderers() -> None:
    """In a fresh interpreter: before nvbridge.page is imported, _repr_html_ is None (the
    notebook shows the repr) and the analysis loads no page module; in IPython,
    nvbridge.load registers the renderers and a Report displays as its page."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        f"""
        import sys
        import nvbridge
        from nvbridge.analysis.report import load
        report = load({str(ADVISE)!r})
        print(report._repr_html_() is None, any(m.startswith("nvbridge.page") for m in sys.modules))
        sys.modules["IPython"] = type(sys)("IPython")  # as in a notebook's kernel
        nvbridge.load
        html = report._repr_html_()
        print(html.startswith('<div class="nvbridge-page">'), 'id="nvbridge-data"' in html)
        """
    )
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "True", "True"]
