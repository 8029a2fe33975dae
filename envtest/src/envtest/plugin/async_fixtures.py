"""Async clients for async tests, as pytest-asyncio fixtures: `envtest_async_k8s` (the official
client's asyncio API, `kubernetes.aio`, kubernetes >= 37) and `envtest_k8s_asyncio`
(`kubernetes_asyncio`), both with admin rights on the session's cluster, built on the test's own
event loop and closed on it; short names `async_k8s` and `k8s_asyncio` in configured projects.

pytest-asyncio because it is what async Kubernetes code is tested with (kopf's own suite, the
clients' examples): registered only where it is installed (`pip install 'kube-envtest[async]'`).
In its strict mode an async test carries `@pytest.mark.asyncio`; `asyncio_mode = auto` spares that.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest
import pytest_asyncio

if TYPE_CHECKING:
    from envtest.clusters import Cluster

PLUGIN_NAME = "envtest-async-fixtures"
SHORT_PLUGIN_NAME = "envtest-async-short-fixtures"


async def admin_client(cluster: Cluster, library: str) -> Any:
    """An ApiClient of `library` (`kubernetes.aio` or `kubernetes_asyncio`) for the cluster's admin."""
    try:
        module = importlib.import_module(library)
    except ImportError as exc:
        pytest.fail(f"{library} is not installed ({exc}); install it to use this fixture", pytrace=False)
    from envtest.loopback import is_loopback

    configuration = module.client.Configuration()
    await module.config.load_kube_config(
        config_file=str(cluster.kubeconfig), context=cluster.context, client_configuration=configuration
    )
    if is_loopback(configuration.host):
        configuration.proxy = None
    api = module.client.ApiClient(configuration)
    if cluster.user_agent:
        api.user_agent = cluster.user_agent  # this worker's writes, as for the sync clients
    return api


async def _admin_clients(cluster: Cluster, library: str) -> AsyncIterator[Any]:
    api = await admin_client(cluster, library)
    try:
        yield api
    finally:
        await api.close()


@pytest_asyncio.fixture
async def envtest_async_k8s(envtest_cluster: Cluster) -> AsyncIterator[Any]:
    """A `kubernetes.aio.client.ApiClient` with admin rights, on the test's event loop."""
    async for api in _admin_clients(envtest_cluster, "kubernetes.aio"):
        yield api


@pytest_asyncio.fixture
async def envtest_k8s_asyncio(envtest_cluster: Cluster) -> AsyncIterator[Any]:
    """A `kubernetes_asyncio.client.ApiClient` with admin rights, on the test's event loop."""
    async for api in _admin_clients(envtest_cluster, "kubernetes_asyncio"):
        yield api


class Short:
    """The short names, registered like `envtest.plugin.aliases` for configured projects."""

    @pytest_asyncio.fixture
    async def async_k8s(self, envtest_async_k8s: Any) -> Any:
        """`envtest_async_k8s`: a `kubernetes.aio` ApiClient with admin rights."""
        return envtest_async_k8s

    @pytest_asyncio.fixture
    async def k8s_asyncio(self, envtest_k8s_asyncio: Any) -> Any:
        """`envtest_k8s_asyncio`: a `kubernetes_asyncio` ApiClient with admin rights."""
        return envtest_k8s_asyncio
