"""The size check (tests/sizes.py) can fail: made-up modules at and just over the limits, which
tests/test_layers.py::test_sizes holds nvbridge/, tests/ and scripts/ to."""

from __future__ import annotations

from pathlib import Path

from tests.sizes import over_limits


def _function(name: str, lines: int, indent: str = "") -> list[str]:
    """A function of exactly ``lines`` lines, its ``def`` the first."""
    return [f"{indent}def {name}() -> None:", *[f"{indent}    x = {i}" for i in range(lines - 1)]]


def test_modules_over_400_lines_and_functions_over_80_are_found_nested_ones_too(tmp_path: Path) -> None:
    at_limit = tmp_path / "at_limit.py"
    at_limit.write_text("\n".join([*_function("fits", 80), *["# a comment counts"] * 320]) + "\n")
    assert at_limit.read_text().count("\n") == 400
    over = tmp_path / "over.py"
    body = [
        "class Outer:",
        *_function("method", 81, "    "),
        "def outer() -> None:",
        *_function("inner", 82, "    "),
        '"""',
        *[""] * 250,  # blank lines and docstrings count
        '"""',
    ]
    over.write_text("\n".join(body) + "\n")
    assert over_limits([at_limit, over], tmp_path, 400, 80) == {
        "over.py": 417,
        "over.py:Outer.method": 81,
        "over.py:outer": 83,
        "over.py:outer.inner": 82,
    }
