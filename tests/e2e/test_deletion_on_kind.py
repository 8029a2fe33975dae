"""Deleting a cluster on a real kubelet ends, even when its pods never stop on their own or its final
backup can never be written.

kind only (a kubelet runs the server and the archive). Both clusters have backups enabled, so their
deletion goes through the finalizer: scale to 0, wait for the pods, archive pod 0's data volume.

* Unready pods: with OrderedReady the StatefulSet controller deletes pods highest ordinal first and
  refuses while a lower one is unready. Replication stopped on pods 1 and 2 makes both unready, so
  the scale to 0 stalls for good; the operator deletes the pods itself once their grace period plus
  its margin has passed (a Warning Event ForcedPodDeletion), and the final backup then runs.
* A backup target that is full: the backup PVC is created by the test before the cluster (labelled
  as the operator's, so it is taken as ours) on a hostPath PV backed by a 64 KiB tmpfs mounted in the
  kind node, so the archive's tar hits ENOSPC for real. The failures back off, show in status and
  Events, and the documented skip annotation lets the deletion finish.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import kubernetes
import pytest
from dbkit import STOP, Sql, manifest, readiness_is, wait_all_ready
from mysqlkit import SKIP_FINAL_BACKUP, MySQLClusters, Timeouts

from envtest import OperatorRunner, eventually

pytestmark = [pytest.mark.real_database, pytest.mark.usefixtures("kind_only")]

LABELS = {"app.kubernetes.io/name": "mysql", "app.kubernetes.io/managed-by": "mysql-operator"}
"""With `app.kubernetes.io/instance=<cluster>`: what makes a label-only child the operator's."""


def warnings(mysql: MySQLClusters, cluster: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in mysql.events(cluster) if e.get("type") == "Warning" and e.get("reason") == reason]


def occurrences(events: list[dict[str, Any]]) -> int:
    return sum(int(e.get("count") or 1) for e in events)


def test_a_cluster_whose_pods_stay_unready_is_deleted_within_a_bound(
    mysql: MySQLClusters, operator: OperatorRunner, core: kubernetes.client.CoreV1Api, timeouts: Timeouts
) -> None:
    mysql.create(manifest("unready", 3, backup={"enabled": True}))
    wait_all_ready(mysql, "unready", 3, timeouts)
    sql = Sql(core, mysql.namespace, timeouts)
    for pod in ("unready-mysql-1", "unready-mysql-2"):
        sql.ok(pod, STOP)  # the readiness probe wants both replication threads running
    for pod in ("unready-mysql-1", "unready-mysql-2"):
        eventually(
            lambda pod=pod: readiness_is(mysql, pod, False),
            timeout=timeouts(60),
            description=f"{pod} unready",
        )

    assert mysql.delete("unready") == 200

    def stalled() -> None:
        sts = mysql.child("statefulset", "unready")
        assert sts is not None and sts["spec"]["replicas"] == 0, "not scaled to 0 yet"
        record = (mysql.must_get("unready").get("status") or {}).get("finalBackup") or {}
        assert record.get("phase") == "Stopping" and record.get("stoppingSince"), record

    eventually(stalled, timeout=timeouts(30), description="scaled to 0, stopping recorded")
    # The controller deletes unready-mysql-2 only once unready-mysql-1 is ready again: never.
    assert len(mysql.database_pods("unready")) == 3
    # Bound: 120 s grace + 30 s margin, then the pods' own shutdown and the archive.
    mysql.wait_gone("unready", timeout=timeouts(60))

    (forced,) = warnings(mysql, "unready", "ForcedPodDeletion")
    for pod in ("unready-mysql-0", "unready-mysql-1", "unready-mysql-2"):
        assert pod in forced["message"], forced["message"]
    reasons = {e["reason"] for e in mysql.events("unready")}
    assert "FinalBackupSucceeded" in reasons, f"the archive ran after the forced stop: {sorted(reasons)}"


@pytest.fixture
def full_volume(mysql: MySQLClusters, cluster: Any) -> Iterator[str]:
    """A PV on a 64 KiB tmpfs in the (only) kind node, bound by the cluster-to-be's backup PVC
    `full-backup`, which carries the operator's labels. Yields the PV's name."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("needs docker to mount a tmpfs in the kind node")
    nodes = [n["metadata"]["name"] for n in mysql.api.items("api/v1/nodes")]
    if len(nodes) != 1:
        pytest.skip(f"the hostPath PV needs the data volume on the same node; nodes: {nodes}")
    (node,) = nodes
    path = f"/mnt/envtest-full-{mysql.namespace}"
    node_sh = [docker, "exec", node, "sh", "-c"]
    subprocess.run(
        [*node_sh, f"mkdir -p {path} && mount -t tmpfs -o size=64k envtest-full {path}"],
        check=True,
        capture_output=True,
        timeout=mysql.timeouts(10),
    )
    pv = f"envtest-full-{mysql.namespace}"
    mysql.api.create(
        "api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "1Gi"},  # the claim's size; the tmpfs holds 64 KiB
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "claimRef": {"namespace": mysql.namespace, "name": "full-backup"},
                "hostPath": {"path": path, "type": "Directory"},
            },
        },
    )
    mysql.api.create(
        f"api/v1/namespaces/{mysql.namespace}/persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "full-backup", "labels": {**LABELS, "app.kubernetes.io/instance": "full"}},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "volumeName": pv,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    try:
        yield pv
    finally:
        mysql.api.delete(f"api/v1/persistentvolumes/{pv}")  # goes once the namespace's claim does
        subprocess.run([*node_sh, f"umount {path}; rmdir {path}"], check=False, timeout=mysql.timeouts(10))


def test_a_final_backup_that_cannot_be_written_backs_off_and_the_skip_ends_the_deletion(
    mysql: MySQLClusters, operator: OperatorRunner, full_volume: str, timeouts: Timeouts
) -> None:
    mysql.create(manifest("full", 1, backup={"enabled": True}))
    wait_all_ready(mysql, "full", 1, timeouts)
    claim = mysql.child("backup-pvc", "full")
    assert claim is not None and claim["spec"]["volumeName"] == full_volume, "the test's claim, kept"

    assert mysql.delete("full") == 200
    failures: dict[int, datetime] = {}

    def failing_with_backoff() -> None:
        record = (mysql.must_get("full").get("status") or {}).get("finalBackup") or {}
        if record.get("lastFailureTime"):
            when = datetime.fromisoformat(record["lastFailureTime"].replace("Z", "+00:00"))
            failures.setdefault(int(record["attempts"]), when)
        assert {1, 2, 3} <= failures.keys(), f"failures seen so far: {failures}; record: {record}"

    eventually(failing_with_backoff, timeout=timeouts(60), interval=1, description="three failed attempts")
    first, second, third = failures[1], failures[2], failures[3]
    gaps = [(second - first).total_seconds(), (third - second).total_seconds()]
    # Each retry waits at least its backoff (10 s, then 20 s) after the failure before it; how much
    # longer (a Job's pod to schedule and run) is the machine's business, not a property.
    assert gaps[0] >= 10 and gaps[1] >= 20, f"a retry came before its backoff: {gaps} s after each failure"
    failed = warnings(mysql, "full", "FinalBackupFailed")
    assert occurrences(failed) >= 2
    # The archive's own words, kept by the operator from its failed pod before deleting the Job.
    said = [e["message"] for e in failed]
    assert any("its pod said:" in m and "No space left on device" in m for m in said), said
    cr = mysql.must_get("full")
    assert cr["metadata"]["finalizers"] and cr["status"]["finalBackup"]["phase"] in ("Failed", "Running")

    mysql.patch("full", {"metadata": {"annotations": {SKIP_FINAL_BACKUP: "true"}}})
    mysql.wait_gone("full", timeout=timeouts(30))
