"""Children converge by server-side apply: a field we stop setting goes, another writer's stays, and an
object written by the pre-apply operator (merge patches, manager "pykube-ng") is upgraded first."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from mysqlkit import MySQLClusters, sample, settled_writes, writes

from envtest import OperatorRunner, consistently, eventually
from envtest.clusters import Cluster
from envtest.plugin.context import TestContext
from mysql_operator.controller.children import resources
from mysql_operator.controller.children.ssa import split_fields

MINIMAL = sample("mysqlcluster_minimal.yaml")
SIZED = {**MINIMAL, "spec": {**MINIMAL["spec"], "resources": {"cpu": "500m", "memory": "1Gi"}}}
MEMORY_ONLY = {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}


def sts_path(mysql: MySQLClusters) -> str:
    return f"apis/apps/v1/namespaces/{mysql.namespace}/statefulsets"


def managers(obj: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted(
        (e["manager"], e["operation"])
        for e in obj["metadata"].get("managedFields") or []
        if not e.get("subresource")
    )


def mysqld(mysql: MySQLClusters, name: str = "sample") -> dict[str, Any]:
    sts = mysql.child("statefulset", name)
    assert sts is not None
    return next(c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "mysql")


def test_object_written_before_apply_is_upgraded_and_a_dropped_field_removed(
    mysql: MySQLClusters,
    operator: OperatorRunner,
    envtest_context: TestContext,
    cluster: Cluster,
    envtest_operator_factory: Any,
) -> None:
    operator.stop()
    cr = mysql.create(SIZED)
    # The old operator's credentials Secret (without it, kept data would be CredentialsMissing).
    secrets = mysql.child_path("secret", "sample").rsplit("/", 1)[0]
    mysql.api.create(secrets, resources.credentials_secret(cr))
    # Exactly what the operator wrote before it applied: a POST with pykube-ng's User-Agent (the
    # apiserver names the field manager after it) and no fieldManager.
    old = copy.deepcopy(resources.statefulset(cr))
    response = mysql.api.session.post(
        mysql.api.url(sts_path(mysql)),
        json=old,
        headers={"User-Agent": "pykube-ng/23.6.0"},
        timeout=mysql.timeouts(10),
    )
    assert response.status_code == 201, response.text[:300]
    assert managers(response.json()) == [("pykube-ng", "Update")]

    successor = envtest_context.start_operator(cluster, mysql.namespace, envtest_operator_factory)
    try:
        mysql.wait_running("sample")
        mysql.patch("sample", {"spec": {"resources": {"cpu": None}}})

        def cpu_removed() -> None:
            assert mysqld(mysql)["resources"] == MEMORY_ONLY, mysqld(mysql)["resources"]

        # Without the upgrade, pykube-ng's Update entry would keep owning (and keeping) cpu.
        eventually(cpu_removed, timeout=mysql.timeouts(30))
        sts = mysql.child("statefulset", "sample")
        assert sts is not None
        # What stays with pykube-ng is only what our builders do not set (the defaults the apiserver
        # filled in at that create): a pykube-ng entry is not proof enough of more (see ssa.py).
        left = [e["fieldsV1"] for e in sts["metadata"]["managedFields"] if e["manager"] == "pykube-ng"]
        ours = resources.statefulset(mysql.must_get("sample"))
        assert all(split_fields(fields, ours)[0] == {} for fields in left), left
        assert ("mysql-operator", "Apply") in managers(sts)
    finally:
        envtest_context.stop_operator(cluster, successor)


# kwok's fake pods: on kind the sidecar's image would have to be pulled for the rollout to finish.
@pytest.mark.envtest_local
def test_another_writers_sidecar_survives_our_apply_and_causes_no_write_loop(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    cr = mysql.create(MINIMAL)
    mysql.wait_running("sample")
    injector = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "sample-mysql"},
        "spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "envoy:1.31"}]}}},
    }
    applied = mysql.api.session.patch(
        mysql.api.url(f"{sts_path(mysql)}/sample-mysql"),
        params={"fieldManager": "sidecar-injector"},
        json=injector,
        headers={"Content-Type": "application/apply-patch+yaml"},
        timeout=mysql.timeouts(10),
    )
    assert applied.status_code == 200, applied.text[:300]

    mysql.patch("sample", {"spec": {"version": "8.4"}})

    def converged_with_sidecar() -> None:
        sts = mysql.child("statefulset", "sample")
        assert sts is not None
        names = [c["name"] for c in sts["spec"]["template"]["spec"]["containers"]]
        ours = [c["name"] for c in resources.statefulset(cr)["spec"]["template"]["spec"]["containers"]]
        assert names == [*ours, "sidecar"], names
        assert mysqld(mysql)["image"] == "mysql:8.4"
        # The rollout is over: the hold below is about the operator, not the StatefulSet controller.
        status = sts.get("status") or {}
        assert status.get("observedGeneration") == sts["metadata"]["generation"], status
        assert status.get("updateRevision") == status.get("currentRevision"), status
        assert status.get("readyReplicas") == sts["spec"]["replicas"], status

    eventually(converged_with_sidecar, timeout=mysql.timeouts(30))
    mysql.wait_running("sample")
    before = settled_writes(operator.operator, timeout=mysql.timeouts(30))

    def quiet() -> None:
        assert writes(operator.operator) == before, "the operator keeps writing: it fights the sidecar"

    consistently(quiet, duration=mysql.timeouts(4.0), interval=0.5)
