"""The plugin's modules read top-down: each imports only modules below it (type-checking and
function-level imports included, as import-linter counts them), so there is no cycle to untangle."""

from __future__ import annotations

import ast
from pathlib import Path

import envtest.plugin

PLUGIN = Path(envtest.plugin.__file__).parent

# Top first. A module may import any module in a later layer, none in its own or an earlier one.
LAYERS: list[set[str]] = [
    {"__init__"},  # the hooks: what pytest calls
    {"aliases", "webhook_fixtures", "async_fixtures"},  # fixtures layered on the base fixtures
    {"fixtures"},  # the base fixtures: the run's session and each test's context
    {"session"},  # the root of the run's state: one ClusterSession per process
    {"context"},  # one test: its namespaces, its operator, its teardown order
    {"settings", "runner", "releases", "sweep", "clusterscoped"},
    {"following"},  # the operator identity earlier clients follow, written as pointing writes copies
    {"pointing"},  # the session's ambient configuration and its private folder
    {"endpoint", "rbac", "grant_probes", "artifacts", "cleanup", "isolation", "state", "recording"},  # leaves
]


def _plugin_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "envtest.plugin":
                found.update(alias.name for alias in node.names)
            elif node.module.startswith("envtest.plugin."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[2] for a in node.names if a.name.startswith("envtest.plugin."))
    return found


def _modules() -> dict[str, set[str]]:
    return {p.stem: _plugin_imports(p) for p in sorted(PLUGIN.glob("*.py"))}


def test_every_plugin_module_has_a_layer():
    layered = set().union(*LAYERS)
    assert set(_modules()) == layered, "a new module: give it a layer in LAYERS"


def test_modules_import_only_downwards():
    layer_of = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    upward = [
        f"{module} (layer {layer_of[module]}) imports {imported} (layer {layer_of[imported]})"
        for module, imports in _modules().items()
        for imported in imports
        if layer_of[imported] <= layer_of[module]
    ]
    assert upward == []


def test_each_module_says_its_one_job_in_its_first_line():
    for path in sorted(PLUGIN.glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and doc.splitlines()[0].strip(), f"{path.name}: no first line saying what it holds"
