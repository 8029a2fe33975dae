"""MySQLClusterReconciler against the in-memory FakeKube (the real apiserver comes in tests/e2e)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from mysql_operator.api import FINALIZER, SKIP_FINAL_BACKUP_ANNOTATION
from mysql_operator.kinds import (
    CronJob,
    Job,
    MySQLCluster,
    PersistentVolumeClaim,
    Secret,
    Service,
    StatefulSet,
)
from mysql_operator.reconciler import BLOCKED_RETRY_SECONDS, MySQLClusterReconciler
from mysql_operator.runtime.types import Key, Result
from mysql_operator.status import condition
from operator_fakes import FakeKube, RecordingEvents, cluster
from pykube.exceptions import HTTPError

KEY = Key("ns/db")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
def events() -> RecordingEvents:
    return RecordingEvents()


@pytest.fixture
def reconciler(kube: FakeKube, events: RecordingEvents) -> MySQLClusterReconciler:
    return MySQLClusterReconciler(kube, recorder=events, now=lambda: NOW)  # type: ignore[arg-type]


def live_cluster(kube: FakeKube) -> dict:
    obj = kube.peek(MySQLCluster, "ns", "db")
    assert obj is not None
    return obj


def make_ready(kube: FakeKube, replicas: int = 1) -> None:
    sts = kube.peek(StatefulSet, "ns", "db-mysql")
    assert sts is not None
    status = {"observedGeneration": sts["metadata"]["generation"], "replicas": replicas}
    status |= {"readyReplicas": replicas, "updatedReplicas": replicas}
    kube.set_status(StatefulSet, "ns", "db-mysql", status)


def test_missing_cluster_is_a_noop(reconciler: MySQLClusterReconciler, kube: FakeKube) -> None:
    assert reconciler.reconcile(KEY) == Result()
    assert kube.writes == []


def test_first_reconcile_adds_finalizer_creates_children_and_reports_pending(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    assert reconciler.reconcile(KEY) == Result()
    assert live_cluster(kube)["metadata"]["finalizers"] == [FINALIZER]
    for kind, name in ((Secret, "db-credentials"), (Service, "db-headless"), (StatefulSet, "db-mysql")):
        assert kube.peek(kind, "ns", name) is not None, name
    assert kube.peek(CronJob, "ns", "db-backup") is None
    status = live_cluster(kube)["status"]
    assert status["phase"] == "Pending"
    assert status["primaryEndpoint"] == "db-mysql-0.db-headless.ns.svc:3306"


def test_converged_cluster_gets_no_write_on_the_next_reconcile(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster(backup={"enabled": True}))
    reconciler.reconcile(KEY)
    make_ready(kube)
    reconciler.reconcile(KEY)
    assert live_cluster(kube)["status"]["phase"] == "Running"
    kube.writes.clear()
    for _ in range(3):
        assert reconciler.reconcile(KEY) == Result()
    assert kube.writes == []


def test_spec_change_patches_the_statefulset_and_status_only(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    make_ready(kube)
    reconciler.reconcile(KEY)
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"replicas": 3}})
    kube.writes.clear()
    reconciler.reconcile(KEY)
    assert kube.writes == [
        ("patch", "statefulsets", "db-mysql"),
        ("patch", "mysqlclusters/status", "db"),
    ]
    assert kube.peek(StatefulSet, "ns", "db-mysql")["spec"]["replicas"] == 3  # type: ignore[index]
    assert live_cluster(kube)["status"]["phase"] == "Pending"


def test_drift_made_by_someone_else_is_reverted(reconciler: MySQLClusterReconciler, kube: FakeKube) -> None:
    kube.put(MySQLCluster, cluster(replicas=2))
    reconciler.reconcile(KEY)
    kube.patch_merge(StatefulSet, "ns", "db-mysql", {"spec": {"replicas": 1}})
    reconciler.reconcile(KEY)
    assert kube.peek(StatefulSet, "ns", "db-mysql")["spec"]["replicas"] == 2  # type: ignore[index]


def test_secret_is_never_rewritten(reconciler: MySQLClusterReconciler, kube: FakeKube) -> None:
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    before = kube.peek(Secret, "ns", "db-credentials")
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"replicas": 2}})
    reconciler.reconcile(KEY)
    assert kube.peek(Secret, "ns", "db-credentials") == before


def test_already_exists_on_create_is_adopted_without_a_duplicate(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    # Our earlier create succeeded but its reply was lost: the object is there, without our knowing.
    kube.before_create["services"] = {
        "metadata": {"name": "db-headless", "namespace": "ns"},
        "spec": {"clusterIP": "None", "selector": {"stale": "selector"}, "ports": []},
    }
    reconciler.reconcile(KEY)
    svc = kube.peek(Service, "ns", "db-headless")
    assert svc is not None
    (ref,) = svc["metadata"]["ownerReferences"]
    assert ref["uid"] == live_cluster(kube)["metadata"]["uid"] and ref["controller"] is True
    assert svc["spec"]["selector"]["app.kubernetes.io/instance"] == "db"
    assert [w for w in kube.writes if w[1] == "services"] == [("patch", "services", "db-headless")]


def test_orphan_is_not_adopted_back_while_the_cluster_is_being_deleted(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    real_get = kube.get
    reads: list[str] = []

    def deleted_after_first_read(kind, namespace, name):  # type: ignore[no-untyped-def]
        obj = real_get(kind, namespace, name)
        if kind is MySQLCluster and not reads:
            reads.append(name)
            # propagationPolicy=Orphan right after this pass read the cluster: our finalizer holds it,
            # and the garbage collector has taken our reference off the Service.
            kube.delete(MySQLCluster, "ns", "db")
            kube.objects[("services", "ns", "db-headless")]["metadata"].pop("ownerReferences")
        return obj

    kube.get = deleted_after_first_read  # type: ignore[method-assign]
    writes = len(kube.writes)

    assert reconciler.reconcile(KEY) == Result(requeue=True)

    assert "ownerReferences" not in kube.peek(Service, "ns", "db-headless")["metadata"]  # type: ignore[index]
    assert kube.writes[writes:] == [("delete", "mysqlclusters", "db")]  # the test's own, nothing else


def test_child_controlled_by_another_owner_is_reported_not_taken(
    reconciler: MySQLClusterReconciler, kube: FakeKube, events: RecordingEvents
) -> None:
    foreign = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x", "uid": "other", "controller": True}
    kube.put(Service, {"metadata": {"name": "db-headless", "namespace": "ns", "ownerReferences": [foreign]}})
    kube.put(MySQLCluster, cluster())
    assert reconciler.reconcile(KEY) == Result(requeue_after=BLOCKED_RETRY_SECONDS)
    status = live_cluster(kube)["status"]
    assert status["phase"] == "Failed"
    degraded = condition(status, "Degraded")
    assert degraded is not None and degraded["reason"] == "ChildConflict"
    assert "controlled by Deployment x" in degraded["message"]
    assert kube.peek(Service, "ns", "db-headless")["metadata"]["ownerReferences"] == [foreign]  # type: ignore[index]
    assert kube.peek(StatefulSet, "ns", "db-mysql") is not None  # the other children still converge
    assert ("Warning", "ChildConflict", degraded["message"]) in events.events


def test_backup_disabled_deletes_our_cronjob_and_keeps_the_backup_pvc(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster(backup={"enabled": True}))
    reconciler.reconcile(KEY)
    assert kube.peek(CronJob, "ns", "db-backup") is not None
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"backup": {"enabled": False}}})
    reconciler.reconcile(KEY)
    assert kube.peek(CronJob, "ns", "db-backup") is None
    assert kube.peek(PersistentVolumeClaim, "ns", "db-backup") is not None


def test_foreign_cronjob_is_left_alone_when_backup_disabled(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(CronJob, {"metadata": {"name": "db-backup", "namespace": "ns"}, "spec": {}})
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    assert kube.peek(CronJob, "ns", "db-backup") is not None


def test_invalid_schedule_fails_without_requeue_or_child_writes(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster(backup={"enabled": True, "schedule": "every night"}))
    assert reconciler.reconcile(KEY) == Result()
    assert {w[1] for w in kube.writes} == {"mysqlclusters", "mysqlclusters/status"}
    status = live_cluster(kube)["status"]
    assert status["phase"] == "Failed"
    ready = condition(status, "Ready")
    assert ready is not None and ready["reason"] == "InvalidSchedule"
    assert "spec.backup.schedule" in ready["message"]
    kube.writes.clear()
    assert reconciler.reconcile(KEY) == Result()
    assert kube.writes == []  # no status churn either


def test_six_field_cron_is_invalid_although_croniter_accepts_it(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster(backup={"enabled": True, "schedule": "0 0 2 * * *"}))
    reconciler.reconcile(KEY)
    assert live_cluster(kube)["status"]["phase"] == "Failed"


def test_rejected_child_write_reports_the_apiserver_message(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    message = 'StatefulSet.apps "db-mysql" is invalid: spec.template.spec.containers[0].resources: nope'
    kube.fail_next("create", "statefulsets", 422, "Invalid", message)
    assert reconciler.reconcile(KEY) == Result(requeue_after=BLOCKED_RETRY_SECONDS)
    status = live_cluster(kube)["status"]
    assert status["phase"] == "Failed"
    degraded = condition(status, "Degraded")
    assert degraded is not None and degraded["reason"] == "ChildRejected" and message in degraded["message"]


def test_stale_status_write_raises_conflict_for_backoff(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    kube.fail_next("patch", "mysqlclusters/status", 409, "Conflict", "the object has been modified")
    with pytest.raises(HTTPError) as raised:
        reconciler.reconcile(KEY)
    assert raised.value.code == 409
    assert reconciler.reconcile(KEY) == Result()  # the retry converges


def test_finalizer_patch_is_conditional_on_resource_version(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    real_get = kube.get

    def stale_get(kind, namespace, name):  # type: ignore[no-untyped-def]
        obj = real_get(kind, namespace, name)
        if kind is MySQLCluster:
            kube.patch_merge(MySQLCluster, "ns", "db", {"metadata": {"labels": {"edited": "yes"}}})
        return obj

    kube.get = stale_get  # type: ignore[method-assign]
    with pytest.raises(HTTPError) as raised:
        reconciler.reconcile(KEY)
    assert raised.value.code == 409
    assert live_cluster(kube)["metadata"].get("finalizers") is None


# -- deletion -------------------------------------------------------------------------------


def deleted_cluster(kube: FakeKube, reconciler: MySQLClusterReconciler, **spec: object) -> None:
    kube.put(MySQLCluster, cluster(**spec))
    reconciler.reconcile(KEY)
    kube.patch_merge(MySQLCluster, "ns", "db", {"metadata": {"finalizers": ["example.com/other", FINALIZER]}})
    kube.delete(MySQLCluster, "ns", "db")


def test_deletion_without_backup_removes_only_our_finalizer(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    deleted_cluster(kube, reconciler)
    assert reconciler.reconcile(KEY) == Result()
    assert live_cluster(kube)["metadata"]["finalizers"] == ["example.com/other"]
    assert kube.peek(Job, "ns", "db-final-backup") is None


def test_finalizer_removal_really_shortens_the_list(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    kube.delete(MySQLCluster, "ns", "db")
    reconciler.reconcile(KEY)
    assert kube.peek(MySQLCluster, "ns", "db") is None  # last finalizer gone: the object is gone


def with_data_volume(kube: FakeKube) -> None:
    kube.put(PersistentVolumeClaim, {"metadata": {"name": "data-db-mysql-0", "namespace": "ns"}, "spec": {}})


def test_deletion_waits_for_the_final_backup_job(reconciler: MySQLClusterReconciler, kube: FakeKube) -> None:
    with_data_volume(kube)
    deleted_cluster(kube, reconciler, backup={"enabled": True})
    assert reconciler.reconcile(KEY) == Result(requeue_after=5.0)
    job = kube.peek(Job, "ns", "db-final-backup")
    assert job is not None and "ownerReferences" not in job["metadata"]
    assert reconciler.reconcile(KEY) == Result(requeue_after=5.0)  # still running
    obj = live_cluster(kube)
    assert FINALIZER in obj["metadata"]["finalizers"]
    assert obj["status"]["phase"] == "Terminating"


def test_final_backup_success_deletes_the_job_then_the_finalizer(
    reconciler: MySQLClusterReconciler, kube: FakeKube, events: RecordingEvents
) -> None:
    with_data_volume(kube)
    deleted_cluster(kube, reconciler, backup={"enabled": True})
    reconciler.reconcile(KEY)
    kube.set_status(Job, "ns", "db-final-backup", {"succeeded": 1})
    assert reconciler.reconcile(KEY) == Result()
    assert kube.peek(Job, "ns", "db-final-backup") is None
    assert live_cluster(kube)["metadata"]["finalizers"] == ["example.com/other"]
    assert ("Normal", "FinalBackupSucceeded", "Job db-final-backup succeeded") in events.events


def test_final_backup_failure_is_degraded_and_retried_with_a_new_job(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    with_data_volume(kube)
    deleted_cluster(kube, reconciler, backup={"enabled": True})
    reconciler.reconcile(KEY)
    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "limit"}
    kube.set_status(Job, "ns", "db-final-backup", {"failed": 1, "conditions": [failed]})
    assert reconciler.reconcile(KEY) == Result(requeue=True)
    assert kube.peek(Job, "ns", "db-final-backup") is None
    obj = live_cluster(kube)
    degraded = condition(obj["status"], "Degraded")
    assert degraded is not None and degraded["status"] == "True" and degraded["reason"] == "FinalBackupFailed"
    assert FINALIZER in obj["metadata"]["finalizers"]
    assert reconciler.reconcile(KEY) == Result(requeue_after=5.0)
    assert kube.peek(Job, "ns", "db-final-backup") is not None


def test_final_backup_failure_stays_degraded_while_the_retry_runs(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    with_data_volume(kube)
    deleted_cluster(kube, reconciler, backup={"enabled": True})
    reconciler.reconcile(KEY)
    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "limit"}
    kube.set_status(Job, "ns", "db-final-backup", {"failed": 1, "conditions": [failed]})
    reconciler.reconcile(KEY)
    reported = condition(live_cluster(kube)["status"], "Degraded")
    writes = len(kube.writes)

    assert reconciler.reconcile(KEY) == Result(requeue_after=5.0)  # the retry's Job is created
    assert reconciler.reconcile(KEY) == Result(requeue_after=5.0)  # and still running

    assert condition(live_cluster(kube)["status"], "Degraded") == reported
    assert len(kube.writes) == writes + 1, "only the retry's Job is written, no status flip"


def test_skip_annotation_removes_the_finalizer_without_a_backup(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    with_data_volume(kube)
    deleted_cluster(kube, reconciler, backup={"enabled": True})
    patch = {"metadata": {"annotations": {SKIP_FINAL_BACKUP_ANNOTATION: "true"}}}
    kube.patch_merge(MySQLCluster, "ns", "db", patch)
    assert reconciler.reconcile(KEY) == Result()
    assert kube.peek(Job, "ns", "db-final-backup") is None
    assert live_cluster(kube)["metadata"]["finalizers"] == ["example.com/other"]


def test_no_data_volume_means_nothing_to_back_up(reconciler: MySQLClusterReconciler, kube: FakeKube) -> None:
    deleted_cluster(kube, reconciler, backup={"enabled": True})
    assert reconciler.reconcile(KEY) == Result()
    assert kube.peek(Job, "ns", "db-final-backup") is None
    assert live_cluster(kube)["metadata"]["finalizers"] == ["example.com/other"]


def test_leftover_job_of_an_earlier_cluster_is_not_taken_for_ours(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    with_data_volume(kube)
    old = {"name": "db-final-backup", "namespace": "ns", "annotations": {"db.example.com/cluster-uid": "old"}}
    kube.put(Job, {"metadata": old, "spec": {}, "status": {"succeeded": 1}})
    deleted_cluster(kube, reconciler, backup={"enabled": True})
    assert reconciler.reconcile(KEY) == Result(requeue_after=5.0)
    assert kube.peek(Job, "ns", "db-final-backup") is None
    assert FINALIZER in live_cluster(kube)["metadata"]["finalizers"]


def test_terminating_status_conflict_does_not_hold_up_deletion(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    with_data_volume(kube)
    deleted_cluster(kube, reconciler, backup={"enabled": True})
    kube.fail_next("patch", "mysqlclusters/status", 409, "Conflict", "modified")
    assert reconciler.reconcile(KEY) == Result(requeue_after=5.0)
    assert kube.peek(Job, "ns", "db-final-backup") is not None
