"""Short fixture names — `cluster`, `kube`, `k8s`, `namespace`, `operator`, `faults`, `fake_pods`,
`private_cluster`, `timeouts`.

Registered by `pytest_configure` only for a project that configured the plugin (an `envtest_*` ini
key or an `--envtest-*` option): these names are generic, and
a plugin that defines them in every project of a virtualenv would answer for fixtures it was never
asked for. A project's own fixture of the same name still wins (conftest beats plugins).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from envtest.clusters import Cluster
    from envtest.fakepods import FakePods
    from envtest.faults import FaultProxy
    from envtest.plugin.runner import OperatorRunner

PLUGIN_NAME = "envtest-short-fixtures"


@pytest.fixture(scope="session")
def cluster(envtest_cluster: Cluster) -> Cluster:
    """`envtest_cluster`: the session's cluster."""
    return envtest_cluster


@pytest.fixture(scope="session")
def kube(envtest_kube: Any) -> Any:
    """`envtest_kube`: a pykube-ng HTTPClient with admin rights."""
    return envtest_kube


@pytest.fixture(scope="session")
def k8s(envtest_k8s: Any) -> Any:
    """`envtest_k8s`: a `kubernetes.client.ApiClient` with admin rights."""
    return envtest_k8s


@pytest.fixture
def namespace(envtest_namespace: str) -> str:
    """`envtest_namespace`: a fresh namespace for this test."""
    return envtest_namespace


@pytest.fixture
def operator(envtest_operator: OperatorRunner) -> OperatorRunner:
    """`envtest_operator`: the operator under test, in-process, in the test's namespace."""
    return envtest_operator


@pytest.fixture
def faults(envtest_faults: FaultProxy) -> FaultProxy:
    """`envtest_faults`: a fault-injecting proxy between the test's operators and the apiserver."""
    return envtest_faults


@pytest.fixture
def fake_pods(envtest_fake_pods: FakePods) -> FakePods:
    """`envtest_fake_pods`: the local plane's fake pods (their logs, port-forward targets, exec sandbox)."""
    return envtest_fake_pods


@pytest.fixture
def private_cluster(envtest_private_cluster: Cluster) -> Cluster:
    """`envtest_private_cluster`: a control plane of this test's own."""
    return envtest_private_cluster


@pytest.fixture(scope="session")
def timeouts(envtest_timeouts: Any) -> Any:
    """`envtest_timeouts`: `timeouts(60)` → 60 s scaled for the backend."""
    return envtest_timeouts
