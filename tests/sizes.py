"""Module and function sizes (issue 26): every line of a module counts, blank lines, comments and
docstrings included; a function runs from its ``def`` to its last line, and a function nested in
another or in a class is measured on its own too. tests/test_layers.py holds the limits to them."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path


def over_limits(paths: Iterable[Path], root: Path, max_module: int, max_function: int) -> dict[str, int]:
    """Modules of ``paths`` over ``max_module`` lines (``path``: lines) and functions over
    ``max_function`` (``path:qualified.name``: lines), named relative to ``root``."""
    out: dict[str, int] = {}
    for path in paths:
        name = str(path.relative_to(root))
        text = path.read_text()
        if text.count("\n") > max_module:
            out[name] = text.count("\n")
        for node, qualname in functions(ast.parse(text), ""):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            if size > max_function:
                out[f"{name}:{qualname}"] = size
    return out


def functions(node: ast.AST, prefix: str) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    """Every function under ``node``, with its dotted name (classes and enclosing functions first)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            qualname = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                yield child, qualname
            yield from functions(child, qualname + ".")
        else:
            yield from functions(child, prefix)
