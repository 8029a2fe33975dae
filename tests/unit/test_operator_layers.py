"""The operator's packages read top-down: each imports only packages below it, and no module imports
itself back through others. Every import counts (type-checking and function-level ones included, as
import-linter counts them): a cycle hidden behind `if TYPE_CHECKING` is still two modules that cannot
be understood apart."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

import mysql_operator

PACKAGE = Path(mysql_operator.__file__).parent
ROOT = "mysql_operator"

# Top first. A unit may import any unit in a later layer, none in its own or an earlier one.
LAYERS: list[set[str]] = [
    {ROOT},  # the facade and `python -m mysql_operator`
    {"cli"},  # the command line: parses, wires, runs
    {"manifests"},  # generated deployment files: the webhooks' paths, the API's models
    {"webhooks", "controller"},  # the two halves a running operator serves; neither needs the other
    {"controller.children"},  # builders and ownership rules: pure, no API calls
    {"api"},  # the types of each served version, and conversion
    {"database"},  # engines, images, the pods' scripts: no Kubernetes objects
    {"runtime"},  # the controller runtime, which knows nothing of MySQL
]
UNITS = sorted(set().union(*LAYERS) - {ROOT}, key=len, reverse=True)  # longest prefix first


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((ROOT, *parts))


def unit_of(module: str) -> str:
    inner = module.removeprefix(ROOT).lstrip(".")
    return next((u for u in UNITS if inner == u or inner.startswith(u + ".")), ROOT)


def imports(path: Path) -> set[str]:
    """The package's modules `path` imports, by absolute name (relative imports resolved)."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target != ROOT and not target.startswith(ROOT + "."):
                continue
            for alias in node.names:  # `from pkg import module` names a module
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name == ROOT or a.name.startswith(ROOT + "."))
    return found - {here}


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def graph() -> dict[str, set[str]]:
    return {name: imports(path) for name, path in MODULES.items()}


def test_every_package_has_a_layer():
    packages = {unit_of(m) for m in MODULES}
    assert packages == set().union(*LAYERS), "a new package: give it a layer in LAYERS"
    assert {m.removeprefix(ROOT + ".") for m in MODULES if (MODULES[m].name == "__init__.py")} >= (
        set().union(*LAYERS) - {ROOT}
    )


def test_packages_import_only_downwards():
    layer_of = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
    upward = [
        f"{module} ({unit_of(module)}, layer {layer_of[unit_of(module)]}) imports {imported} "
        f"({unit_of(imported)}, layer {layer_of[unit_of(imported)]})"
        for module, imported_set in graph().items()
        for imported in imported_set
        if unit_of(imported) != unit_of(module) and layer_of[unit_of(imported)] <= layer_of[unit_of(module)]
    ]
    assert upward == []


def test_no_module_imports_itself_back():
    edges = graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    assert cycles == []


def test_each_package_says_what_it_owns():
    """A docstring that names every module and package it holds: a newcomer reading it learns where each
    concern lives, and a module added without a word in it fails here."""
    for path in sorted(PACKAGE.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        where = path.relative_to(PACKAGE)
        assert doc and len(doc.split()) >= 8, f"{where}: no docstring saying what it owns"
        held = [p.stem for p in path.parent.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
        held += [p.parent.name for p in path.parent.glob("*/__init__.py")]
        unnamed = sorted(name for name in held if not re.search(rf"(?<![\w.]){name}\b", doc))
        assert unnamed == [], f"{where}: its docstring does not say what {', '.join(unnamed)} hold(s)"


def test_the_checker_sees_a_planted_cycle_and_an_upward_import(tmp_path, monkeypatch):
    """The checks above would pass on an empty graph: prove they read imports as written."""
    pkg = tmp_path / ROOT
    (pkg / "api").mkdir(parents=True)
    (pkg / "controller").mkdir()
    (pkg / "__init__.py").write_text('"""root"""')
    (pkg / "api" / "__init__.py").write_text('"""api"""')
    (pkg / "api" / "v1.py").write_text("from ..controller import reconciler\n")
    (pkg / "controller" / "__init__.py").write_text('"""controller"""')
    (pkg / "controller" / "reconciler.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import finalizer\n"
    )
    (pkg / "controller" / "finalizer.py").write_text("from .reconciler import X\n")
    this = sys.modules[__name__]
    monkeypatch.setattr(this, "PACKAGE", pkg)
    monkeypatch.setattr(this, "MODULES", {module_name(p): p for p in pkg.rglob("*.py")})
    edges = graph()
    assert edges["mysql_operator.api.v1"] == {"mysql_operator.controller.reconciler"}
    assert edges["mysql_operator.controller.reconciler"] == {"mysql_operator.controller.finalizer"}
    assert edges["mysql_operator.controller.finalizer"] == {"mysql_operator.controller.reconciler"}
    with pytest.raises(AssertionError, match=r"api\.v1 .*imports mysql_operator\.controller\.reconciler"):
        test_packages_import_only_downwards()
    with pytest.raises(AssertionError, match="finalizer"):
        test_no_module_imports_itself_back()
