"""The operator's identity is handed out only once the apiserver's authorizer allows what it was
granted: its first request is never a 403 from a binding the authorizer's cache has not seen yet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pykube
import pytest
import yaml

from envtest.plugin import grant_probes
from envtest.plugin.runner import ThreadOperator

CR_PATH = "apis/db.example.com/v1/namespaces/{ns}/mysqlclusters"
LEASE_PATH = "apis/coordination.k8s.io/v1/namespaces/{ns}/leases/mysql-operator-leader"


@pytest.fixture
def envtest_operator_factory(timeouts: Any) -> Any:
    """An operator whose first act, at once, is a request each of its grants allows."""
    answers: list[int] = []

    def factory(api_factory: Any, namespace: str | None = None, **_: Any) -> ThreadOperator:
        api = api_factory()
        for path in (CR_PATH, LEASE_PATH):
            url = f"{api.url}/{path.format(ns=namespace)}"
            answers.append(api.session.get(url, timeout=timeouts(30)).status_code)
        return ThreadOperator(lambda stop: stop.wait(), name="first-requests")

    factory.answers = answers  # type: ignore[attr-defined]
    return factory


def test_the_operators_first_requests_are_allowed(operator: Any, envtest_operator_factory: Any) -> None:
    # A list its ClusterRole allows in the namespace, and a get its leader-election Role allows by
    # name (no lease yet: 404, not 403).
    assert envtest_operator_factory.answers == [200, 404]


def _granted_identity(cluster: Any, namespace: str, tmp_path: Path, limit: float) -> pykube.HTTPClient:
    """ServiceAccount `reader`, allowed to list ConfigMaps in `namespace` (a Role of its own: the
    built-in `view` is aggregated, empty on a plane without kube-controller-manager)."""
    path = cluster.identity_kubeconfig(namespace, "reader", tmp_path / "reader.kubeconfig")
    rbac = f"{cluster.server}/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
    }
    for kind, doc in (("roles", role), ("rolebindings", binding)):
        resp = cluster.session.post(f"{rbac}/{kind}", json=doc, timeout=limit)
        assert resp.status_code == 201, resp.text
    return pykube.HTTPClient(pykube.KubeConfig(yaml.safe_load(path.read_text())))


def test_a_granted_request_is_allowed_after_the_wait_and_an_ungranted_one_stays_denied(
    cluster: Any, namespace: str, tmp_path: Path, timeouts: Any
) -> None:
    api = _granted_identity(cluster, namespace, tmp_path, timeouts(10))
    subject = grant_probes.service_account(namespace, "reader")
    reads = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]
    granted = grant_probes.probe(reads, namespace)
    assert granted is not None
    assert (
        grant_probes.wait_in_effect(cluster.session, cluster.server, subject, [granted], timeout=timeouts(10))
        == []
    )
    resp = api.session.get(f"{api.url}/api/v1/namespaces/{namespace}/configmaps", timeout=timeouts(10))
    assert resp.status_code == 200, resp.text
    # The authorizer's answer is real: what the Role does not grant is reported denied at the timeout.
    writes = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["delete"]}]
    denied = grant_probes.probe(writes, namespace)
    assert denied is not None
    left = grant_probes.wait_in_effect(
        cluster.session, cluster.server, subject, [granted, denied], timeout=timeouts(0.5)
    )
    assert left == [denied]
    resp = api.session.delete(
        f"{api.url}/api/v1/namespaces/{namespace}/configmaps/none", timeout=timeouts(10)
    )
    assert resp.status_code == 403, resp.text
