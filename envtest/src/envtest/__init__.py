"""envtest: a real Kubernetes control plane for Python tests, and the tools to assert on it.

The pytest plugin (`envtest.plugin`, registered as a pytest11 entry point) gives the fixtures; this
module re-exports the few names tests and tools use directly. They are imported on first use, so
`import envtest` (and a pytest run that never touches the plugin) stays cheap.

Layers: `envtest.binaries` (resolve, download, build), `envtest.plane` (the local control plane and its
processes), `envtest.faults` (the fault proxy), `envtest.plugin` (pytest: settings, session, per-test
context, artifacts, the in-process operator runner); beside them `clusters`, `crds`, `objects`,
`wait`, `match`, `pki`, `kubeconfig`, `errors` and `cli`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"
"""The distribution's version: its pyproject.toml reads it from here (the one place it is set)."""

# name → module that defines it
_EXPORTS = {
    "ALL_COMPONENTS": "envtest.plane.controlplane",
    "MINIMAL_COMPONENTS": "envtest.plane.controlplane",
    "ControlPlane": "envtest.plane.controlplane",
    "Cluster": "envtest.clusters",
    "ExistingCluster": "envtest.clusters",
    "KindCluster": "envtest.clusters",
    "LocalCluster": "envtest.clusters",
    "EnvtestError": "envtest.errors",
    "EnvtestWarning": "envtest.errors",
    "FinalizerStuck": "envtest.errors",
    "HotLoop": "envtest.errors",
    "OperatorFailed": "envtest.errors",
    "FaultProxy": "envtest.faults",
    "Rule": "envtest.faults",
    "ABSENT": "envtest.match",
    "assert_matches": "envtest.match",
    "by_key": "envtest.match",
    "condition": "envtest.match",
    "mismatches": "envtest.match",
    "OperatorRunner": "envtest.plugin.runner",
    "ThreadOperator": "envtest.plugin.runner",
    "TestContext": "envtest.plugin.context",
    "consistently": "envtest.wait",
    "eventually": "envtest.wait",
    "eventually_async": "envtest.wait",
}

__all__ = [
    "ABSENT",
    "ALL_COMPONENTS",
    "MINIMAL_COMPONENTS",
    "Cluster",
    "ControlPlane",
    "EnvtestError",
    "EnvtestWarning",
    "ExistingCluster",
    "FaultProxy",
    "FinalizerStuck",
    "HotLoop",
    "KindCluster",
    "LocalCluster",
    "OperatorFailed",
    "OperatorRunner",
    "Rule",
    "TestContext",
    "ThreadOperator",
    "assert_matches",
    "by_key",
    "condition",
    "consistently",
    "eventually",
    "eventually_async",
    "mismatches",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'envtest' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:
    from envtest.clusters import Cluster, ExistingCluster, KindCluster, LocalCluster
    from envtest.errors import EnvtestError, EnvtestWarning, FinalizerStuck, HotLoop, OperatorFailed
    from envtest.faults import FaultProxy, Rule
    from envtest.match import ABSENT, assert_matches, by_key, condition, mismatches
    from envtest.plane.controlplane import ALL_COMPONENTS, MINIMAL_COMPONENTS, ControlPlane
    from envtest.plugin.context import TestContext
    from envtest.plugin.runner import OperatorRunner, ThreadOperator
    from envtest.wait import consistently, eventually, eventually_async
