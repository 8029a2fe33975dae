"""Data and credentials on a real apiserver: a deleted credentials Secret is not regenerated over kept
data, fields fixed at creation stay out of applies (and an earlier apply's ownership of them moves),
a storage change that got past the CRD is reported instead of retried, and deletes carry the uid."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from mysqlkit import RETAINED, MySQLClusters, controller_ref, sample, settled_writes, writes
from pykube.exceptions import HTTPError

from envtest import OperatorRunner, assert_matches, condition, consistently, eventually
from envtest.clusters import Cluster
from envtest.plugin.context import TestContext
from mysql_operator.api.v1 import FIELD_MANAGER
from mysql_operator.controller.children import resources
from mysql_operator.controller.client import KubeClient, delete_exactly
from mysql_operator.controller.kinds import Secret

MINIMAL = sample("mysqlcluster_minimal.yaml")
FIXED = ("selector", "serviceName", "volumeClaimTemplates", "podManagementPolicy")
ROLE = "db.example.com/role"


def degraded_with(mysql: MySQLClusters, reason: str) -> dict[str, Any]:
    found = condition(mysql.must_get("sample"), "Degraded")
    assert_matches(found, {"status": "True", "reason": reason})
    return found  # type: ignore[no-any-return]


def test_a_deleted_secret_over_kept_data_is_reported_and_not_regenerated_until_restored(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    mysql.create(MINIMAL)
    mysql.wait_running("sample")
    secret = mysql.child("secret", "sample")
    assert secret is not None
    assert mysql.api.delete(mysql.child_path("secret", "sample")) == 200

    def reported() -> None:
        message = degraded_with(mysql, "CredentialsMissing")["message"]
        assert "sample-credentials" in message and RETAINED in message, message
        warnings = [e for e in mysql.events("sample") if e["reason"] == "CredentialsMissing"]
        assert warnings and warnings[0]["type"] == "Warning", [e["reason"] for e in mysql.events("sample")]

    eventually(reported, timeout=mysql.timeouts(30), description="CredentialsMissing in status and an Event")

    def no_new_password() -> None:
        assert mysql.child("secret", "sample") is None, "a new password was generated over kept data"

    consistently(no_new_password, duration=mysql.timeouts(3.0), interval=0.5)

    # The documented recovery: put the Secret back as it was (data, labels, annotation).
    meta = secret["metadata"]
    restored = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {k: meta[k] for k in ("name", "labels", "annotations")},
        "type": secret["type"],
        "data": secret["data"],
    }
    mysql.api.create(mysql.child_path("secret", "sample").rsplit("/", 1)[0], restored)  # same path

    def recovered() -> None:
        assert_matches(condition(mysql.must_get("sample"), "Degraded"), {"status": "False"})

    eventually(recovered, timeout=mysql.timeouts(90), description="Degraded cleared once restored")
    kept = mysql.child("secret", "sample")
    assert kept is not None and kept["data"] == secret["data"], "the restored password is used as it is"


def test_a_cluster_recreated_over_its_kept_claims_but_pod_0s_serves_no_empty_primary(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    """The documented recovery (re-create over the kept claims) after pod 0's claim was lost: no status
    says the cluster ran, but pod 1's older claim does. Pod 0's new, empty volume is never labelled
    primary (nor replica, which would point it at a source), and the cluster is Degraded naming both
    claims."""
    two = {**MINIMAL, "spec": {**MINIMAL["spec"], "replicas": 2}}
    mysql.create(two, name="kept", skip_final_backup=True)
    mysql.wait_running("kept")

    # A check says "not yet" by raising AssertionError; whatever it returns, None included, is done.
    def pod_0_recorded() -> None:
        assert mysql.must_get("kept")["status"].get("primary") == "kept-mysql-0"

    eventually(pod_0_recorded, timeout=mysql.timeouts(30), description="pod 0 recorded as the primary")
    assert mysql.data_pvcs("kept") == ["data-kept-mysql-0", "data-kept-mysql-1"]
    assert mysql.delete("kept") == 200
    mysql.wait_gone("kept")
    # The garbage collector deletes the StatefulSet after the cluster: one still there would make pod 0's
    # claim again, in the same second as pod 1's (seen in CI), and the test would lose a claim it never lost.
    statefulset = f"apis/apps/v1/namespaces/{mysql.namespace}/statefulsets/kept-mysql"

    def collected() -> None:
        assert mysql.api.get(statefulset) is None, "the StatefulSet is still there"
        assert not mysql.database_pods("kept"), "its pods are still there"

    eventually(
        collected, timeout=mysql.timeouts(60), description="the StatefulSet and its pods garbage-collected"
    )
    claims = f"api/v1/namespaces/{mysql.namespace}/persistentvolumeclaims"
    assert mysql.api.delete(f"{claims}/data-kept-mysql-0") == 200

    def claim_0_gone() -> None:
        assert mysql.data_pvcs("kept") == ["data-kept-mysql-1"]

    eventually(claim_0_gone, timeout=mysql.timeouts(60), description="pod 0's claim gone")

    # A cluster that ran did so for longer than the one second creationTimestamp resolves, which on
    # this plane all of the above may fit in: the re-creation starts in a later second.
    kept = mysql.api.get(f"{claims}/data-kept-mysql-1")["metadata"]["creationTimestamp"]
    made = datetime.fromisoformat(kept.replace("Z", "+00:00"))

    def a_second_later() -> None:
        assert datetime.now(UTC) >= made + timedelta(seconds=1)

    eventually(a_second_later, timeout=mysql.timeouts(5), description="a second later than pod 1's claim")
    mysql.create(two, name="kept", skip_final_backup=True)  # the retained Secret opens the kept data

    def refused() -> None:
        cr = mysql.must_get("kept")
        found = condition(cr, "Degraded")
        assert_matches(found, {"status": "True", "reason": "PrimaryDataReplaced"})
        assert "data-kept-mysql-0" in found["message"] and "data-kept-mysql-1" in found["message"], found
        assert "primary" not in (cr.get("status") or {}), cr["status"]

    eventually(refused, timeout=mysql.timeouts(60), description="Degraded PrimaryDataReplaced")

    def never_primary() -> None:
        assert "primary" not in (mysql.must_get("kept").get("status") or {})
        roles = {
            p["metadata"]["name"]: p["metadata"]["labels"].get(ROLE) for p in mysql.database_pods("kept")
        }
        assert "kept-mysql-0" in roles and roles["kept-mysql-0"] is None, roles  # no role: not made a replica

    consistently(never_primary, duration=mysql.timeouts(3.0), interval=0.5)


def test_a_storage_change_over_an_adopted_statefulset_is_reported_not_retried(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    mysql.create(MINIMAL)
    mysql.wait_running("sample")
    deleting = mysql.api.session.delete(
        mysql.api.url(mysql.path("sample")), json={"propagationPolicy": "Orphan"}, timeout=mysql.timeouts(10)
    )
    assert deleting.status_code == 200, deleting.text[:300]
    mysql.wait_gone("sample", timeout=mysql.timeouts(60))

    # A new cluster of the name, asking for other storage: the CRD's immutability rule cannot see it.
    bigger = {**MINIMAL, "spec": {**MINIMAL["spec"], "storage": {"size": "2Gi"}, "replicas": 2}}
    uid = mysql.create(bigger)["metadata"]["uid"]

    def adopted_and_reported() -> None:
        sts = mysql.child("statefulset", "sample")
        assert sts is not None and (controller_ref(sts) or {}).get("uid") == uid, "not adopted yet"
        assert sts["spec"]["replicas"] == 2, "the rest of the spec converges"
        claim = sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]
        assert claim["storage"] == "1Gi"
        message = degraded_with(mysql, "StorageImmutable")["message"]
        assert "spec.storage" in message and "1Gi" in message, message

    eventually(adopted_and_reported, timeout=mysql.timeouts(60))
    mysql.wait_running("sample")  # both replicas up: the data is safe, only the change is refused
    degraded_with(mysql, "StorageImmutable")
    before = settled_writes(operator.operator, timeout=mysql.timeouts(30))

    def quiet() -> None:
        assert writes(operator.operator) == before, "the operator keeps writing: a 422 loop"

    consistently(quiet, duration=mysql.timeouts(4.0), interval=0.5)


def test_fixed_fields_an_earlier_apply_owned_survive_applies_without_them(
    mysql: MySQLClusters,
    operator: OperatorRunner,
    envtest_context: TestContext,
    cluster: Cluster,
    envtest_operator_factory: Any,
) -> None:
    operator.stop()
    cr = mysql.create(MINIMAL)
    # What the operator wrote before it left fixed fields out: its Secret, and a StatefulSet with
    # every field in its Apply entry.
    secrets = mysql.child_path("secret", "sample").rsplit("/", 1)[0]
    mysql.api.create(secrets, resources.credentials_secret(cr))
    old = resources.statefulset(cr)
    path = mysql.child_path("statefulset", "sample")
    applied = mysql.api.session.patch(
        mysql.api.url(path),
        params={"fieldManager": FIELD_MANAGER, "force": "true"},
        json=old,
        headers={"Content-Type": "application/apply-patch+yaml"},
        timeout=mysql.timeouts(10),
    )
    assert applied.status_code == 201, applied.text[:300]

    successor = envtest_context.start_operator(cluster, mysql.namespace, envtest_operator_factory)
    try:
        mysql.wait_running("sample")
        mysql.patch("sample", {"spec": {"replicas": 2}})

        def scaled_with_fixed_fields_kept() -> None:
            sts = mysql.child("statefulset", "sample")
            assert sts is not None and sts["spec"]["replicas"] == 2
            assert_matches(sts["spec"], {f: old["spec"][f] for f in FIXED if f in old["spec"]})
            entries = {
                e["operation"]: e["fieldsV1"]
                for e in sts["metadata"]["managedFields"]
                if e["manager"] == FIELD_MANAGER and not e.get("subresource")
            }
            assert "f:selector" in entries.get("Update", {}).get("f:spec", {}), entries.keys()
            assert "f:selector" not in entries["Apply"]["f:spec"], "the Apply entry still owns the selector"

        eventually(scaled_with_fixed_fields_kept, timeout=mysql.timeouts(30))
    finally:
        envtest_context.stop_operator(cluster, successor)


@pytest.mark.envtest_local
def test_the_apiserver_refuses_a_delete_whose_uid_is_stale(mysql: MySQLClusters, cluster: Cluster) -> None:
    client = KubeClient(cluster.pykube)
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "probe", "namespace": mysql.namespace},
        "stringData": {"k": "v"},
    }
    first = client.create(Secret, body)
    assert client.delete(Secret, mysql.namespace, "probe", uid=first["metadata"]["uid"]) is True
    second = client.create(Secret, body)
    with pytest.raises(HTTPError) as refused:
        client.delete(Secret, mysql.namespace, "probe", uid=first["metadata"]["uid"])
    assert refused.value.code == 409 and "UID in the precondition" in str(refused.value)
    assert delete_exactly(client, Secret, first) is False, "a namesake is someone else's: not deleted"
    assert client.get(Secret, mysql.namespace, "probe")["metadata"]["uid"] == second["metadata"]["uid"]  # type: ignore[index]
