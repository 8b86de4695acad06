"""The package's layering: a module never imports from a layer above its own.

Layers, lowest first (see docs/architecture.md). Every import is checked, including imports
inside functions, so a deferred import cannot hide an upward edge.
"""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "mechinterp_icr"

LAYERS = [
    "config",
    "tasks",
    "models",
    "store",
    "training",
    "pipeline",
    "interp",
    "claims",
    "viz",
    "jobs",
    "experiments",
    "runner",
    "cli",
    "api",  # mechinterp_icr.load: a run's checkpoint as a HookedTransformer and its task
    "__init__",  # the public entry points (mechinterp_icr.load) may use every layer
]
RANK = {name: i for i, name in enumerate(LAYERS)}
MAX_LINES = 600


def _layer(module: str) -> str:
    """'mechinterp_icr.store.rundir' -> 'store'; the package itself -> '__init__'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1] if len(parts) > 2 else parts
    return ".".join(parts)


def _imports(path: Path, module: str):
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target


def _sources():
    return sorted(PKG.rglob("*.py"))


def test_every_module_belongs_to_a_known_layer():
    unknown = {p.relative_to(PKG).as_posix() for p in _sources()
               if _layer(_module_name(p)) not in RANK and _module_name(p) != "mechinterp_icr"}
    assert not unknown, f"modules outside the known layers {LAYERS}: {sorted(unknown)}"


def test_no_import_from_a_higher_layer():
    bad = []
    for path in _sources():
        module = _module_name(path)
        own = RANK.get(_layer(module), RANK["__init__"])
        for line, target in _imports(path, module):
            if not target.startswith("mechinterp_icr"):
                continue
            if target == "mechinterp_icr":
                bad.append(f"{path.relative_to(PKG)}:{line} imports the package root")
                continue
            other = RANK.get(_layer(target))
            assert other is not None, f"{path}:{line}: unknown layer in {target}"
            if other > own:
                bad.append(f"{path.relative_to(PKG)}:{line} ({_layer(module)}) imports {target} "
                           f"({_layer(target)})")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_no_module_over_the_line_limit():
    long = {p.relative_to(PKG).as_posix(): n for p in _sources()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


@pytest.mark.parametrize("src,expected", [
    ("from mechinterp_icr.interp.cache import x", "mechinterp_icr.interp.cache"),
    ("from .cache import x", "mechinterp_icr.interp.cache"),
    ("from ..store import RunDir", "mechinterp_icr.store"),
])
def test_the_import_parser_resolves_relative_imports(tmp_path, src, expected):
    tree_src = f"def f():\n    {src}\n"
    p = tmp_path / "m.py"
    p.write_text(tree_src)
    got = [t for _, t in _imports(p, "mechinterp_icr.interp.attention")]
    assert got == [expected]


MAX_FUNCTION_LINES = 80


def _module_files() -> dict[str, Path]:
    return {_module_name(p): p for p in _sources()}


def _runtime_import_nodes(tree: ast.AST):
    """Import statements that run (at import time or inside a function): every one except
    those under ``if TYPE_CHECKING:``, which only annotations read."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _module_edges() -> dict[str, set[str]]:
    """module -> the package's modules it imports at run time; ``from pkg import name``
    counts as an import of ``pkg.name`` when that is a module."""
    files = _module_files()
    edges: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in _runtime_import_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                parts = package.split(".")
                base = (".".join(parts[: len(parts) - node.level + 1]
                                 + ([node.module] if node.module else []))
                        if node.level else node.module or "")
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            edges[module] |= {t for t in targets if t in files and t != module}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_modules():
    """No two modules import each other at run time, directly or through others (a
    package's ``__init__`` re-exporting its modules counts, so a module inside a package
    imports its siblings directly, not through the package)."""
    cycles = _cycles(_module_edges())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_function_over_the_line_limit():
    long = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PKG)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_architecture_doc_lists_the_enforced_layers():
    """docs/architecture.md's layer block names the layers of LAYERS, top to bottom."""
    doc = (PKG.parent / "docs" / "architecture.md").read_text()
    block = doc.split("<!-- layers:begin -->")[1].split("<!-- layers:end -->")[0]
    names = [line.split()[0] for line in block.splitlines()
             if line.strip() and not line.startswith("```")]
    assert names == LAYERS[::-1], (names, LAYERS[::-1])
