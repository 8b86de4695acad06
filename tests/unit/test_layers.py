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
