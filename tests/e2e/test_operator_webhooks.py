"""The operator's admission webhooks (`mysql_operator.webhooks`, `operator/config/webhook.yaml`)
through a real apiserver: installed per test by the harness (scoped to the test's namespace), served
by the operator's own server in-process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pykube
import pytest
from mysqlkit import Timeouts

from envtest import eventually
from mysql_operator.webhooks.server import server

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "operator" / "config" / "webhook.yaml"
FINALIZER = "db.example.com/final-backup"


def cluster_body(name: str, **spec: Any) -> dict[str, Any]:
    body = {"replicas": 1, "storage": {"size": "1Gi"}, **spec}
    return {
        "apiVersion": "db.example.com/v1beta1",
        "kind": "MySQLCluster",
        "metadata": {"name": name},
        "spec": body,
    }


def url(cluster: Any, ns: str, name: str = "") -> str:
    base = f"{cluster.server}/apis/db.example.com/v1beta1/namespaces/{ns}/mysqlclusters"
    return f"{base}/{name}" if name else base


@pytest.fixture
def hooks(envtest_webhooks: Any, envtest_context: Any, envtest_cluster: Any, namespace: str) -> Iterator[Any]:
    """The operator's webhook server, installed. It looks StorageClasses up as the operator's
    ServiceAccount, the identity a deployment gives it, so the run's record counts the reads against
    its ClusterRole (and a refused read shows as denied)."""
    identity = pykube.KubeConfig.from_file(
        str(envtest_context.operator_kubeconfig(envtest_cluster, namespace))
    )
    running = server(envtest_webhooks.certs(), lambda: pykube.HTTPClient(identity)).start()
    try:
        envtest_webhooks.install([CONFIGS], endpoint=running)
        yield running
    finally:
        running.stop()


CRON, ZONE = "spec.backup.schedule.cron", "spec.backup.schedule.timeZone"
CLASS = "spec.storage.storageClassName"
REJECTED = {
    "six-field-cron": ({"backup": {"schedule": {"cron": "0 0 2 * * *"}}}, CRON, "not a cron schedule"),
    "minute-61": ({"backup": {"schedule": {"cron": "61 * * * *"}}}, CRON, "not a cron schedule"),
    "unknown-zone": ({"backup": {"schedule": {"timeZone": "Mars/Olympus"}}}, ZONE, "not an IANA time zone"),
    # Not "cannot look the StorageClass up now": a refused look-up names the same field.
    "missing-storage-class": (
        {"storage": {"size": "1Gi", "storageClassName": "no-such-class"}},
        CLASS,
        "no such StorageClass",
    ),
}
"""Each rejected spec: the field the rejection names, and why it says it was rejected."""


@pytest.mark.parametrize(("spec", "field", "why"), REJECTED.values(), ids=REJECTED.keys())
def test_validating_webhook_rejects_naming_the_field(
    hooks: Any, cluster: Any, namespace: str, spec: dict[str, Any], field: str, why: str, timeouts: Timeouts
) -> None:
    resp = cluster.session.post(
        url(cluster, namespace), json=cluster_body("bad", **spec), timeout=timeouts(30)
    )

    assert resp.status_code == 422, resp.text
    status = resp.json()
    assert status["reason"] == "Invalid" and field in status["message"], status
    assert [c["field"] for c in status["details"]["causes"]] == [field]
    assert why in status["message"], status


def test_validating_webhook_admits_an_existing_storage_class(
    hooks: Any, cluster: Any, namespace: str, timeouts: Timeouts
) -> None:
    sc_url = f"{cluster.server}/apis/storage.k8s.io/v1/storageclasses"
    name = f"envtest-{namespace}"  # cluster-scoped: unique per test, not a default, deleted after
    made = cluster.session.post(
        sc_url,
        json={
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": "x",
        },
        timeout=timeouts(30),
    )
    assert made.status_code == 201, made.text
    try:
        spec = {"storage": {"size": "1Gi", "storageClassName": name}}
        resp = cluster.session.post(
            url(cluster, namespace), json=cluster_body("good", **spec), timeout=timeouts(30)
        )
        assert resp.status_code == 201, resp.text
        assert resp.json()["spec"]["storage"]["storageClassName"] == name
    finally:
        cluster.session.delete(f"{sc_url}/{name}", timeout=timeouts(30))


PINNED = {
    # version served → (engine, the storage spec at that version, the version the object is stored with)
    "v1": (None, {"storage": {"size": "1Gi"}}, "8.4"),
    "v1beta1": (None, {"storage": {"size": "1Gi"}}, "8.4"),
    "v1beta1-mariadb": ("mariadb", {"storage": {"size": "1Gi"}}, "10.11"),
    "v1-mariadb": ("mariadb", {"storage": {"size": "1Gi"}}, "10.11"),
    "v1alpha1": (None, {"storageSize": "1Gi"}, "8.0"),  # its schema's own default, stated at create
}


@pytest.mark.parametrize(
    ("served", "engine", "storage", "stored"), [(k, *v) for k, v in PINNED.items()], ids=PINNED.keys()
)
def test_a_version_left_unset_is_pinned_at_create_through_every_served_version(
    hooks: Any,
    cluster: Any,
    namespace: str,
    served: str,
    engine: str | None,
    storage: dict[str, Any],
    stored: str,
    timeouts: Timeouts,
) -> None:
    """Created without `spec.version` at any served version, the object is stored with one: it never
    follows a default the operator may change later (re-created over kept data, an upgrade in place)."""
    version = served.split("-")[0]
    base = f"{cluster.server}/apis/db.example.com/{{}}/namespaces/{namespace}/mysqlclusters"
    spec = {"replicas": 1, **storage, **({"engine": engine} if engine else {})}
    body = {"apiVersion": f"db.example.com/{version}", "kind": "MySQLCluster", "metadata": {"name": served}}
    made = cluster.session.post(base.format(version), json={**body, "spec": spec}, timeout=timeouts(30))
    assert made.status_code == 201, made.text
    # Read at v1, the stored version: no conversion shows a default here, so a version is a pinned one.
    hub = cluster.session.get(f"{base.format('v1')}/{served}", timeout=timeouts(30))
    assert hub.status_code == 200, hub.text
    assert hub.json()["spec"].get("version") == stored, hub.json()["spec"]
    # Pinned at create only: a later update leaves what the user wrote.
    patched = cluster.session.patch(
        f"{base.format('v1')}/{served}",
        json={"spec": {"version": None}},
        headers={"Content-Type": "application/merge-patch+json"},
        timeout=timeouts(30),
    )
    assert patched.status_code == 200, patched.text
    assert "version" not in patched.json()["spec"], patched.json()["spec"]


def test_deletes_finish_while_the_admission_webhooks_are_down(
    hooks: Any, operator: Any, cluster: Any, namespace: str, timeouts: Timeouts
) -> None:
    s = cluster.session
    made = s.post(url(cluster, namespace), json=cluster_body("doomed"), timeout=timeouts(30))
    assert made.status_code == 201, made.text

    def has_finalizer() -> None:
        meta = s.get(url(cluster, namespace, "doomed"), timeout=timeouts(10)).json()["metadata"]
        assert FINALIZER in (meta.get("finalizers") or []), meta

    # So the delete below needs the operator's UPDATE to finish.
    eventually(has_finalizer, timeout=timeouts(30))
    hooks.stop()
    refused = s.post(url(cluster, namespace), json=cluster_body("during"), timeout=timeouts(30))
    assert refused.status_code >= 500 and "failed calling webhook" in refused.json()["message"], refused.text

    deleted = s.delete(url(cluster, namespace, "doomed"), timeout=timeouts(30))
    assert deleted.status_code == 200  # DELETE: no rule

    def gone() -> None:
        assert s.get(url(cluster, namespace, "doomed"), timeout=timeouts(10)).status_code == 404

    # The finalizer's removal is an UPDATE the validating webhook (failurePolicy Fail) would refuse;
    # matchConditions exempt objects being deleted.
    eventually(gone, timeout=timeouts(30))


@pytest.mark.envtest_private(components="minimal")
def test_defaulting_webhook_pins_the_default_storage_class(
    private_cluster: Any, envtest_webhooks: Any, envtest_context: Any
) -> None:
    s, api = private_cluster.session, private_cluster.server
    timeouts = Timeouts(private_cluster.backend)
    default_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": "standard",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "x",
    }
    assert (
        s.post(
            f"{api}/apis/storage.k8s.io/v1/storageclasses", json=default_class, timeout=timeouts(30)
        ).status_code
        == 201
    )
    ns = envtest_context.create_namespace(private_cluster)
    # As the operator's ServiceAccount: without its StorageClass list grant no default is found.
    identity = pykube.KubeConfig.from_file(str(envtest_context.operator_kubeconfig(private_cluster, ns)))
    running = server(envtest_webhooks.certs(), lambda: pykube.HTTPClient(identity)).start()
    try:
        envtest_webhooks.install([CONFIGS], endpoint=running, namespace=ns)
        made = s.post(url(private_cluster, ns), json=cluster_body("pinned"), timeout=timeouts(30))
        assert made.status_code == 201, made.text
        assert made.json()["spec"]["storage"] == {"size": "1Gi", "storageClassName": "standard"}
        explicit = {"storage": {"size": "1Gi", "storageClassName": "standard"}}
        kept = s.post(
            url(private_cluster, ns), json=cluster_body("explicit", **explicit), timeout=timeouts(30)
        )
        assert kept.status_code == 201 and kept.json()["spec"]["storage"] == explicit["storage"], kept.text
    finally:
        running.stop()
