"""The operator under test is its own ServiceAccount, never admin — asked of the apiserver itself
(SelfSubjectReview), interleaved with admin calls, on every backend."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from envtest.plugin.runner import ThreadOperator

REVIEW = "apis/authentication.k8s.io/v1/selfsubjectreviews"
BODY = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}


@pytest.fixture
def envtest_operator_factory() -> Any:
    """An operator that does nothing but keep the clients the harness made for it."""
    made: list[Any] = []

    def factory(api_factory: Any, namespace: str | None = None, **_: Any) -> ThreadOperator:
        made.append(api_factory)
        return ThreadOperator(lambda stop: stop.wait(), name="identity-probe")

    factory.made = made  # type: ignore[attr-defined]
    return factory


def _whoami(session: Any, server: str, limit: float) -> str:
    resp = session.post(f"{server}/{REVIEW}", json=BODY, timeout=limit)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["status"]["userInfo"]["username"])


def test_the_operators_requests_are_its_service_account_even_after_admin_calls(
    operator: Any, envtest_operator_factory: Any, namespace: str, cluster: Any, timeouts: Any
) -> None:
    limit = timeouts(10)
    (api_factory,) = envtest_operator_factory.made
    clients = [api_factory() for _ in range(3)]
    expected = f"system:serviceaccount:{namespace}:envtest-operator"
    admin = _whoami(cluster.session, cluster.server, limit)
    assert admin != expected
    seen = []
    for client in clients:  # operator, admin, operator, admin, …: no pooled connection mixes them up
        seen.append(_whoami(client.session, client.url, limit))
        assert _whoami(cluster.session, cluster.server, limit) == admin
    assert seen == [expected] * len(clients)
    # And concurrently, as an operator's informers and workers call at once.
    results: list[str] = []
    threads = [
        threading.Thread(target=lambda c=c: results.append(_whoami(c.session, c.url, limit)))
        for c in clients + clients
    ]
    for thread in threads:
        thread.start()
    admin_again = _whoami(cluster.session, cluster.server, limit)
    for thread in threads:
        thread.join()
    assert results == [expected] * len(threads)
    assert admin_again == admin
