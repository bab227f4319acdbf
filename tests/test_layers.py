"""The import graph (issue #18): no cycle among nvbridge's modules, and the floors hold.

Only imports that run when a module loads count: those inside functions (lazy, e.g. matplotlib
or Report.key_averages reaching analysis on demand) and under ``if TYPE_CHECKING:`` do not.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nvbridge"


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _load_time_imports(path: Path, modules: set[str]) -> set[str]:
    """nvbridge modules ``path`` imports at load time (a package import also loads its __init__)."""
    out: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else []:
            names: list[str] = []
            if isinstance(sub, ast.ImportFrom) and sub.module and sub.level == 0:
                # `from nvbridge import errors` is the module nvbridge.errors; `from nvbridge.x import y`, nvbridge.x
                names = [
                    f"{sub.module}.{a.name}" if f"{sub.module}.{a.name}" in modules else sub.module for a in sub.names
                ]
            elif isinstance(sub, ast.Import):
                names = [a.name for a in sub.names]
            for name in names:
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name.startswith("nvbridge"):
                    out.add(name)
    return out - {_module(path)}


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in PACKAGE.rglob("*.py")}
    return {m: _load_time_imports(p, set(files)) for m, p in files.items()}


def test_no_import_cycle() -> None:
    graph = _graph()
    # A package's __init__ importing its own submodules is how packages re-export: not a cycle.
    edges = {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in graph.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(edges.get(m, ())):
            if state.get(d) == 1:
                cycles.append(path[path.index(d) :] + [d] if d in path else [m, d])
            elif d not in state:
                visit(d, [*path, d])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_floors() -> None:
    graph = _graph()
    assert graph["nvbridge.columns"] == set()
    upper = ("nvbridge.analysis", "nvbridge.cli", "nvbridge.plot.picture")
    for low in ("nvbridge.dataset.report", "nvbridge.dataset.check", "nvbridge.dataset.events", "nvbridge.columns"):
        assert not [d for d in graph[low] if d.startswith(upper)], low
    for m, deps in graph.items():
        if m.startswith(("nvbridge.analysis", "nvbridge.plot.picture")):
            assert not [d for d in deps if d.startswith("nvbridge.cli")], m
