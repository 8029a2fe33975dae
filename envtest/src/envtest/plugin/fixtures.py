"""The plugin's fixtures, all prefixed `envtest_` so they can never shadow a project's own.

The short names (`cluster`, `namespace`, `operator`, …) live in `envtest.plugin.aliases`, registered
only for projects that configured the plugin. This module imports nothing heavy: it is loaded in
every project of the virtualenv through the pytest11 entry point.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from envtest.plugin.state import CTX_KEY

if TYPE_CHECKING:
    from envtest.clusters import Cluster
    from envtest.fakepods import FakePods
    from envtest.faults import FaultProxy
    from envtest.plugin.context import TestContext
    from envtest.plugin.runner import OperatorRunner
    from envtest.plugin.session import ClusterSession
    from envtest.timeouts import Timeouts


def _session(config: pytest.Config) -> ClusterSession:
    from envtest.plugin.session import cluster_session  # heavy: deferred until a test asks

    return cluster_session(config)


@pytest.fixture(scope="session")
def envtest_cluster(request: pytest.FixtureRequest) -> Cluster:
    """The session's cluster (local control plane, kind, or existing), started on first use."""
    return _session(request.config).cluster()


@pytest.fixture(scope="session")
def envtest_kube(envtest_cluster: Cluster) -> Any:
    """A pykube-ng HTTPClient with admin rights."""
    return envtest_cluster.pykube


@pytest.fixture(scope="session")
def envtest_k8s(envtest_cluster: Cluster) -> Any:
    """A `kubernetes.client.ApiClient` with admin rights."""
    return envtest_cluster.k8s


@pytest.fixture(scope="session")
def envtest_timeouts(envtest_cluster: Cluster) -> Timeouts:
    """Timeouts written for the local plane, stretched for the backend: `timeouts(60)` is 60 s
    locally, 360 s on kind (ENVTEST_TIMEOUT_SCALE overrides; see `envtest.timeouts`)."""
    from envtest.timeouts import Timeouts

    return Timeouts(envtest_cluster.backend)


@pytest.fixture(autouse=True)
def _envtest_place(request: pytest.FixtureRequest) -> None:
    """A test that uses the session's cluster in any way (even only `kube`) takes its place on it
    through `envtest_context`: what it makes of cluster-scoped kinds is then deleted after it, and a
    cluster-wide test waits for it. Tests that never touch the cluster pay nothing."""
    if "envtest_cluster" in request.fixturenames and "envtest_context" not in request.fixturenames:
        request.getfixturevalue("envtest_context")


@pytest.fixture
def envtest_context(request: pytest.FixtureRequest) -> Iterator[TestContext]:
    """Per-test bookkeeping: namespaces, operator logs, artifacts (used by the other fixtures). Its
    setup takes the test's place on the cluster — beside other workers' tests, or alone for a
    cluster-wide test, which may wait for them (`envtest.plugin.isolation`) —, its teardown (after
    every fixture built on it) removes the cluster-scoped custom resources the test made."""
    from envtest.plugin.context import TestContext

    session = _session(request.config)
    node = request.node
    ctx = TestContext(
        session,
        node.nodeid,
        clusterwide=session.settings.operator_scope == "cluster"
        or node.get_closest_marker("envtest_clusterwide") is not None,
        pod_exec=node.get_closest_marker("envtest_pod_exec") is not None,
    )
    ctx.begin()
    node.stash[CTX_KEY] = ctx
    try:
        yield ctx
    finally:
        ctx.finish()


@pytest.fixture
def envtest_namespace(envtest_context: TestContext, envtest_cluster: Cluster) -> Iterator[str]:
    """A fresh namespace for this test (its default ServiceAccount exists); deleted without waiting."""
    name = envtest_context.create_namespace(envtest_cluster)
    yield name
    envtest_context.release_namespace(envtest_cluster, name)


@pytest.fixture
def envtest_fake_pods(envtest_cluster: Cluster, envtest_namespace: str) -> Iterator[FakePods]:
    """kwok's fake pods on the local plane, in this test's namespace by default: `write_log(pod, text)`
    for `kubectl logs`, `serve_port(pod, port, handler)` for `kubectl port-forward`, `sandbox(pod)`
    where `kubectl exec` runs — on this host, which asking for this fixture allows in the test's
    namespace (`allow_exec(namespace)` for another). Fails on a backend without them (kind and
    existing clusters run real kubelets; a plane started with pod_streams=False)."""
    from envtest.fakepods import FakePods

    if envtest_cluster.pods_dir is None:
        pytest.fail(
            f"envtest_fake_pods: the {envtest_cluster.backend} backend has no fake pods "
            "(needs the local plane with kwok, started with pod streams on)"
        )
    pods = FakePods(
        envtest_cluster.pods_dir,
        namespace=envtest_namespace,
        session=envtest_cluster.session,
        server=envtest_cluster.server,
    )
    pods.allow_exec()  # a test that asks for fake pods asks for what they do, exec included
    try:
        yield pods
    finally:
        pods.close()


@pytest.fixture
def envtest_operator_factory(request: pytest.FixtureRequest) -> Any:
    """The operator under test: ini `envtest_operator = package.module:factory`, or override this
    fixture. Called as `factory(api_factory, …)` with whichever of namespace, kubeconfig, kube and k8s
    it names (`envtest.plugin.runner`); returns an object with start/stop/errors."""
    factory = _session(request.config).settings.operator_factory()
    if factory is None:
        pytest.fail(
            "no operator configured: set `envtest_operator = pkg.module:factory` in the pytest ini "
            "or override the `envtest_operator_factory` fixture",
            pytrace=False,
        )
    return factory


@pytest.fixture
def envtest_operator(
    request: pytest.FixtureRequest,
    envtest_context: TestContext,
    envtest_cluster: Cluster,
    envtest_namespace: str,
    envtest_operator_factory: Any,
) -> Iterator[OperatorRunner]:
    """The operator running in-process, scoped to the test's namespace, as ServiceAccount
    `envtest-operator` bound only to the operator's RBAC. Teardown: delete the test's custom
    resources while it still runs (so finalizers are processed), then stop it; a crash fails the test.
    With `envtest_faults` also requested it talks through the fault proxy, as client "operator"."""
    if "envtest_faults" in request.fixturenames:
        request.getfixturevalue("envtest_faults")  # set up first, so the proxy outlives the operator
    runner = envtest_context.start_operator(envtest_cluster, envtest_namespace, envtest_operator_factory)
    yield runner
    envtest_context.stop_operator(envtest_cluster, runner)


@pytest.fixture
def envtest_private_cluster(
    request: pytest.FixtureRequest, envtest_context: TestContext
) -> Iterator[Cluster]:
    """A local control plane for this test alone (restart it, break it: nobody else is disturbed)."""
    marker = request.node.get_closest_marker("envtest_private")
    cluster = _session(request.config).private_cluster(**(marker.kwargs if marker else {}))
    envtest_context.extra_log_paths.update(cluster.log_paths)
    envtest_context.private = cluster
    try:
        yield cluster
    finally:
        envtest_context.private = None
        try:
            envtest_context.record_closing(cluster)  # its audit log goes with it
        finally:
            cluster.close()


@pytest.fixture
def envtest_faults(request: pytest.FixtureRequest, envtest_context: TestContext) -> Iterator[FaultProxy]:
    """A fault-injecting TLS proxy in front of the test's apiserver (the private cluster when the test
    uses one, else the session's). Operators the test starts afterwards (`envtest_operator`,
    `envtest_context.start_operator`) talk through it; add rules with `faults.add(Rule(...))`."""
    from envtest.faults import FaultProxy

    private = "envtest_private_cluster" in request.fixturenames
    cluster: Cluster = request.getfixturevalue("envtest_private_cluster" if private else "envtest_cluster")
    log_path = envtest_context.log_dir() / "faults.log"
    proxy = FaultProxy.for_cluster(cluster, log_path=log_path).start()
    envtest_context.extra_log_paths["faults"] = log_path
    envtest_context.faults = proxy
    try:
        yield proxy
    finally:
        envtest_context.faults = None
        proxy.stop()


__all__ = [
    "envtest_cluster",
    "envtest_context",
    "envtest_faults",
    "envtest_k8s",
    "envtest_kube",
    "envtest_namespace",
    "envtest_operator",
    "envtest_operator_factory",
    "envtest_private_cluster",
    "envtest_timeouts",
]
