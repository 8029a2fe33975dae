"""The cluster-wide operator against a real apiserver. Each test runs alone (the cluster scope in
pytest.ini), so the cluster-scoped Tenants and tenant namespaces it finds are its own: the tests
check that, and that the Tenant a test leaves is deleted at its teardown through kopf's finalizer."""

from __future__ import annotations

import os
from typing import Any

import pytest
from kubernetes import client

from envtest import assert_matches, eventually

TENANTS = "apis/examples.envtest.io/v1/tenants"


def create_tenant(kube: Any, name: str) -> None:
    body = {"apiVersion": "examples.envtest.io/v1", "kind": "Tenant", "metadata": {"name": name}}
    body["spec"] = {"owner": "team-a"}
    kube.session.post(f"{kube.url}/{TENANTS}", json=body, timeout=10).raise_for_status()


def get_tenant(kube: Any, name: str) -> dict[str, Any]:
    resp = kube.session.get(f"{kube.url}/{TENANTS}/{name}", timeout=10)
    resp.raise_for_status()  # a 404 is "not yet" for eventually()
    return resp.json()  # type: ignore[no-any-return]


@pytest.fixture
def tenant() -> str:
    """A Tenant name no other test uses (cluster-scoped names are shared by every worker)."""
    return f"t-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.urandom(3).hex()}"


@pytest.mark.parametrize("round_", range(3))
def test_a_tenant_gets_its_namespace_and_is_the_only_one_on_the_cluster(
    operator: Any, kube: Any, k8s: Any, tenant: str, round_: int
) -> None:
    # Left behind on purpose: teardown deletes it with kopf running, so the next test finds none.
    create_tenant(kube, tenant)
    done = eventually(
        lambda: assert_matches(get_tenant(kube, tenant), {"status": {"create_fn": {}}}), timeout=30
    )
    status = get_tenant(kube, tenant)["status"]["create_fn"]
    assert status == {"namespace": f"tenant-{tenant}", "tenantNamespaces": [f"tenant-{tenant}"]}, done
    welcome = client.CoreV1Api(k8s).read_namespaced_config_map("welcome", f"tenant-{tenant}")
    assert welcome.data == {"owner": "team-a"}
    others = [
        t["metadata"]["name"] for t in kube.session.get(f"{kube.url}/{TENANTS}", timeout=10).json()["items"]
    ]
    assert others == [tenant], "another test's Tenant is on the cluster"


def test_deleting_a_tenant_deletes_its_namespace(operator: Any, kube: Any, k8s: Any, tenant: str) -> None:
    create_tenant(kube, tenant)
    eventually(lambda: assert_matches(get_tenant(kube, tenant), {"status": {"create_fn": {}}}), timeout=30)
    kube.session.delete(f"{kube.url}/{TENANTS}/{tenant}", timeout=10).raise_for_status()
    core = client.CoreV1Api(k8s)

    def namespace_going() -> None:
        try:
            assert core.read_namespace(f"tenant-{tenant}").metadata.deletion_timestamp is not None
        except client.ApiException as exc:
            assert exc.status == 404, exc

    eventually(namespace_going)
