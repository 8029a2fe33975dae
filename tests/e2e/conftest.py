"""E2E tests run against a real kube-apiserver (the envtest plugin's `cluster`), never a mock."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import distkit
import kubernetes
import pytest
import requests
from mysqlkit import MySQLClusters, Timeouts


class Api:
    """Tiny raw-REST helper over the admin session, for objects the tests build as plain dicts."""

    def __init__(self, session: requests.Session, server: str, timeouts: Timeouts) -> None:
        self.session, self.server = session, server
        self.timeouts = timeouts
        """The backend's scaling, for these requests and for the waits of whoever holds this Api."""

    def url(self, path: str) -> str:
        return f"{self.server}/{path.lstrip('/')}"

    def get(self, path: str) -> dict[str, Any] | None:
        resp = self.session.get(self.url(path), timeout=self.timeouts(10))
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        return resp.json()  # type: ignore[no-any-return]

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        resp = self.session.post(self.url(path), json=body, timeout=self.timeouts(10))
        assert resp.status_code == 201, f"POST {path}: {resp.status_code} {resp.text[:500]}"
        return resp.json()  # type: ignore[no-any-return]

    def delete(self, path: str, **body: Any) -> int:
        return self.session.delete(self.url(path), json=body or None, timeout=self.timeouts(10)).status_code

    def patch(self, path: str, body: dict[str, Any], kind: str = "merge") -> dict[str, Any]:
        resp = self.session.patch(
            self.url(path),
            json=body,
            timeout=self.timeouts(10),
            headers={"Content-Type": f"application/{kind}-patch+json"},
        )
        assert resp.status_code == 200, f"PATCH {path}: {resp.status_code} {resp.text[:500]}"
        return resp.json()  # type: ignore[no-any-return]

    def items(self, path: str, selector: str | None = None) -> list[dict[str, Any]]:
        resp = self.session.get(
            self.url(path),
            params={"labelSelector": selector} if selector else None,
            timeout=self.timeouts(10),
        )
        resp.raise_for_status()
        return resp.json()["items"]  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def api(cluster: Any, timeouts: Timeouts) -> Api:
    return Api(cluster.session, cluster.server, timeouts)


@pytest.fixture
def make_api() -> Callable[[Any], Api]:
    return lambda cluster: Api(cluster.session, cluster.server, Timeouts(cluster.backend))


@pytest.fixture
def mysql(api: Api, namespace: str, timeouts: Timeouts) -> MySQLClusters:
    """The MySQLClusters of the test's namespace and their children (kind profile on kind)."""
    return MySQLClusters(api, namespace, timeouts)


@pytest.fixture
def kind_only(cluster: Any) -> None:
    """For tests that need a kubelet to run their containers (the local plane's kwok runs none)."""
    if cluster.backend != "kind":
        pytest.skip(f"needs containers that really run (kind), not {cluster.backend}")


@pytest.fixture
def core(cluster: Any) -> Iterator[kubernetes.client.CoreV1Api]:
    """The official client's CoreV1Api on a client of its own: `kubernetes.stream.stream` swaps the
    client's transport for websockets while it runs."""
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    yield kubernetes.client.CoreV1Api(client)
    client.close()


@pytest.fixture(scope="session")
def harness_python(tmp_path_factory: pytest.TempPathFactory, timeouts: Timeouts) -> Path:
    """The python of the run's harness-only venv (kube-envtest[kopf,async] and the examples' own
    requirements: what a stranger installs, nothing else of this repository; see distkit)."""
    return distkit.harness_venv(tmp_path_factory, timeout=timeouts(900))
