"""Owner references at work: kube-controller-manager's garbage collector, not the operator, removes
a deleted cluster's children - and keeps its data - under each deletion propagation policy.

Backups are on (so a CronJob and a backup PVC exist) and the final backup is skipped by annotation:
these tests are about what the garbage collector does after the operator lets go.
"""

from __future__ import annotations

from typing import Any

import pytest
from mysqlkit import OWNED, RETAINED, MySQLClusters, sample

from envtest import OperatorRunner, consistently, eventually

FULL = sample("mysqlcluster_full.yaml")
TWO_REPLICAS = {**FULL, "spec": {**FULL["spec"], "replicas": 2}}
HELD = "test.example.com/held"
"""A finalizer of the test's own: the object it is on is not gone until the test removes it."""


def running_with_children(mysql: MySQLClusters, name: str = "sample-full") -> dict[str, Any]:
    mysql.create(TWO_REPLICAS, skip_final_backup=True)
    cr = mysql.wait_running(name)
    for kind in OWNED:
        assert mysql.child(kind, name) is not None, f"no {kind} before the deletion"
    assert mysql.child("backup-pvc", name) is not None
    assert mysql.data_pvcs(name) == [f"data-{name}-mysql-0", f"data-{name}-mysql-1"]
    return cr


def present(mysql: MySQLClusters, name: str) -> list[str]:
    return [kind for kind in OWNED if mysql.child(kind, name) is not None]


def assert_data_retained(mysql: MySQLClusters, name: str = "sample-full") -> None:
    assert mysql.data_pvcs(name) == [f"data-{name}-mysql-0", f"data-{name}-mysql-1"]
    assert mysql.child("backup-pvc", name) is not None, "the backup PVC was deleted"
    secret = mysql.child("secret", name)
    assert secret is not None, "the root password of the kept data was deleted"
    assert (secret["metadata"].get("annotations") or {}).get(RETAINED) == "true"


@pytest.mark.kind_smoke
def test_children_are_collected_and_data_kept(mysql: MySQLClusters, operator: OperatorRunner) -> None:
    running_with_children(mysql)

    assert mysql.delete("sample-full") == 200  # Background, the default for custom resources
    mysql.wait_gone("sample-full", timeout=mysql.timeouts(30))

    def collected() -> None:
        assert present(mysql, "sample-full") == [], "owned children outlived their cluster"

    eventually(collected, timeout=mysql.timeouts(60))
    # The claims have no owner to follow (Retain policy, labels only): nothing ever deletes them.
    consistently(lambda: assert_data_retained(mysql), duration=mysql.timeouts(2.0), interval=0.5)


def test_orphan_deletion_keeps_children_without_owner_reference(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    uid = running_with_children(mysql)["metadata"]["uid"]

    deleting = mysql.api.session.delete(
        mysql.api.url(mysql.path("sample-full")),
        json={"propagationPolicy": "Orphan"},
        timeout=mysql.timeouts(10),
    )
    assert deleting.status_code == 200, deleting.text[:300]
    assert "orphan" in deleting.json()["metadata"]["finalizers"]
    mysql.wait_gone("sample-full", timeout=mysql.timeouts(60))

    # The garbage collector strips the references before it drops its `orphan` finalizer, so by the
    # time the cluster is gone no child may still point at it.
    for kind in OWNED:
        child = mysql.child(kind, "sample-full")
        assert child is not None, f"{kind} was deleted despite propagationPolicy=Orphan"
        refs = child["metadata"].get("ownerReferences") or []
        assert all(r["uid"] != uid for r in refs), f"{kind} still refers to the deleted cluster: {refs}"

    def all_kept() -> None:
        assert present(mysql, "sample-full") == list(OWNED), "the garbage collector took an orphan"

    consistently(all_kept, duration=mysql.timeouts(2.0), interval=0.5)
    assert_data_retained(mysql)


def test_foreground_deletion_removes_children_before_the_cluster(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    running_with_children(mysql)
    # One child is held by a finalizer of the test's, so the wait is seen whatever the garbage
    # collector's pace (unheld, all of it can be over before a first look).
    held = mysql.child_path("service", "sample-full")
    mysql.api.patch(held, {"metadata": {"finalizers": [HELD]}})
    try:
        deleting = mysql.api.session.delete(
            mysql.api.url(mysql.path("sample-full")),
            json={"propagationPolicy": "Foreground"},
            timeout=mysql.timeouts(10),
        )
        assert deleting.status_code == 200, deleting.text[:300]
        assert "foregroundDeletion" in deleting.json()["metadata"]["finalizers"]

        # What happens: the operator removes its own finalizer at once (no final backup wanted), but
        # the apiserver's `foregroundDeletion` finalizer stays until the garbage collector has deleted
        # every dependent whose ownerReference has blockOwnerDeletion=true - all four of ours. The
        # StatefulSet is itself deleted in the foreground, so its pods go first. So while the cluster
        # is visible at least one child is still being deleted, and once it is gone none is left.
        def waiting_for_the_held_child() -> None:
            cr, child = mysql.get("sample-full"), mysql.child("service", "sample-full")
            assert cr is not None, "the cluster went while a child of it was still there"
            assert child is not None and child["metadata"].get("deletionTimestamp"), "not deleting it yet"

        eventually(waiting_for_the_held_child, timeout=mysql.timeouts(60), interval=0.1)
    finally:
        mysql.api.patch(held, {"metadata": {"finalizers": None}})

    def cluster_gone_last() -> None:
        cr = mysql.get("sample-full")
        left = present(mysql, "sample-full")
        if cr is not None:
            raise AssertionError(f"cluster still there, waiting for {left}")
        assert left == [], f"the cluster went before its children: {left} still present"

    eventually(cluster_gone_last, timeout=mysql.timeouts(60), interval=0.1)
    assert_data_retained(mysql)
    assert mysql.database_pods("sample-full") == [], "the StatefulSet's pods outlived the cluster"
