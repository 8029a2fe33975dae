"""The pytest plugin: options, fixtures and the cluster's lifecycle across xdist workers.

Fixtures: `cluster` (session), `kube` (pykube-ng), `k8s` (kubernetes ApiClient), `namespace`
(fresh per test), `operator` (the operator under test, in-process, in the test's namespace, as its
own ServiceAccount), `private_cluster` (a control plane of the test's own, for disruptive tests),
`faults` (a fault-injecting proxy the test's operators talk through).

Under xdist one local control plane serves every worker: the first worker to need it starts it
under a FileLock beside the run's base temp dir, detached; only the xdist controller stops it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from envtest.plugin import settings
from envtest.plugin.context import TestContext

if TYPE_CHECKING:
    from envtest.clusters import Cluster
    from envtest.faults import FaultProxy
    from envtest.plugin.runner import OperatorRunner

CTX_KEY = pytest.StashKey[TestContext]()
SESSION_KEY = pytest.StashKey["ClusterSession"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    settings.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    try:
        resolved = settings.resolve(config)
    except settings.UsageProblem as exc:
        raise pytest.UsageError(str(exc)) from None
    from envtest.plugin.session import ClusterSession  # deferred: keeps `pytest --help` light

    config.stash[SESSION_KEY] = ClusterSession(config, resolved)
    config.addinivalue_line(
        "markers",
        "envtest_local: needs the local backend (kwok-driven pods, private planes); skipped elsewhere",
    )
    config.addinivalue_line(
        "markers", "envtest_private(components=…, job_pods=…): settings of the test's private_cluster"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    settings_ = config.stash[SESSION_KEY].settings if SESSION_KEY in config.stash else None
    if settings_ is None or settings_.backend == "local":
        return
    skip = pytest.mark.skip(reason=f"needs the local backend (kwok, private planes), not {settings_.backend}")
    for item in items:
        if item.get_closest_marker("envtest_local") or "private_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)


def pytest_report_header(config: pytest.Config) -> str | None:
    if SESSION_KEY not in config.stash:
        return None
    return config.stash[SESSION_KEY].settings.header()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if SESSION_KEY in session.config.stash:
        session.config.stash[SESSION_KEY].finish()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if SESSION_KEY in config.stash:
        for line in config.stash[SESSION_KEY].summary_lines():
            terminalreporter.write_line(line)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    ctx = item.stash.get(CTX_KEY, None)
    # Artifacts right after the failure, while the operator still runs and nothing is torn down.
    if ctx is not None and report.failed and report.when in ("setup", "call"):
        dest = ctx.collect_artifacts()
        if dest is not None:
            report.sections.append(("envtest artifacts", str(dest)))
    return report


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Cluster:
    """The session's cluster (local control plane, kind, or existing), started on first use."""
    return request.config.stash[SESSION_KEY].cluster()


@pytest.fixture(scope="session")
def kube(cluster: Cluster) -> Any:
    """A pykube-ng HTTPClient with admin rights."""
    return cluster.pykube


@pytest.fixture(scope="session")
def k8s(cluster: Cluster) -> Any:
    """A `kubernetes.client.ApiClient` with admin rights."""
    return cluster.k8s


@pytest.fixture
def envtest_context(request: pytest.FixtureRequest) -> TestContext:
    """Per-test bookkeeping: namespaces, operator logs, artifacts (used by the other fixtures)."""
    ctx = request.node.stash.get(CTX_KEY, None)
    if ctx is None:
        ctx = TestContext(request.config.stash[SESSION_KEY], request.node.nodeid)
        request.node.stash[CTX_KEY] = ctx
    return ctx


@pytest.fixture
def namespace(envtest_context: TestContext, cluster: Cluster) -> Iterator[str]:
    """A fresh namespace for this test (its default ServiceAccount exists); deleted without waiting."""
    name = envtest_context.create_namespace(cluster)
    yield name
    envtest_context.release_namespace(cluster, name)


@pytest.fixture
def envtest_operator_factory(request: pytest.FixtureRequest) -> Any:
    """The operator under test: ini `envtest_operator = package.module:factory`, or override this
    fixture. Called as `factory(api_factory, namespace=…)`; returns an object with start/stop/errors."""
    factory = request.config.stash[SESSION_KEY].settings.operator_factory()
    if factory is None:
        pytest.fail(
            "no operator configured: set `envtest_operator = pkg.module:factory` in the pytest ini "
            "or override the `envtest_operator_factory` fixture",
            pytrace=False,
        )
    return factory


@pytest.fixture
def operator(
    request: pytest.FixtureRequest,
    envtest_context: TestContext,
    cluster: Cluster,
    namespace: str,
    envtest_operator_factory: Any,
) -> Iterator[OperatorRunner]:
    """The operator running in-process, scoped to `namespace`, as ServiceAccount `envtest-operator`
    bound only to the operator's ClusterRole. Teardown: delete the test's custom resources while
    it still runs (so finalizers are processed), then stop it; a crash fails the test.
    With `faults` also requested it talks through the fault proxy, as client "operator"."""
    if "faults" in request.fixturenames:
        request.getfixturevalue("faults")  # set up first, so the proxy outlives the operator
    runner = envtest_context.start_operator(cluster, namespace, envtest_operator_factory)
    yield runner
    envtest_context.stop_operator(cluster, runner)


@pytest.fixture
def private_cluster(request: pytest.FixtureRequest, envtest_context: TestContext) -> Iterator[Cluster]:
    """A local control plane for this test alone (restart it, break it: nobody else is disturbed)."""
    marker = request.node.get_closest_marker("envtest_private")
    cluster = request.config.stash[SESSION_KEY].private_cluster(**(marker.kwargs if marker else {}))
    envtest_context.extra_log_paths.update(cluster.log_paths)
    envtest_context.private = cluster
    try:
        yield cluster
    finally:
        envtest_context.private = None
        cluster.close()


@pytest.fixture
def faults(request: pytest.FixtureRequest, envtest_context: TestContext) -> Iterator[FaultProxy]:
    """A fault-injecting TLS proxy in front of the test's apiserver (`private_cluster` when the test
    uses one, else `cluster`). Operators the test starts afterwards (the `operator` fixture,
    `envtest_context.start_operator`) talk through it; add rules with `faults.add(Rule(...))`."""
    from envtest.faults import FaultProxy

    name = "private_cluster" if "private_cluster" in request.fixturenames else "cluster"
    cluster: Cluster = request.getfixturevalue(name)
    log_path = envtest_context.log_dir() / "faults.log"
    proxy = FaultProxy.for_cluster(cluster, log_path=log_path).start()
    envtest_context.extra_log_paths["faults"] = log_path
    envtest_context.faults = proxy
    try:
        yield proxy
    finally:
        envtest_context.faults = None
        proxy.stop()
