"""v1alpha1, v1beta1 and v1 (stored) through a real apiserver and the operator's own conversion webhook.
(The upgrade of v1beta1-stored objects to v1 storage: test_storage_migration.py.)

The first test runs on the shared cluster of every backend: its CRD converts through the run's endpoint
(ini `envtest_conversion_webhook`, on kind reached from the node at the docker network's gateway). The
others are on private planes, because they count requests, re-install the CRD or change its storage
version, which must not happen under the feet of other tests: each serves `mysql_operator.webhooks.server`
in-process with certificates for 127.0.0.1 and installs the generated CRD, every version served
(`generate.crd(serve_all=True)`, as api/crd/testing holds it), pointing at it
(`envtest.webhooks.install_crds`).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from mysqlkit import Timeouts

from envtest import crds, eventually
from envtest.webhooks import install_crds, serving_certs, wait_converting
from mysql_operator.manifests import generate
from mysql_operator.runtime import WebhookServer
from mysql_operator.webhooks.server import CONVERT_PATH, server

GROUP = "apis/db.example.com"
FIELDS = "db.example.com/v1beta1-fields"
CRD_NAME = "mysqlclusters.db.example.com"

pytestmark = pytest.mark.envtest_private(components="minimal")


class Plane:
    """A private plane with the CRD converting through the operator's webhook server."""

    def __init__(self, cluster: Any, hooks: WebhookServer, namespace: str) -> None:
        self.cluster, self.hooks, self.namespace = cluster, hooks, namespace
        self.s, self.api = cluster.session, cluster.server
        self.timeouts = Timeouts(cluster.backend)

    def url(self, version: str, name: str = "") -> str:
        base = f"{self.api}/{GROUP}/{version}/namespaces/{self.namespace}/mysqlclusters"
        return f"{base}/{name}" if name else base

    def install(self, crd: dict[str, Any]) -> None:
        install_crds(self.s, self.api, [crd], f"{self.hooks.url}{CONVERT_PATH}", self.hooks.ca_pem)

    def _send(self, method: str, url: str, body: dict[str, Any]) -> requests.Response:
        """A write, sent again while the apiserver answers 503 with Retry-After, as client-go does. A
        write right after a CRD update may take the resource's old storage and reach it once it has
        drained: that answer ("apiserver is shutting down"; seen on a loaded machine)."""
        deadline = time.monotonic() + self.timeouts(30)
        while True:
            resp = self.s.request(method, url, json=body, timeout=self.timeouts(30))
            retry_after = resp.headers.get("Retry-After")
            left = deadline - time.monotonic()
            if resp.status_code != 503 or retry_after is None or left <= 0:
                return resp
            time.sleep(min(max(float(retry_after), 0.1), left))

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        version = body["apiVersion"].rsplit("/", 1)[1]
        resp = self._send("POST", self.url(version), body)
        assert resp.status_code == 201, resp.text
        return resp.json()  # type: ignore[no-any-return]

    def get(self, version: str, name: str) -> dict[str, Any]:
        # The CRD handler picks up a new clientConfig asynchronously: wait for the first conversion.
        return wait_converting(self.s, self.url(version, name))

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        version = obj["apiVersion"].rsplit("/", 1)[1]
        resp = self._send("PUT", self.url(version, obj["metadata"]["name"]), obj)
        assert resp.status_code == 200, resp.text
        return resp.json()  # type: ignore[no-any-return]


@pytest.fixture
def plane(private_cluster: Any, envtest_context: Any, tmp_path: Path) -> Iterator[Plane]:
    hooks = server(serving_certs(tmp_path / "certs")).start()
    try:
        p = Plane(private_cluster, hooks, envtest_context.create_namespace(private_cluster))
        p.install(generate.crd(serve_all=True))
        yield p
    finally:
        hooks.stop()


def alpha(name: str, **spec: Any) -> dict[str, Any]:
    body = {"replicas": 1, "storageSize": "1Gi", **spec}
    return {
        "apiVersion": "db.example.com/v1alpha1",
        "kind": "MySQLCluster",
        "metadata": {"name": name},
        "spec": body,
    }


def beta(name: str, **spec: Any) -> dict[str, Any]:
    body = {"replicas": 1, "storage": {"size": "1Gi"}, **spec}
    return {
        "apiVersion": "db.example.com/v1beta1",
        "kind": "MySQLCluster",
        "metadata": {"name": name},
        "spec": body,
    }


def test_the_shared_cluster_converts_through_the_runs_own_endpoint(
    cluster: Any, namespace: str, timeouts: Timeouts
) -> None:
    s, api = cluster.session, cluster.server
    crd = s.get(f"{api}/{crds.CRD_API}/{CRD_NAME}", timeout=timeouts(10)).json()
    assert crd["spec"]["conversion"]["strategy"] == "Webhook", "the run's CRDs must point at its endpoint"

    def url(version: str, name: str = "") -> str:
        return f"{api}/{GROUP}/{version}/namespaces/{namespace}/mysqlclusters" + (f"/{name}" if name else "")

    # Stored at v1: the create itself already goes through the endpoint.
    made = s.post(url("v1alpha1"), json=alpha("shared", storageSize="3Gi"), timeout=timeouts(30))
    assert made.status_code == 201, made.text
    hub = wait_converting(s, url("v1beta1", "shared"))
    assert hub["spec"]["storage"] == {"size": "3Gi"} and "storageSize" not in hub["spec"]
    assert wait_converting(s, url("v1alpha1", "shared"))["spec"]["storageSize"] == "3Gi"


def test_created_at_v1alpha1_reads_at_v1beta1_and_back_without_loss(plane: Plane) -> None:
    created = plane.create(alpha("a", storageSize="5Gi", backup={"enabled": True, "schedule": "@daily"}))

    hub = plane.get("v1beta1", "a")
    assert hub["spec"]["storage"] == {"size": "5Gi"}
    assert hub["spec"]["backup"]["schedule"] == {"cron": "@daily"}
    assert "storageSize" not in hub["spec"] and FIELDS not in (hub["metadata"].get("annotations") or {})
    assert plane.get("v1alpha1", "a")["spec"] == created["spec"]
    assert plane.hooks.served(CONVERT_PATH) >= 2  # really converted, not relabelled


def test_v1beta1_only_fields_survive_a_v1alpha1_read_modify_write(plane: Plane) -> None:
    schedule = {"cron": "0 3 * * *", "timeZone": "Europe/Berlin"}
    plane.create(
        beta("b", storage={"size": "2Gi", "storageClassName": "fast"}, backup={"schedule": schedule})
    )

    old = plane.get("v1alpha1", "b")
    assert old["spec"]["storageSize"] == "2Gi" and old["spec"]["backup"]["schedule"] == "0 3 * * *"
    assert old["spec"]["version"] == "8.4"  # unset at the hub: mysql's default, shown explicitly
    assert json.loads(old["metadata"]["annotations"][FIELDS]) == {
        "backup": {"schedule": {"timeZone": "Europe/Berlin"}},
        "storage": {"storageClassName": "fast"},
        "version": None,
    }
    edited = copy.deepcopy(old)
    edited["spec"]["replicas"] = 3  # an old client's update: whole object back, at v1alpha1
    plane.put(edited)

    hub = plane.get("v1beta1", "b")
    assert hub["spec"]["replicas"] == 3 and "version" not in hub["spec"]  # not pinned by the old client
    assert hub["spec"]["storage"] == {"size": "2Gi", "storageClassName": "fast"}
    assert hub["spec"]["backup"]["schedule"] == schedule
    assert FIELDS not in (hub["metadata"].get("annotations") or {}), "the annotation is v1alpha1's only"


def test_a_list_of_objects_created_at_both_versions_reads_at_either(plane: Plane) -> None:
    plane.create(alpha("old", storageSize="3Gi"))
    plane.create(beta("new", storage={"size": "4Gi"}))
    plane.get("v1alpha1", "new")  # conversion is live

    def listed(version: str) -> dict[str, dict[str, Any]]:
        resp = plane.s.get(plane.url(version), timeout=plane.timeouts(30))
        assert resp.status_code == 200, resp.text
        items = resp.json()["items"]
        assert {i["apiVersion"] for i in items} == {f"db.example.com/{version}"}
        return {i["metadata"]["name"]: i["spec"] for i in items}

    assert {n: s["storage"] for n, s in listed("v1beta1").items()} == {
        "old": {"size": "3Gi"},
        "new": {"size": "4Gi"},
    }
    assert {n: s["storageSize"] for n, s in listed("v1alpha1").items()} == {"old": "3Gi", "new": "4Gi"}


def alpha_only(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD as it was before v1beta1 existed: one version, stored."""
    old = copy.deepcopy(crd)
    (version,) = [v for v in old["spec"]["versions"] if v["name"] == "v1alpha1"]
    old["spec"]["versions"] = [{**version, "storage": True}]
    del old["spec"]["conversion"]
    return old


def test_objects_stored_before_the_storage_version_changed_still_read_correctly(plane: Plane) -> None:
    def crd_gone() -> None:
        crd = plane.s.get(f"{plane.api}/{crds.CRD_API}/{CRD_NAME}", timeout=plane.timeouts(10))
        assert crd.status_code == 404

    # Start over as a v1alpha1-only cluster: the CRD the plane came with already stores v1beta1.
    gone = plane.s.delete(f"{plane.api}/{crds.CRD_API}/{CRD_NAME}", timeout=plane.timeouts(30))
    assert gone.status_code in (200, 202), gone.text
    eventually(crd_gone, timeout=plane.timeouts(60))
    plane.install(alpha_only(generate.crd(serve_all=True)))
    before = plane.create(alpha("stored-as-alpha", storageSize="7Gi", backup={"schedule": "30 1 * * *"}))

    plane.install(generate.crd(serve_all=True))  # the upgrade: v1beta1 and v1 added, v1 the storage version
    crd = plane.s.get(f"{plane.api}/{crds.CRD_API}/{CRD_NAME}", timeout=plane.timeouts(10)).json()
    assert crd["status"]["storedVersions"] == ["v1alpha1", "v1"]

    hub = plane.get("v1beta1", "stored-as-alpha")  # etcd still holds v1alpha1 bytes: converted on read
    assert hub["spec"]["storage"] == {"size": "7Gi"} and hub["spec"]["backup"]["schedule"] == {
        "cron": "30 1 * * *"
    }
    assert plane.get("v1alpha1", "stored-as-alpha")["spec"] == before["spec"]

    # A write at any version re-stores the object at v1 (what a storage migration does).
    hub["spec"]["replicas"] = 2
    assert plane.put(hub)["spec"]["storage"] == {"size": "7Gi"}
    assert plane.get("v1alpha1", "stored-as-alpha")["spec"] == {**before["spec"], "replicas": 2}
    plane.create(alpha("written-after", storageSize="1Gi"))
    assert plane.get("v1beta1", "written-after")["spec"]["storage"] == {"size": "1Gi"}
