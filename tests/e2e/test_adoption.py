"""Same-named objects that are not ours are never taken over; orphans of ours are; the credentials
Secret is retained with the data and reused by a cluster re-created under the same name."""

from __future__ import annotations

import base64
from typing import Any

from mysqlkit import RETAINED, MySQLClusters, controller_ref, sample

from envtest import OperatorRunner, assert_matches, condition, consistently, eventually
from mysql_operator.controller.children import resources

MINIMAL = sample("mysqlcluster_minimal.yaml")

FOREIGN_LABELS = {"app": "someone-elses"}
FOREIGN_STATEFULSET = {
    "apiVersion": "apps/v1",
    "kind": "StatefulSet",
    "metadata": {"name": "sample-mysql", "labels": FOREIGN_LABELS},
    "spec": {
        "replicas": 1,
        "serviceName": "theirs",
        "selector": {"matchLabels": FOREIGN_LABELS},
        "template": {
            "metadata": {"labels": FOREIGN_LABELS},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
        },
    },
}


def conflict_reported(mysql: MySQLClusters, name: str, message: str) -> None:
    def reported() -> None:
        cr = mysql.must_get(name)
        assert_matches(condition(cr, "Degraded"), {"status": "True", "reason": "ChildConflict"})
        assert message in condition(cr, "Degraded")["message"]
        warnings = [
            e for e in mysql.events(name) if e["type"] == "Warning" and e["reason"] == "ChildConflict"
        ]
        assert any(message in e["message"] for e in warnings), [e["message"] for e in mysql.events(name)]

    eventually(
        reported, timeout=mysql.timeouts(30), description="ChildConflict in status and as a Warning Event"
    )


def untouched(before: dict[str, Any], after: dict[str, Any] | None) -> None:
    assert after is not None, "the foreign object was deleted"
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["metadata"].get("ownerReferences") == before["metadata"].get("ownerReferences")
    assert after["metadata"].get("labels") == before["metadata"].get("labels")
    assert after["spec"] == before["spec"], "the foreign object was rewritten"


def test_foreign_statefulset_of_the_same_name_is_a_conflict_and_survives_the_cluster(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    path = f"apis/apps/v1/namespaces/{mysql.namespace}/statefulsets"
    theirs = mysql.api.create(path, FOREIGN_STATEFULSET)

    mysql.create(MINIMAL)

    conflict_reported(mysql, "sample", "StatefulSet sample-mysql exists and is not ours")
    consistently(
        lambda: untouched(theirs, mysql.child("statefulset", "sample")),
        duration=mysql.timeouts(3.0),
        interval=0.5,
    )
    assert mysql.child("service", "sample") is not None, "the other children still converge"

    assert mysql.delete("sample") == 200
    mysql.wait_gone("sample", timeout=mysql.timeouts(30))
    # Had we adopted it, the garbage collector would now delete it with the cluster.
    consistently(
        lambda: untouched(theirs, mysql.child("statefulset", "sample")),
        duration=mysql.timeouts(3.0),
        interval=0.5,
    )


def test_foreign_service_selector_is_never_rewritten(mysql: MySQLClusters, operator: OperatorRunner) -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "sample-headless", "labels": FOREIGN_LABELS},
        "spec": {"clusterIP": "None", "selector": FOREIGN_LABELS, "ports": [{"port": 80}]},
    }
    theirs = mysql.api.create(f"api/v1/namespaces/{mysql.namespace}/services", service)

    mysql.create(MINIMAL)

    conflict_reported(mysql, "sample", "Service sample-headless exists and is not ours")
    consistently(
        lambda: untouched(theirs, mysql.child("service", "sample")),
        duration=mysql.timeouts(3.0),
        interval=0.5,
    )


def test_foreign_secret_is_a_conflict_and_no_pod_runs_on_it(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "sample-credentials"},
        "stringData": {"root-password": "known-to-its-author"},
    }
    mysql.api.create(f"api/v1/namespaces/{mysql.namespace}/secrets", secret)

    mysql.create(MINIMAL)

    conflict_reported(mysql, "sample", "Secret sample-credentials exists and is not a credentials Secret")

    def no_pods_on_a_foreign_password() -> None:
        assert mysql.child("statefulset", "sample") is None, "a StatefulSet reads someone else's Secret"

    consistently(no_pods_on_a_foreign_password, duration=mysql.timeouts(3.0), interval=0.5)


def password(mysql: MySQLClusters, name: str) -> tuple[str, str]:
    secret = mysql.child("secret", name)
    assert secret is not None, "no credentials Secret"
    return secret["metadata"]["uid"], base64.b64decode(secret["data"]["root-password"]).decode()


def test_recreated_cluster_reuses_the_retained_password(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    mysql.create(MINIMAL)
    mysql.wait_running("sample")
    first = password(mysql, "sample")

    assert mysql.delete("sample") == 200
    mysql.wait_gone("sample", timeout=mysql.timeouts(30))

    def children_collected() -> None:
        assert mysql.child("statefulset", "sample") is None, "StatefulSet not collected yet"

    eventually(children_collected, timeout=mysql.timeouts(60))
    kept = mysql.child("secret", "sample")
    assert kept is not None and "ownerReferences" not in kept["metadata"]
    assert kept["metadata"]["annotations"][RETAINED] == "true"
    assert mysql.data_pvcs("sample") == ["data-sample-mysql-0"], "the data it unlocks is kept too"

    mysql.create(MINIMAL)
    cr = mysql.wait_running("sample")

    assert password(mysql, "sample") == first, "the kept datadir only knows the old password"
    secret = mysql.child("secret", "sample")
    assert secret is not None and "ownerReferences" not in secret["metadata"], "reused, not adopted"
    sts = mysql.child("statefulset", "sample")
    assert sts is not None and controller_ref(sts)["uid"] == cr["metadata"]["uid"]  # type: ignore[index]


def test_orphans_of_an_earlier_cluster_are_adopted_by_its_successor(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    mysql.create(MINIMAL)
    old_uid = mysql.wait_running("sample")["metadata"]["uid"]
    before = {kind: mysql.child(kind, "sample") for kind in ("statefulset", "service", "primary-service")}
    deleting = mysql.api.session.delete(
        mysql.api.url(mysql.path("sample")), json={"propagationPolicy": "Orphan"}, timeout=mysql.timeouts(10)
    )
    assert deleting.status_code == 200, deleting.text[:300]
    mysql.wait_gone("sample", timeout=mysql.timeouts(60))

    new_uid = mysql.create(MINIMAL)["metadata"]["uid"]
    mysql.wait_running("sample")

    def adopted() -> None:
        for kind, old in before.items():
            child = mysql.child(kind, "sample")
            assert child is not None and old is not None
            assert child["metadata"]["uid"] == old["metadata"]["uid"], f"{kind} was replaced, not adopted"
            ref = controller_ref(child)
            assert ref is not None and ref["uid"] == new_uid != old_uid, f"{kind}: {ref}"

    eventually(adopted, timeout=mysql.timeouts(30))


def test_a_credentials_secret_an_older_operator_owned_is_made_retained(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    """Before the retained Secret, the operator made the credentials Secret with its controller
    reference, so deleting the cluster would have collected the password its kept datadir needs. The
    upgraded operator drops that reference and marks the Secret retained (a patch of the Secret)."""
    cr = mysql.create(MINIMAL)
    mysql.wait_running("sample")
    # As an older operator left it: owned by the cluster, no retained mark.
    mysql.api.patch(
        mysql.child_path("secret", "sample"),
        {"metadata": {"ownerReferences": [resources.owner_reference(cr)], "annotations": {RETAINED: None}}},
    )

    def retained() -> None:
        secret = mysql.child("secret", "sample")
        assert secret is not None, "the Secret was deleted"
        assert "ownerReferences" not in secret["metadata"], secret["metadata"].get("ownerReferences")
        assert (secret["metadata"].get("annotations") or {}).get(RETAINED) == "true"

    eventually(retained, timeout=mysql.timeouts(30), description="the Secret made retained")

    def told() -> None:
        # The operator's Events are sent by their own thread, after the patch.
        assert any(e["reason"] == "Retained" for e in mysql.events("sample")), "a Normal Event says so"

    eventually(told, timeout=mysql.timeouts(10), description="a Retained Event")
