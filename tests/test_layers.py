"""The import graph (issues #18, #26): no cycle, lower layers never import higher ones, sizes.

Every import counts, wherever it is written: at module level, inside a function (a lazy import is
still a dependency, and a cycle hidden in a function only moves the failure to the first call, or
races between threads), and ``importlib.import_module`` with a literal name. Importing
``nvbridge.a.b`` also runs ``nvbridge/a/__init__.py`` and all it imports, so that package counts
too (unless the importer is inside it). Only imports under ``if TYPE_CHECKING:`` are left out:
they never run.

A function-level import of an nvbridge module is lazy loading of an optional heavy dependency
(``HEAVY``): the module, or what it loads, imports one. Elsewhere it belongs at the top of the
module, where the graph shows it. The entry points (``ENTRY``) are the exception: they defer
everything so that ``import nvbridge`` loads neither pyarrow nor numpy, and ``nvbridge`` takes
Ctrl-C before the first import.

The layers are the ones drawn in docs/architecture.md: a module imports its own layer and the
layers below it, never one above.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.sizes import over_limits

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "nvbridge"

# Optional dependencies that are heavy to load: a function-level import of them is lazy loading.
HEAVY = ("torch", "matplotlib", "sqlalchemy", "dask", "pandas")
ENTRY = ("nvbridge", "nvbridge.__main__")

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
SIZED = ("nvbridge", "tests", "scripts")  # with the top-level modules (setup.py)

# docs/architecture.md's layers, lowest first. A module belongs to the layer of the longest
# prefix it starts with.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("nvbridge._version", "nvbridge._native", "nvbridge.errors", "nvbridge.columns", "nvbridge.compiled"),
    ("nvbridge.workers", "nvbridge.gpu", "nvbridge.output", "nvbridge.annotate"),
    ("nvbridge.readers",),
    ("nvbridge.engine",),
    ("nvbridge.dataset",),
    ("nvbridge.export",),
    ("nvbridge.conversion",),
    ("nvbridge.analysis",),
    ("nvbridge.plot",),
    ("nvbridge.page",),
    ("nvbridge.cli",),
    ("nvbridge.__main__", "nvbridge"),
)
FLOOR = LAYERS[0]


@dataclass(frozen=True)
class Import:
    """One import by ``module`` of ``target`` (an nvbridge module, or a heavy dependency's name).

    ``named`` is the module the statement names; ``target`` is it, or a package whose
    ``__init__`` runs first."""

    module: str
    target: str
    named: str
    line: int
    lazy: bool  # inside a function
    typing_only: bool  # under `if TYPE_CHECKING:`


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = {_module(p): p for p in sorted(PACKAGE.rglob("*.py"))}
COMPILED = {_module(p) for p in PACKAGE.rglob("*.pyi")} - set(FILES)  # extension modules: their stubs


def _resolve(name: str) -> str:
    """The module ``name`` loads (``nvbridge.x.y`` where ``y`` is a name in nvbridge.x: nvbridge.x)."""
    while name and name not in FILES and name not in COMPILED:
        name = name.rpartition(".")[0]
    return name


def _named(node: ast.AST, module: str) -> list[str]:
    """Modules named by one import statement or ``importlib.import_module("...")`` call."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            package = module if FILES[module].name == "__init__.py" else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}".rstrip(".")
        # `from nvbridge import errors` names the module nvbridge.errors; `from nvbridge.x import y`, nvbridge.x
        return [f"{base}.{a.name}" if _resolve(f"{base}.{a.name}") == f"{base}.{a.name}" else base for a in node.names]
    if (
        isinstance(node, ast.Call)
        and ast.unparse(node.func) in ("importlib.import_module", "import_module", "__import__")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return [node.args[0].value]
    return []


def _walk(nodes: list[ast.stmt] | ast.AST, lazy: bool, typing_only: bool) -> Iterator[tuple[ast.AST, bool, bool]]:
    """Every node under ``nodes``, with whether it sits in a function and under TYPE_CHECKING."""
    children = nodes if isinstance(nodes, list) else list(ast.iter_child_nodes(nodes))
    for child in children:
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            yield from _walk(child.body, lazy, True)
            yield from _walk(child.orelse, lazy, typing_only)  # the else branch runs
            continue
        yield child, lazy, typing_only
        yield from _walk(child, lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)), typing_only)


def _packages(target: str, module: str) -> list[str]:
    """The packages whose ``__init__`` runs before ``target`` loads, ``module``'s own aside (an
    importer inside nvbridge.dataset is run by that __init__). The top package is left out: its
    __init__ loads the errors and the version, everything else when first used."""
    parts = target.split(".")
    ancestors = [".".join(parts[:n]) for n in range(2, len(parts))]
    return [a for a in ancestors if a in FILES and not (module == a or module.startswith(a + "."))]


def _lazy_module_name(value: object) -> bool:
    return isinstance(value, str) and value.startswith("nvbridge.") and value in FILES


def _imports(module: str) -> list[Import]:
    out: list[Import] = []
    text = FILES[module].read_text()
    for node, lazy, typing_only in _walk(ast.parse(text).body, False, False):
        names = _named(node, module)
        if "import_module(" in text and isinstance(node, ast.Constant) and _lazy_module_name(node.value):
            names, lazy = [str(node.value)], True  # a module name a table hands to import_module (PEP 562)
        for name in names:
            top = name.partition(".")[0]
            if top == "nvbridge":
                named = _resolve(name)
                targets = [named, *_packages(named, module)]
            elif top in HEAVY:
                named, targets = top, [top]
            else:
                continue
            line = getattr(node, "lineno", 0)
            out += [Import(module, t, named, line, lazy, typing_only) for t in targets if t != module]
    return out


IMPORTS = {m: _imports(m) for m in FILES}


def _runs(i: Import) -> bool:
    """An import between nvbridge modules that runs (at load or at a call)."""
    return i.target.startswith("nvbridge") and not i.typing_only


def _graph() -> dict[str, set[str]]:
    return {m: {i.target for i in imps if _runs(i)} for m, imps in IMPORTS.items()}


def _loads(module: str) -> set[str]:
    """What loading ``module`` loads: nvbridge modules and heavy dependencies."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for i in IMPORTS.get(todo.pop(), []):
            if not i.lazy and not i.typing_only and i.target not in seen:
                seen.add(i.target)
                todo.append(i.target)
    return seen


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return components


def _shortest_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth first)."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    following.append(w)
        frontier = following
    raise AssertionError(f"{component} is not strongly connected")


def _shown(cycle: list[str]) -> str:
    steps = []
    for a, b in zip(cycle, cycle[1:]):
        i = next(i for i in IMPORTS[a] if i.target == b and _runs(i))
        how = f"{i.named}" + (f", which loads {b}" if i.named != b else "") + (" (in a function)" if i.lazy else "")
        steps.append(f"{a}:{i.line} imports {how}")
    return "\n  ".join(steps)


def _layer(module: str) -> int:
    best = max((p for layer in LAYERS for p in layer if module == p or module.startswith(p + ".")), key=len)
    return next(n for n, layer in enumerate(LAYERS) if best in layer)


def test_no_import_cycle() -> None:
    graph = _graph()
    cycles = [_shown(_shortest_cycle(graph, c)) for c in _components(graph)]
    assert cycles == [], "import cycles, counting imports in functions:\n" + "\n".join(cycles)


def test_cycle_finder_finds_a_cycle_through_a_package_init() -> None:
    """The checks above can fail: a made-up graph with a cycle hidden behind an __init__."""
    graph = {"a": {"b.c"}, "b.c": {"d"}, "d": {"a"}, "e": {"a"}}
    assert _components(graph) == [["a", "b.c", "d"]]
    assert _shortest_cycle(graph, ["a", "b.c", "d"]) == ["a", "b.c", "d", "a"]
    assert _packages("nvbridge.dataset.timeline", "nvbridge.analysis.gpu") == ["nvbridge.dataset"]
    assert _packages("nvbridge.dataset.timeline", "nvbridge.dataset.report") == []


def _loads_heavy(module: str) -> bool:
    return any(t.partition(".")[0] in HEAVY for t in {module} | _loads(module))


def test_lazy_imports_are_for_heavy_dependencies() -> None:
    wrong = [
        f"{m}:{i.line} imports {i.named} in a function; it loads none of {', '.join(HEAVY)}: import it at the top"
        for m, imps in IMPORTS.items()
        if m not in ENTRY
        for i in imps
        if i.lazy and _runs(i) and i.target == i.named and not _loads_heavy(i.target)
    ]
    assert wrong == [], "\n".join(wrong)


def test_every_module_has_a_layer() -> None:
    for m in FILES:
        assert any(m == p or m.startswith(p + ".") for layer in LAYERS for p in layer), m


def test_lower_layers_never_import_higher_ones() -> None:
    upward = sorted(
        {
            f"{m}:{i.line} (layer {_layer(m)}) imports {i.target} (layer {_layer(i.target)})"
            for m, imps in IMPORTS.items()
            for i in imps
            if _runs(i) and _layer(i.target) > _layer(m)
        }
    )
    assert upward == [], "\n".join(upward)


def test_floors() -> None:
    """The floor imports only the floor; annotate (the training process) only the floor and torch;
    nothing but annotate and analysis.torch_compat imports torch."""
    for m, imps in IMPORTS.items():
        if _layer(m) == 0 or m.startswith("nvbridge.annotate"):
            above = {i.target for i in imps if i.target.startswith("nvbridge") and _layer(i.target) > 0}
            assert {t for t in above if not t.startswith("nvbridge.annotate")} == set(), m
    torch_users = {m for m, imps in IMPORTS.items() if any(i.target == "torch" for i in imps)}
    assert {m for m in torch_users if not m.startswith("nvbridge.annotate")} == {"nvbridge.analysis.torch_compat"}


def test_the_layers_are_the_ones_documented() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    drawn = re.search(r"\n## Layers\n(.*?)\n## ", doc, re.S)
    assert drawn, "docs/architecture.md has a '## Layers' section"
    rows = [line for line in drawn.group(1).splitlines() if re.match(r"\s*\d+ ", line)]
    assert len(rows) == len(LAYERS), rows
    for row, layer in zip(reversed(rows), LAYERS):
        assert int(row.split()[0]) == LAYERS.index(layer), row
        for prefix in layer:
            shown = "nvbridge/__init__" if prefix == "nvbridge" else prefix.removeprefix("nvbridge.").replace(".", "/")
            assert shown in row, f"{shown} missing from the row {row!r}"


def _too_big() -> dict[str, int]:
    """Modules over MAX_MODULE_LINES (every line counts) and functions over MAX_FUNCTION_LINES, in
    the package, the tests and the scripts: the limits hold everywhere (issue 26)."""
    paths = [p for folder in SIZED for p in sorted((ROOT / folder).rglob("*.py"))] + sorted(ROOT.glob("*.py"))
    return over_limits(paths, ROOT, MAX_MODULE_LINES, MAX_FUNCTION_LINES)


def test_sizes() -> None:
    big = _too_big()
    assert big == {}, f"modules over {MAX_MODULE_LINES} lines, functions over {MAX_FUNCTION_LINES}: split by role"
