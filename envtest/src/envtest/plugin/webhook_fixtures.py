"""The ``envtest_webhooks`` fixture: admission webhooks installed for one test, removed after it.

    def test_rejects_bad_size(envtest_webhooks, namespace, kube):
        server = envtest_webhooks.server()                       # reference server, certs for the plane
        server.admission("/validate-widget", my_validator)
        envtest_webhooks.install(["config/webhook"], endpoint=server)   # scoped to `namespace`, proven live
        ...

Any other server fits: ``certs = envtest_webhooks.certs()`` gives a cert dir for the address the
apiserver dials (``envtest_webhooks.host``); serve from it on a port of your choice and pass
``endpoint=Endpoint(f"https://{envtest_webhooks.host}:{port}", certs.ca_pem)``.

The address: 127.0.0.1 on local planes (shared or private); on kind the docker network's gateway (this
host as the node sees it); on an existing cluster only what ini ``envtest_webhook_host`` (or
``ENVTEST_WEBHOOK_HOST``) says — without it the fixture skips the test and says why.

Registered by ``envtest.plugin`` at configure time (``pluginmanager.register``), so this module's
``pytest_addoption`` (historic hook) still adds its ini key.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from envtest.plugin.endpoint import HOST_ENV, HOST_INI, KIND_NETWORK

if TYPE_CHECKING:
    from envtest.clusters import Cluster
    from envtest.plugin.context import TestContext
    from envtest.webhooks import Installed, ServingCerts, WebhookEndpoint, WebhookServer

PLUGIN_NAME = "envtest-webhooks"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        HOST_INI,
        "address at which an existing cluster's apiserver reaches webhook servers on this host",
        default="",
    )


class TestWebhooks:
    """One test's webhook setup: certs, servers and installed configurations, undone at teardown in
    reverse (configurations first, so the apiserver stops calling before a server goes away)."""

    __test__ = False

    def __init__(self, request: pytest.FixtureRequest, ctx: TestContext) -> None:
        self._request = request
        self._ctx = ctx
        private = "envtest_private_cluster" in request.fixturenames
        name = "envtest_private_cluster" if private else "envtest_cluster"
        self.cluster: Cluster = request.getfixturevalue(name)
        """The cluster whose apiserver calls the webhooks (the test's private plane when it has one)."""
        self.host = _reachable_host(request.config, self.cluster)
        """Address of this host as the apiserver dials it; every certificate and URL uses it."""
        self._installed: list[Installed] = []
        self._servers: list[WebhookServer] = []
        self._count = 0

    def certs(self, cert_dir: Path | None = None, hosts: Iterable[str] = ()) -> ServingCerts:
        """A fresh cert dir (``tls.crt``/``tls.key``/``ca.crt``) for `host` plus ``hosts``."""
        from envtest.webhooks import serving_certs

        self._count += 1
        cert_dir = cert_dir or self._ctx.log_dir() / f"webhook-certs-{self._count}"
        return serving_certs(cert_dir, [self.host, *hosts])

    def server(self, certs: ServingCerts | None = None) -> WebhookServer:
        """A started reference `WebhookServer` on `host`, stopped at teardown."""
        from envtest.webhooks import WebhookServer

        server = WebhookServer(certs or self.certs()).start()
        self._servers.append(server)
        return server

    def install(
        self,
        configs: Iterable[Any],
        *,
        endpoint: WebhookEndpoint,
        namespace: str | None = None,
        probe: bool = True,
        timeout: float = 30.0,
    ) -> Installed:
        """Install ``configs`` (files, dirs, dicts) scoped to ``namespace`` (default: the ``namespace``
        fixture) and pointing at ``endpoint``; returns once the apiserver demonstrably calls them."""
        from envtest.plugin import sweep
        from envtest.plugin.session import cluster_session
        from envtest.webhooks import install

        if namespace is None:
            if self.cluster is not self._request.getfixturevalue("envtest_cluster"):
                raise ValueError("on a private cluster pass namespace= (one created on that cluster)")
            namespace = self._request.getfixturevalue("envtest_namespace")
        config = self._request.config
        run = cluster_session(config).run_id
        installed = install(
            self.cluster.session,
            self.cluster.server,
            configs,
            endpoint=endpoint,
            namespace=namespace,
            run_id=run,
            # The worker label too: the session sweep selects run AND worker (envtest.plugin.sweep).
            labels=sweep.labels(run, sweep.worker_id(config)),
            probe=probe,
            timeout=timeout,
        )
        self._installed.append(installed)
        _timing("webhooks_install", installed.seconds)
        return installed

    def close(self) -> None:
        errors: list[BaseException] = []
        for installed in reversed(self._installed):
            try:
                installed.remove()
            except Exception as exc:  # keep going: every server must still be stopped
                errors.append(exc)
        for server in reversed(self._servers):
            server.stop()
        if errors:
            raise errors[0]


@pytest.fixture
def envtest_webhooks(request: pytest.FixtureRequest, envtest_context: TestContext) -> Iterator[TestWebhooks]:
    """Admission webhooks for this test: `.server()`, `.certs()`, `.install(configs, endpoint=…)`,
    `.host`; configurations removed and servers stopped at teardown."""
    hooks = TestWebhooks(request, envtest_context)
    try:
        yield hooks
    finally:
        hooks.close()


def _reachable_host(config: pytest.Config, cluster: Cluster) -> str:
    # One decision for these and the run's conversion endpoint (envtest.plugin.endpoint); here a host
    # that cannot be known skips the test, there it is an error.
    from envtest.errors import ConfigError
    from envtest.plugin.endpoint import explicit_host, reachable_host

    try:
        return reachable_host(cluster.backend, explicit_host(config))
    except ConfigError as exc:
        if cluster.backend == "kind":
            pytest.skip(f"webhooks on kind need this host's address on the {KIND_NETWORK!r} network: {exc}")
        pytest.skip(
            f"webhooks on an existing cluster need the address its apiserver reaches this host at: "
            f"set ini {HOST_INI} or {HOST_ENV}"
        )


def _timing(what: str, seconds: float) -> None:
    """Same JSON lines as the other fixtures' overhead (envtest.plugin.context), for the benchmarks."""
    import json

    target = os.environ.get("ENVTEST_TIMINGS")
    if target:
        with open(target, "a") as fh:
            fh.write(json.dumps({"what": what, "seconds": round(seconds, 4)}) + "\n")
