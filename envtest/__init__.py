"""envtest: a real Kubernetes control plane for Python tests, and the tools to assert on it.

The pytest plugin (`envtest.plugin`, registered as a pytest11 entry point) gives the fixtures
`cluster`, `kube`, `k8s`, `namespace`, `operator` and `private_cluster`; this module re-exports
the few names tests and tools use directly.
"""

from envtest.clusters import Cluster, ExistingCluster, LocalCluster
from envtest.controlplane import ALL_COMPONENTS, MINIMAL_COMPONENTS, ControlPlane
from envtest.errors import EnvtestError
from envtest.match import assert_matches, by_key, condition, mismatches
from envtest.runner import OperatorRunner, ThreadOperator
from envtest.wait import consistently, eventually

__all__ = [
    "ALL_COMPONENTS",
    "MINIMAL_COMPONENTS",
    "Cluster",
    "ControlPlane",
    "EnvtestError",
    "ExistingCluster",
    "LocalCluster",
    "OperatorRunner",
    "ThreadOperator",
    "assert_matches",
    "by_key",
    "condition",
    "consistently",
    "eventually",
    "mismatches",
]
