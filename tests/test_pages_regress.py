"""Page-level mutants the fuzzers found (tests/regress/pages/*.json, kept by scripts/hostile/fuzz_pages.py
and scripts/hostile/fuzz_pages_raw.py) replayed: each is a recipe (source file, its sha256, byte edits),
rebuilt from sample_db/ or ../shared/real_db (skipped where that file is absent or differs; the
real exports' bytes are never kept). Reading a mutant must end in a one-line refusal or in the
undamaged file's rows; rows that differ are wrong only where SQLite accepts the mutant (then
the damage is a plausible edit SQLite reads too)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvbridge.errors import NvbridgeError
from nvbridge.readers import read_profile
from scripts.hostile.fuzz_pages import sqlite_verdict
from scripts.hostile.page_mutants import Mutant, sha256
from tests.conftest import REAL_DB, ROOT, SAMPLE_DB, require_native

RECIPES = sorted((ROOT / "tests" / "regress" / "pages").glob("*.json"))


def _same(a: object, b: object) -> bool:
    return all(getattr(a, n).equals(getattr(b, n)) for n in ("ranges", "api_calls", "gpu_ops"))


@pytest.mark.parametrize("page_reader", ["1", "0"])
@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_a_kept_mutant_is_refused_or_read_as_the_undamaged_file(
    recipe: Path, page_reader: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the page reader on and off (NVBRIDGE_PAGE_READER): off, SQLite reads alone, and only
    the one-line errors are held to (its reads of a damaged page are its own)."""
    require_native()
    monkeypatch.setenv("NVBRIDGE_PAGE_READER", page_reader)
    mutant = Mutant.from_recipe(json.loads(recipe.read_text()))
    source = next((d / mutant.source for d in (SAMPLE_DB, REAL_DB) if (d / mutant.source).is_file()), None)
    if source is None or sha256(source) != mutant.sha256:
        pytest.skip(f"{mutant.source} (sha256 {mutant.sha256[:12]}) is not here")
    path = tmp_path / ("mutant" + source.suffix)
    path.write_bytes(mutant.apply(source.read_bytes()))
    try:
        got = read_profile(path)
    except NvbridgeError as exc:
        assert "\n" not in str(exc)
        return
    if page_reader == "1" and sqlite_verdict(path) == "refuses":
        assert _same(got, read_profile(source)), mutant.what
