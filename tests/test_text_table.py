"""Text output that fits a terminal (issue 25, item 15): the summary's tables and header, the
FLOPs table whenever ops with FLOPs exist, convert's paragraph, option help as printed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvbridge.analysis.text_table import NAME_HARD, NAME_SOFT, TORCH_COLUMNS, Column, fit
from nvbridge.cli import cli
from tests.conftest import real_db
from tests.raw_gpu import EVERY, path_of

WINDOWS = "nsys-2026.2-windows-cs336.sqlite"


def _run(args: list[str], columns: str | None) -> tuple[int, str, str]:
    env = {"COLUMNS": columns} if columns else {"COLUMNS": ""}
    result = CliRunner().invoke(cli, args, env=env)
    return result.exit_code, result.stdout, result.stderr


def test_fit_wraps_headers_then_narrows_names_then_drops_columns() -> None:
    cols = [Column("Name", left=True, narrows=True), Column("Self CPU %", drop=1), Column("CUDA time avg")]
    rows = [["x" * 50, "1.00%", "2.000us"]]
    natural = fit(cols, rows)
    assert natural.lines[1] == "Name" + " " * 46 + "  Self CPU %  CUDA time avg" and not natural.dropped
    # headers on two lines: "Self CPU %" needs 5 columns ("CPU %"), "CUDA time avg" 8 ("time avg")
    wrapped = fit(cols, rows, 50 + 2 + 5 + 2 + 8)
    assert wrapped.lines[1:3] == [" " * 50 + "  " + " Self" + "  " + "    CUDA", "Name".ljust(50) + "  CPU %  time avg"]
    assert max(map(len, wrapped.lines)) == 67 and not wrapped.dropped
    narrowed = fit(cols, rows, NAME_SOFT + 2 + 5 + 2 + 8)
    assert narrowed.lines[4].startswith("x" * (NAME_SOFT - 3) + "...") and not narrowed.dropped
    dropped = fit(cols, rows, NAME_SOFT + 2 + 8)
    assert dropped.dropped == ["Self CPU %"] and max(map(len, dropped.lines)) <= NAME_SOFT + 10
    assert "Self CPU % left out to fit" in (dropped.note(NAME_SOFT + 10) or "")
    hard = fit(cols, rows, NAME_HARD + 2 + 8)
    assert hard.dropped == ["Self CPU %"] and max(map(len, hard.lines)) == NAME_HARD + 10
    # never narrower than that: a table that cannot fit is printed as narrow as it goes
    assert max(map(len, fit(cols, rows, 5).lines)) == NAME_HARD + 10


@pytest.mark.parametrize("name", EVERY)
def test_summary_fits_a_100_column_terminal(name: str) -> None:
    """The summary was 156 columns wide on a 100-column terminal, its GPU line 171; now every line
    fits, the cells shown are the unfitted table's, and left-out columns are named."""
    path = str(path_of(name))
    code, wide, _ = _run(["summary", path, "--limit", "-1"], None)
    assert code == 0
    code, out, _ = _run(["summary", path, "--limit", "-1"], "100")
    assert code == 0
    assert max(map(len, out.splitlines()), default=0) <= 100, out
    # the same words: headers wrapped, columns left out and names cut, nothing changed
    # the torch table's, then the FLOPs table's (wrapped at 100 columns, so spaces may be newlines)
    notes = r"\(([^()]*)\sleft\s+out\s+to\s+fit\s+100\s+columns;[^()]*\)"
    words = set(re.sub(notes, "", out).split())
    assert {w for w in words - set(wide.split()) if "..." not in w and set(w) != {"-"}} == set()  # cuts aside
    if note := re.search(notes, out):
        gone = " ".join(note.group(1).split())
        # the least useful go first: the left-out columns are the first of the drop order
        order = [title for title, drop in sorted((c for c in TORCH_COLUMNS if c[1]), key=lambda c: c[1])]
        assert set(gone.split(", ")) == set(order[: len(gone.split(", "))])
        header = next(line for line in wide.splitlines() if line.startswith("Name "))
        assert all(title in header for title in gone.split(", "))


@pytest.mark.parametrize("name", EVERY)
def test_flops_table_appears_whenever_an_op_has_flops(name: str) -> None:
    """It appeared only when a row with FLOPs was inside --limit: with the top row costless, a
    report with FLOPs printed none."""
    path = str(path_of(name))
    code, out, _ = _run(["summary", path, "--json", "--limit", "-1"], None)
    assert code == 0
    costed = [r["name"] for r in json.loads(out)["rows"] if r["unknown_calls"] < r["calls"]]
    code, text, _ = _run(["summary", path, "--limit", "1"], None)
    assert code == 0
    assert ("Unknown calls" in text) == bool(costed)
    if costed:
        table = text.split("Unknown calls", 1)[1].splitlines()[2]
        assert table.split("  ")[0].strip() == costed[0]  # the first costed row, in the table's order


def test_option_help_prints_percent_signs_once() -> None:
    code, out, _ = _run(["summary", "--help"], "200")
    assert code == 0 and "%%" not in out and "for % of peak" in " ".join(out.split())


def test_convert_paragraph_wraps_to_the_terminal(tmp_path: Path) -> None:
    src = str(real_db(WINDOWS))
    code, one, _ = _run(["convert", src, "-o", str(tmp_path / "a")], None)
    assert code == 0 and len(one.splitlines()) == 1 and len(one) > 300  # a pipe gets the one line
    code, out, _ = _run(["convert", src, "-o", str(tmp_path / "b")], "100")
    assert code == 0 and max(map(len, out.splitlines())) <= 100 and len(out.splitlines()) > 3
    assert " ".join(out.split()).replace(str(tmp_path / "b"), "") == " ".join(one.split()).replace(
        str(tmp_path / "a"), ""
    ).replace(re.search(r"in \d+\.\d\d s", one).group(0), re.search(r"in \d+\.\d\d s", out).group(0))  # type: ignore[union-attr]
