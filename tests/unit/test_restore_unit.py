"""Restore from a final backup (`spec.restore`) and backups at size: the builders, and what the
reconciler does for a restoring cluster (credentials copied, a missing source reported, Restored once)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from operator_fakes import FakeKube, RecordingEvents, cluster, database_pod
from pydantic import ValidationError

from mysql_operator.api import conversion
from mysql_operator.api.v1 import parse_spec
from mysql_operator.controller.backupjob import data_node_affinity
from mysql_operator.controller.children import backups, resources
from mysql_operator.controller.kinds import (
    MySQLCluster,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    Secret,
    StatefulSet,
)
from mysql_operator.controller.reconciler import (
    RESTORE_FAILED,
    RESTORE_SOURCE_MISSING,
    MySQLClusterReconciler,
)
from mysql_operator.controller.status import DEGRADED, condition
from mysql_operator.database import backup
from mysql_operator.runtime.types import Key

KEY = Key("ns/db")
RESTORE = {"fromCluster": "old"}


def live(**spec: Any) -> dict[str, Any]:
    obj = cluster(**spec)
    obj["metadata"] |= {"uid": "uid-1", "resourceVersion": "7", "generation": 1}
    return obj


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return resources.statefulset(obj)["spec"]["template"]["spec"]  # type: ignore[no-any-return]


# -- builders -------------------------------------------------------------------------------------


def test_a_restoring_cluster_unpacks_before_configure_from_the_source_backup_pvc_read_only() -> None:
    spec = pod_spec(live(replicas=2, restore=RESTORE))
    assert [c["name"] for c in spec["initContainers"]] == ["restore", "configure"]
    restore = spec["initContainers"][0]
    assert restore["command"] == ["sh", "-c", backup.RESTORE_SCRIPT]
    assert {"name": "restore", "mountPath": "/restore", "readOnly": True} in restore["volumeMounts"]
    assert {"name": "data", "mountPath": "/var/lib/mysql"} in restore["volumeMounts"]
    volume = {"name": "restore", "persistentVolumeClaim": {"claimName": "old-backup", "readOnly": True}}
    assert volume in spec["volumes"]
    assert {"name": "SOURCE_PVC", "value": "old-backup"} in restore["env"]
    # The failure's words reach the pod's status, where `kubectl describe` and the operator read them.
    assert restore["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_a_cluster_without_restore_has_no_restore_container_or_volume() -> None:
    spec = pod_spec(live())
    assert [c["name"] for c in spec["initContainers"]] == ["configure"]
    assert all(v["name"] != "restore" for v in spec["volumes"])


def test_an_interrupted_unpacking_is_started_again_not_taken_for_a_restore() -> None:
    # Runs of the script (pod 0 only, empty datadirs only, once): tests/unit/test_backup_scripts.py.
    script = backup.RESTORE_SCRIPT
    # An interrupted unpacking is started again from scratch, not taken for a restored datadir.
    assert script.index('touch "$incomplete"') < script.index("tar -xf") < script.index('rm "$incomplete"')


def test_restore_is_a_dns_name_of_a_cluster() -> None:
    with pytest.raises(ValidationError, match="fromCluster"):
        parse_spec(cluster(restore={"fromCluster": "Not_A_Name"}))


def test_the_credentials_of_a_restore_are_the_source_keys_as_they_are() -> None:
    source = {"data": {"root-password": "cm9vdA==", "replication-password": "cmVwbA=="}}
    secret = resources.credentials_secret(live(restore=RESTORE), copied_from=source)
    assert secret["data"] == source["data"]
    assert "stringData" not in secret


def test_a_key_the_source_secret_lacks_is_generated() -> None:
    secret = resources.credentials_secret(
        live(restore=RESTORE), copied_from={"data": {"root-password": "cm9vdA=="}}
    )
    assert secret["data"] == {"root-password": "cm9vdA=="}
    assert set(secret["stringData"]) == {"replication-password"}


def test_backup_volume_holds_the_archives_kept_and_the_retained_dumps() -> None:
    # 2Gi * (2 + (7 + 1) / 2) = 12Gi; 1Gi * (2 + (1 + 1) / 2) = 3Gi
    seven = live(storage={"size": "2Gi"}, backup={"enabled": True})
    one = live(storage={"size": "1Gi"}, backup={"enabled": True, "retentionDays": 1})
    assert backups.backup_pvc(seven)["spec"]["resources"]["requests"]["storage"] == f"{12 * 1024}Mi"
    assert backups.backup_pvc(one)["spec"]["resources"]["requests"]["storage"] == f"{3 * 1024}Mi"


def test_final_backup_deadline_grows_with_the_data_volume() -> None:
    small = backups.final_backup_job(live(storage={"size": "1Gi"}))["spec"]["activeDeadlineSeconds"]
    large = backups.final_backup_job(live(storage={"size": "100Gi"}))["spec"]["activeDeadlineSeconds"]
    floor, rate = backups.FINAL_BACKUP_DEADLINE_FLOOR_SECONDS, backups.FINAL_BACKUP_MIN_BYTES_PER_SECOND
    assert (floor, rate) == (600, 5 * 2**20)
    assert small == 600 + 205  # 1 GiB at 5 MiB/s: 204.8 s, rounded up
    assert large == 600 + 20480


def test_archive_and_dump_stream_through_gzip_and_prune_their_own_partials_first() -> None:
    archive, dump = backup.ARCHIVE_SCRIPT, backup.DUMP_SCRIPT
    assert '{ tar -cf - -C /var/lib/mysql . || echo "$?" > "$failed"; } | gzip -1' in archive
    assert archive.index("-name '.final-*'") < archive.index("tar -cf")
    assert dump.index("-name '.dump-*'") < dump.index('"$DUMP"')
    # No pipefail in dash: the dump's own status is carried out of the pipeline in a file.
    assert '|| echo "$?" > "$failed"; } | gzip -1' in dump and 'if [ -e "$failed" ]' in dump


def test_final_backup_job_is_pinned_where_the_data_volume_is() -> None:
    required = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}
        ]
    }
    job = backups.final_backup_job(live(), required)
    affinity = job["spec"]["template"]["spec"]["affinity"]
    assert affinity == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    assert "affinity" not in backups.final_backup_job(live())["spec"]["template"]["spec"]


def test_dump_pods_prefer_the_primarys_node_then_its_zone() -> None:
    spec = backups.backup_cronjob(live(backup={"enabled": True}))["spec"]["jobTemplate"]["spec"]["template"]
    terms = spec["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    keys = [(t["weight"], t["podAffinityTerm"]["topologyKey"]) for t in terms]
    assert keys == [(100, "kubernetes.io/hostname"), (50, "topology.kubernetes.io/zone")]
    selector = terms[0]["podAffinityTerm"]["labelSelector"]
    assert selector == {
        "matchLabels": {**resources.pod_labels("db", "database"), "db.example.com/role": "primary"}
    }


def test_v1alpha1_keeps_restore_in_its_annotation_and_gives_it_back() -> None:
    hub = {
        "apiVersion": "db.example.com/v1",
        "kind": "MySQLCluster",
        "metadata": {"name": "db"},
        "spec": {
            "engine": "mysql",
            "version": "8.4",
            "replicas": 1,
            "storage": {"size": "1Gi"},
            "restore": RESTORE,
        },
    }
    spoke = conversion.convert(hub, "db.example.com/v1alpha1")
    assert "restore" not in spoke["spec"]
    assert '"restore":{"fromCluster":"old"}' in spoke["metadata"]["annotations"][conversion.FIELDS_ANNOTATION]
    assert conversion.convert(spoke, "db.example.com/v1") == hub


# -- the reconciler -------------------------------------------------------------------------------


def source_secret(kube: FakeKube) -> dict[str, str]:
    data = {
        k: base64.b64encode(v.encode()).decode()
        for k, v in {"root-password": "r", "replication-password": "p"}.items()
    }
    kube.put(Secret, {"metadata": {"name": "old-credentials", "namespace": "ns"}, "data": data})
    return data


def source_backup(kube: FakeKube) -> None:
    kube.put(PersistentVolumeClaim, {"metadata": {"name": "old-backup", "namespace": "ns"}, "spec": {}})


def degraded(kube: FakeKube) -> dict[str, Any]:
    obj = kube.peek(MySQLCluster, "ns", "db")
    found = condition((obj or {}).get("status"), DEGRADED)
    assert found is not None
    return found


def test_a_restoring_cluster_gets_a_copy_of_the_source_credentials(
    kube: FakeKube, reconciler: MySQLClusterReconciler
) -> None:
    data = source_secret(kube)
    source_backup(kube)
    kube.put(MySQLCluster, cluster(restore=RESTORE))
    reconciler.reconcile(KEY)
    secret = kube.peek(Secret, "ns", "db-credentials")
    assert secret is not None and secret["data"] == data
    assert kube.peek(StatefulSet, "ns", "db-mysql") is not None


def test_without_the_source_secret_nothing_starts_and_the_cluster_says_which_secret(
    kube: FakeKube, reconciler: MySQLClusterReconciler, events: RecordingEvents
) -> None:
    source_backup(kube)
    kube.put(MySQLCluster, cluster(restore=RESTORE))
    reconciler.reconcile(KEY)
    assert kube.peek(Secret, "ns", "db-credentials") is None
    assert kube.peek(StatefulSet, "ns", "db-mysql") is None
    found = degraded(kube)
    assert found["status"] == "True" and found["reason"] == RESTORE_SOURCE_MISSING
    assert "old-credentials" in found["message"]
    assert [e for e in events.events if e[0] == "Warning" and "old-credentials" in e[2]]


def test_a_missing_source_backup_pvc_is_reported_by_name(
    kube: FakeKube, reconciler: MySQLClusterReconciler, events: RecordingEvents
) -> None:
    source_secret(kube)
    kube.put(MySQLCluster, cluster(restore=RESTORE))
    reconciler.reconcile(KEY)
    found = degraded(kube)
    assert found["reason"] == RESTORE_SOURCE_MISSING and "old-backup" in found["message"]
    assert [e for e in events.events if e[0] == "Warning" and "old-backup" in e[2]]


def test_a_failed_restore_container_is_reported_with_its_message(
    kube: FakeKube, reconciler: MySQLClusterReconciler
) -> None:
    source_secret(kube)
    source_backup(kube)
    kube.put(MySQLCluster, cluster(restore=RESTORE))
    reconciler.reconcile(KEY)
    terminated = {"exitCode": 1, "message": "restore: no final-*.tar.gz in PersistentVolumeClaim old-backup"}
    restore = {"name": "restore", "lastState": {"terminated": terminated}}
    kube.put(Pod, database_pod(status={"initContainerStatuses": [restore]}))
    reconciler.reconcile(KEY)
    found = degraded(kube)
    assert found["reason"] == RESTORE_FAILED and "no final-*.tar.gz" in found["message"]


def test_restored_is_recorded_and_announced_once_pod_0_is_ready(
    kube: FakeKube, reconciler: MySQLClusterReconciler, events: RecordingEvents
) -> None:
    source_secret(kube)
    source_backup(kube)
    kube.put(MySQLCluster, cluster(restore=RESTORE))
    reconciler.reconcile(KEY)
    assert "restoredFrom" not in (kube.peek(MySQLCluster, "ns", "db") or {}).get("status", {})
    kube.set_status(StatefulSet, "ns", "db-mysql", {"readyReplicas": 1})
    reconciler.reconcile(KEY)
    reconciler.reconcile(KEY)
    status = (kube.peek(MySQLCluster, "ns", "db") or {})["status"]
    assert status["restoredFrom"] == "old"
    assert [e[1] for e in events.events].count("Restored") == 1


def test_a_restore_that_fell_back_to_an_older_archive_says_so_in_a_warning(
    kube: FakeKube, reconciler: MySQLClusterReconciler, events: RecordingEvents
) -> None:
    source_secret(kube)
    source_backup(kube)
    kube.put(MySQLCluster, cluster(restore=RESTORE))
    reconciler.reconcile(KEY)
    said = (
        "restored final-20260101T000000Z-a.tar.gz from old-backup in 3 s, after skipping; "
        "final-20260201T000000Z-b.tar.gz: its SHA-256 does not match"
    )
    init = [{"name": "restore", "state": {"terminated": {"exitCode": 0, "message": said}}}]
    kube.put(Pod, database_pod(0, status={"initContainerStatuses": init}))
    kube.set_status(StatefulSet, "ns", "db-mysql", {"readyReplicas": 1})
    reconciler.reconcile(KEY)
    (fell_back,) = [e for e in events.events if e[1] == "RestoreFellBack"]
    assert fell_back[0] == "Warning" and "SHA-256 does not match" in fell_back[2]
    (restored,) = [e for e in events.events if e[1] == "Restored"]
    assert "final-20260101T000000Z-a.tar.gz" in restored[2]


def test_the_final_backup_job_reads_the_node_affinity_of_pod_0s_data_volume(
    kube: FakeKube, reconciler: MySQLClusterReconciler
) -> None:
    required = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
    }
    kube.put(
        PersistentVolumeClaim,
        {"metadata": {"name": "data-db-mysql-0", "namespace": "ns"}, "spec": {"volumeName": "pv-1"}},
    )
    kube.put(
        PersistentVolume, {"metadata": {"name": "pv-1"}, "spec": {"nodeAffinity": {"required": required}}}
    )
    assert data_node_affinity(reconciler.client, live()) == required
    kube.objects.pop(("persistentvolumes", None, "pv-1"))
    assert data_node_affinity(reconciler.client, live()) is None
