"""Deleting a MySQLCluster: the finalizer holds it until its final backup has succeeded.

Job pods are held Running on this control plane (`envtest_job_pods = hold`): kwok runs no container,
so each test decides how the final backup ends by writing the pod's status as a kubelet would.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from mysqlkit import FINALIZER, SKIP_FINAL_BACKUP, MySQLClusters, sample

from envtest import OperatorRunner, assert_matches, condition, consistently, eventually
from envtest.clusters import Cluster
from envtest.plugin.context import TestContext
from mysql_operator.controller.children import resources

# kwok-driven pods, private planes or local binaries: skipped on other backends.
pytestmark = pytest.mark.envtest_local

MINIMAL = sample("mysqlcluster_minimal.yaml")
FULL = sample("mysqlcluster_full.yaml")
# One replica is all a final backup needs (it archives pod 0's volume), and it converges fastest.
BACKED_UP = {**FULL, "spec": {**FULL["spec"], "replicas": 1}}


def assert_held(mysql: MySQLClusters, name: str) -> dict[str, Any]:
    """Deleted, but still there because of our finalizer."""
    cr = mysql.must_get(name)
    assert_matches(cr, {"metadata": {"deletionTimestamp": str, "finalizers": [FINALIZER]}})
    return cr


def test_cluster_without_backups_is_deleted_promptly(mysql: MySQLClusters, operator: OperatorRunner) -> None:
    mysql.create(MINIMAL)
    mysql.wait_running("sample")

    assert mysql.delete("sample") == 200

    mysql.wait_gone("sample", timeout=mysql.timeouts(30))
    assert mysql.child("job", "sample") is None, "a final backup ran although backups are off"


def test_deletion_waits_for_the_final_backup_to_succeed(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    mysql.create(BACKED_UP)
    mysql.wait_running("sample-full")

    assert mysql.delete("sample-full") == 200
    pod = mysql.final_backup_pod("sample-full")

    def terminating() -> None:
        assert_matches(assert_held(mysql, "sample-full"), {"status": {"phase": "Terminating"}})

    eventually(terminating, timeout=mysql.timeouts(30))
    # The Job archives this cluster's primary volume, read-only, into the backup PVC.
    uid = mysql.must_get("sample-full")["metadata"]["uid"]
    data = {"claimName": "data-sample-full-mysql-0", "readOnly": True}
    volumes = [
        {"persistentVolumeClaim": data},
        {"persistentVolumeClaim": {"claimName": "sample-full-backup"}},
    ]
    assert_matches(
        mysql.child("job", "sample-full"),
        {
            "metadata": {"annotations": {"db.example.com/cluster-uid": uid}},
            "spec": {"template": {"spec": {"volumes": volumes}}},
        },
    )
    # Longer than the operator's 5 s poll of the Job: it looked, and it kept waiting.
    consistently(lambda: assert_held(mysql, "sample-full"), duration=mysql.timeouts(6.0), interval=0.5)

    mysql.finish_pod(pod, succeeded=True)

    mysql.wait_gone("sample-full", timeout=mysql.timeouts(60))

    # Success was recorded in the cluster's status before the finalizer came off; the Job is left to
    # the TTL controller, so a retried deletion step could never start a second archive.
    job = mysql.child("job", "sample-full")
    assert job is not None, "the succeeded Job must outlive the finalizer"
    assert job["spec"]["ttlSecondsAfterFinished"] >= 3600
    assert mysql.data_pvcs("sample-full") == ["data-sample-full-mysql-0"], "data must survive deletion"
    assert mysql.child("secret", "sample-full") is not None, "its password must survive too"
    assert mysql.child("backup-pvc", "sample-full") is not None, "the backup PVC must survive deletion"


def test_failed_final_backup_is_reported_and_holds_the_cluster(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    mysql.create(BACKED_UP)
    mysql.wait_running("sample-full")
    assert mysql.delete("sample-full") == 200
    first = mysql.final_backup_pod("sample-full")

    mysql.finish_pod(first, succeeded=False, said="archive: tar exited 1\n")

    def degraded() -> None:
        cr = assert_held(mysql, "sample-full")
        assert_matches(
            condition(cr, "Degraded"),
            {
                "status": "True",
                "reason": "FinalBackupFailed",
                "message": re.compile(".*sample-full-final-backup.*"),
            },
        )

    retry = mysql.final_backup_pod("sample-full", timeout=mysql.timeouts(60))
    assert retry["metadata"]["uid"] != first["metadata"]["uid"], "no new pod: the backup was not retried"

    def last_words_told() -> None:
        # The failed pod's last words, read before its Job was deleted for the retry.
        said = [e["message"] for e in mysql.events("sample-full") if e["reason"] == "FinalBackupFailed"]
        assert any(m.endswith("its pod said: archive: tar exited 1") for m in said), said

    eventually(last_words_told, timeout=mysql.timeouts(10), description="a FinalBackupFailed Event")
    # The failure stays reported while the retry runs - across more than one 5 s look at its Job.
    consistently(degraded, duration=mysql.timeouts(6.0), interval=0.5)

    # The way out the operator offers when a backup cannot succeed.
    mysql.patch("sample-full", {"metadata": {"annotations": {SKIP_FINAL_BACKUP: "true"}}})
    mysql.wait_gone("sample-full", timeout=mysql.timeouts(60))


def test_a_backup_volume_that_never_binds_is_named_while_the_deletion_waits(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    """The backup claim exists (labelled ours, so taken as ours) in a class nothing provisions: the
    final backup's pod can never be scheduled, and the cluster says so, naming the claim."""
    mysql.api.create(
        f"api/v1/namespaces/{mysql.namespace}/persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "sample-full-backup", "labels": resources.labels("sample-full")},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "nothing-provisions-this",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    mysql.create(BACKED_UP)
    mysql.wait_running("sample-full")
    assert mysql.delete("sample-full") == 200

    def blocked() -> None:
        cr = assert_held(mysql, "sample-full")
        assert_matches(
            condition(cr, "Degraded"),
            {
                "status": "True",
                "reason": "FinalBackupBlocked",
                "message": re.compile(
                    ".*cannot be scheduled.*PersistentVolumeClaim sample-full-backup "
                    r"\(nothing-provisions-this\) is not bound.*"
                ),
            },
        )

    eventually(blocked, timeout=mysql.timeouts(60), description="the unbound backup claim named")
    mysql.patch("sample-full", {"metadata": {"annotations": {SKIP_FINAL_BACKUP: "true"}}})
    mysql.wait_gone("sample-full", timeout=mysql.timeouts(60))


def test_skip_annotation_deletes_without_a_final_backup(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    mysql.create(BACKED_UP, skip_final_backup=True)
    mysql.wait_running("sample-full")
    assert mysql.data_pvcs("sample-full"), "no data volume: the skip would be trivial"

    assert mysql.delete("sample-full") == 200

    mysql.wait_gone("sample-full", timeout=mysql.timeouts(30))
    assert mysql.child("job", "sample-full") is None
    reasons = {e["reason"] for e in mysql.events("sample-full")}
    assert "FinalBackupStarted" not in reasons, reasons


def test_deletion_while_operator_is_down_completes_when_it_returns(
    mysql: MySQLClusters,
    operator: OperatorRunner,
    envtest_context: TestContext,
    cluster: Cluster,
    envtest_operator_factory: Any,
) -> None:
    mysql.create(MINIMAL)
    mysql.wait_running("sample")
    operator.stop()

    assert mysql.delete("sample") == 200

    consistently(lambda: assert_held(mysql, "sample"), duration=mysql.timeouts(3.0), interval=0.5)
    successor = envtest_context.start_operator(cluster, mysql.namespace, envtest_operator_factory)
    try:
        mysql.wait_gone("sample", timeout=mysql.timeouts(30))
    finally:
        envtest_context.stop_operator(cluster, successor)
