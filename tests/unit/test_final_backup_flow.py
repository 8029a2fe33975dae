"""Deletion through the finalizer: stop the database, archive, record, let go (against FakeKube)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from operator_fakes import FakeKube, RecordingEvents, cluster

from mysql_operator import finalizer, resources
from mysql_operator.api import FINALIZER, SKIP_FINAL_BACKUP_ANNOTATION
from mysql_operator.kinds import Job, MySQLCluster, PersistentVolumeClaim, Pod, StatefulSet
from mysql_operator.reconciler import MySQLClusterReconciler
from mysql_operator.runtime.types import Key, Result
from mysql_operator.status import condition

KEY = Key("ns/db")
POLL = Result(requeue_after=finalizer.POLL_SECONDS)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
def events() -> RecordingEvents:
    return RecordingEvents()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def reconciler(kube: FakeKube, events: RecordingEvents, clock: Clock) -> MySQLClusterReconciler:
    return MySQLClusterReconciler(kube, recorder=events, now=clock)  # type: ignore[arg-type]


def live(kube: FakeKube) -> dict[str, Any]:
    obj = kube.peek(MySQLCluster, "ns", "db")
    assert obj is not None
    return obj


def record(kube: FakeKube) -> dict[str, Any]:
    return live(kube)["status"].get("finalBackup") or {}


def database_pod(kube: FakeKube, ordinal: int = 0) -> None:
    labels = resources.pod_labels("db", "database")
    kube.put(Pod, {"metadata": {"name": f"db-mysql-{ordinal}", "namespace": "ns", "labels": labels}})


def deleted(kube: FakeKube, reconciler: MySQLClusterReconciler, *, backup: bool = True) -> None:
    """A running cluster with pod 0 and its data volume, then deleted (another finalizer too)."""
    kube.put(MySQLCluster, cluster(backup={"enabled": backup}))
    reconciler.reconcile(KEY)
    kube.put(PersistentVolumeClaim, {"metadata": {"name": "data-db-mysql-0", "namespace": "ns"}, "spec": {}})
    database_pod(kube)
    kube.patch_merge(MySQLCluster, "ns", "db", {"metadata": {"finalizers": ["example.com/other", FINALIZER]}})
    kube.delete(MySQLCluster, "ns", "db")


def pods_stopped(kube: FakeKube, reconciler: MySQLClusterReconciler) -> None:
    """First pass scales to 0; then the StatefulSet controller removes the pod."""
    assert reconciler.reconcile(KEY) == POLL
    kube.objects.pop(("pods", "ns", "db-mysql-0"))


def job_started(kube: FakeKube, reconciler: MySQLClusterReconciler) -> None:
    pods_stopped(kube, reconciler)
    assert reconciler.reconcile(KEY) == POLL
    assert kube.peek(Job, "ns", "db-final-backup") is not None


def fail_job(kube: FakeKube) -> None:
    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "limit"}
    kube.set_status(Job, "ns", "db-final-backup", {"failed": 1, "conditions": [failed]})


def test_deletion_without_backup_removes_only_our_finalizer(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    deleted(kube, reconciler, backup=False)
    assert reconciler.reconcile(KEY) == Result()
    assert live(kube)["metadata"]["finalizers"] == ["example.com/other"]
    assert kube.peek(StatefulSet, "ns", "db-mysql")["spec"]["replicas"] == 1  # type: ignore[index]


def test_database_is_scaled_to_zero_before_anything_is_archived(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    deleted(kube, reconciler)
    assert reconciler.reconcile(KEY) == POLL
    assert kube.peek(StatefulSet, "ns", "db-mysql")["spec"]["replicas"] == 0  # type: ignore[index]
    assert kube.peek(Job, "ns", "db-final-backup") is None
    assert record(kube)["phase"] == "Stopping"


def test_job_is_created_only_after_every_database_pod_is_gone(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    deleted(kube, reconciler)
    reconciler.reconcile(KEY)  # scaled to 0; pod 0 is still shutting down
    database_pod(kube, 1)
    for _ in range(3):
        assert reconciler.reconcile(KEY) == POLL
        assert kube.peek(Job, "ns", "db-final-backup") is None
    assert record(kube)["message"] == "waiting for 2 database pod(s) to stop before the final backup"
    kube.objects.pop(("pods", "ns", "db-mysql-0"))
    kube.objects.pop(("pods", "ns", "db-mysql-1"))
    assert reconciler.reconcile(KEY) == POLL
    job = kube.peek(Job, "ns", "db-final-backup")
    assert job is not None and "ownerReferences" not in job["metadata"]
    assert job["spec"]["ttlSecondsAfterFinished"] >= 3600
    assert FINALIZER in live(kube)["metadata"]["finalizers"]
    assert live(kube)["status"]["phase"] == "Terminating"


def test_success_is_recorded_before_the_finalizer_comes_off_and_never_archived_twice(
    reconciler: MySQLClusterReconciler, kube: FakeKube, events: RecordingEvents
) -> None:
    deleted(kube, reconciler)
    job_started(kube, reconciler)
    kube.set_status(Job, "ns", "db-final-backup", {"succeeded": 1})
    kube.fail_next("patch", "mysqlclusters", 409, "Conflict", "the object has been modified")
    with pytest.raises(Exception, match="modified"):
        reconciler.reconcile(KEY)
    assert record(kube)["phase"] == "Succeeded", "success must be on record before the finalizer patch"
    # The Job is kept for its TTL; a requeue (or a new operator) finds the record, not a new Job.
    kube.objects.pop(("jobs", "ns", "db-final-backup"))
    kube.writes.clear()
    assert reconciler.reconcile(KEY) == Result()
    assert kube.writes == [("patch", "mysqlclusters", "db")]
    assert live(kube)["metadata"]["finalizers"] == ["example.com/other"]
    assert ("Normal", "FinalBackupSucceeded", "Job db-final-backup succeeded") in events.events


def test_succeeded_job_is_left_to_its_ttl(reconciler: MySQLClusterReconciler, kube: FakeKube) -> None:
    deleted(kube, reconciler)
    job_started(kube, reconciler)
    kube.set_status(Job, "ns", "db-final-backup", {"succeeded": 1})
    assert reconciler.reconcile(KEY) == Result()
    assert kube.peek(Job, "ns", "db-final-backup") is not None
    assert live(kube)["metadata"]["finalizers"] == ["example.com/other"]


def test_failure_is_counted_in_status_and_retried_after_a_backoff(
    reconciler: MySQLClusterReconciler, kube: FakeKube, clock: Clock
) -> None:
    deleted(kube, reconciler)
    job_started(kube, reconciler)
    fail_job(kube)
    assert reconciler.reconcile(KEY) == Result(requeue_after=finalizer.backoff(1))
    assert kube.peek(Job, "ns", "db-final-backup") is None
    assert record(kube)["attempts"] == 1 and record(kube)["phase"] == "Failed"
    degraded = condition(live(kube)["status"], "Degraded")
    assert degraded is not None and degraded["reason"] == "FinalBackupFailed"
    # The controller may come back early (an event, a restart): the recorded time rules.
    clock.advance(4)
    assert reconciler.reconcile(KEY) == Result(requeue_after=finalizer.backoff(1) - 4)
    assert kube.peek(Job, "ns", "db-final-backup") is None
    clock.advance(finalizer.backoff(1) - 4)
    assert reconciler.reconcile(KEY) == POLL
    assert kube.peek(Job, "ns", "db-final-backup") is not None


def test_a_failed_job_is_counted_once_even_if_its_delete_fails(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    deleted(kube, reconciler)
    job_started(kube, reconciler)
    fail_job(kube)
    kube.fail_next("delete", "jobs", 500, "InternalError", "etcd timeout")
    with pytest.raises(Exception, match="etcd"):
        reconciler.reconcile(KEY)
    assert record(kube)["attempts"] == 1
    reconciler.reconcile(KEY)  # the same failed Job, seen again
    assert record(kube)["attempts"] == 1
    assert kube.peek(Job, "ns", "db-final-backup") is None


def test_failure_stays_degraded_while_the_retry_runs(
    reconciler: MySQLClusterReconciler, kube: FakeKube, clock: Clock
) -> None:
    deleted(kube, reconciler)
    job_started(kube, reconciler)
    fail_job(kube)
    reconciler.reconcile(KEY)
    reported = condition(live(kube)["status"], "Degraded")
    clock.advance(finalizer.backoff(1))
    assert reconciler.reconcile(KEY) == POLL  # the retry's Job is created
    assert reconciler.reconcile(KEY) == POLL  # and still running
    assert condition(live(kube)["status"], "Degraded") == reported
    assert record(kube)["phase"] == "Running" and record(kube)["attempts"] == 1


def test_backoff_doubles_and_is_capped() -> None:
    delays = [finalizer.backoff(n) for n in range(1, 10)]
    assert delays[:4] == [10.0, 20.0, 40.0, 80.0]
    assert max(delays) == finalizer.BACKOFF_MAX_SECONDS == delays[-1]


def test_repeated_failures_warn_with_the_skip_annotation(
    reconciler: MySQLClusterReconciler, kube: FakeKube, clock: Clock, events: RecordingEvents
) -> None:
    deleted(kube, reconciler)
    pods_stopped(kube, reconciler)
    jobs = 0
    for attempt in range(1, finalizer.WARN_AFTER_ATTEMPTS + 1):
        assert reconciler.reconcile(KEY) == POLL
        jobs += 1
        fail_job(kube)
        assert reconciler.reconcile(KEY) == Result(requeue_after=finalizer.backoff(attempt))
        warned = [e for e in events.events if e[1] == "FinalBackupFailing"]
        assert bool(warned) == (attempt >= finalizer.WARN_AFTER_ATTEMPTS)
        clock.advance(finalizer.backoff(attempt))
    assert record(kube)["attempts"] == jobs == finalizer.WARN_AFTER_ATTEMPTS
    (warning,) = [e for e in events.events if e[1] == "FinalBackupFailing"]
    assert warning[0] == "Warning" and f"{SKIP_FINAL_BACKUP_ANNOTATION}=true" in warning[2]


def test_terminating_namespace_skips_the_backup_with_a_warning(
    reconciler: MySQLClusterReconciler, kube: FakeKube, events: RecordingEvents
) -> None:
    deleted(kube, reconciler)
    pods_stopped(kube, reconciler)
    message = 'jobs "db-final-backup" is forbidden: unable to create new content in namespace ns because it is being terminated'  # noqa: E501
    kube.fail_next("create", "jobs", 403, "Forbidden", message)
    assert reconciler.reconcile(KEY) == Result()
    assert live(kube)["metadata"]["finalizers"] == ["example.com/other"]
    assert ("Warning", "FinalBackupSkipped", "final backup skipped: namespace terminating") in events.events


def test_skip_annotation_removes_the_finalizer_without_a_backup(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    deleted(kube, reconciler)
    kube.patch_merge(
        MySQLCluster, "ns", "db", {"metadata": {"annotations": {SKIP_FINAL_BACKUP_ANNOTATION: "true"}}}
    )
    assert reconciler.reconcile(KEY) == Result()
    assert kube.peek(Job, "ns", "db-final-backup") is None
    assert live(kube)["metadata"]["finalizers"] == ["example.com/other"]


def test_no_data_volume_means_nothing_to_back_up(reconciler: MySQLClusterReconciler, kube: FakeKube) -> None:
    deleted(kube, reconciler)
    kube.objects.pop(("persistentvolumeclaims", "ns", "data-db-mysql-0"))
    assert reconciler.reconcile(KEY) == Result()
    assert kube.peek(Job, "ns", "db-final-backup") is None
    assert live(kube)["metadata"]["finalizers"] == ["example.com/other"]


def test_leftover_job_of_an_earlier_cluster_is_replaced(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    meta = {
        "name": "db-final-backup",
        "namespace": "ns",
        "labels": resources.pod_labels("db", "final-backup"),
        "annotations": {resources.CLUSTER_UID_ANNOTATION: "old"},
    }
    kube.put(Job, {"metadata": meta, "spec": {}, "status": {"succeeded": 1}})
    deleted(kube, reconciler)
    pods_stopped(kube, reconciler)
    assert reconciler.reconcile(KEY) == POLL
    assert kube.peek(Job, "ns", "db-final-backup") is None, (
        "the earlier cluster's Job says nothing about ours"
    )
    assert FINALIZER in live(kube)["metadata"]["finalizers"]


def test_foreign_job_of_the_same_name_is_a_conflict_not_deleted(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(Job, {"metadata": {"name": "db-final-backup", "namespace": "ns"}, "spec": {}})
    deleted(kube, reconciler)
    pods_stopped(kube, reconciler)
    assert reconciler.reconcile(KEY) == POLL
    assert kube.peek(Job, "ns", "db-final-backup") is not None
    degraded = condition(live(kube)["status"], "Degraded")
    assert degraded is not None and degraded["reason"] == "ChildConflict"
    assert FINALIZER in live(kube)["metadata"]["finalizers"]


def test_orphaned_statefulset_is_left_running_and_the_backup_skipped(
    reconciler: MySQLClusterReconciler, kube: FakeKube, events: RecordingEvents
) -> None:
    deleted(kube, reconciler)
    # propagationPolicy=Orphan: the garbage collector took our reference off the StatefulSet.
    kube.objects[("statefulsets", "ns", "db-mysql")]["metadata"].pop("ownerReferences")
    assert reconciler.reconcile(KEY) == Result()
    assert kube.peek(StatefulSet, "ns", "db-mysql")["spec"]["replicas"] == 1  # type: ignore[index]
    assert kube.peek(Job, "ns", "db-final-backup") is None
    assert any(e[:2] == ("Warning", "FinalBackupSkipped") and "orphaned" in e[2] for e in events.events)
    assert live(kube)["metadata"]["finalizers"] == ["example.com/other"]


def test_progress_status_conflict_does_not_hold_up_deletion(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    deleted(kube, reconciler)
    pods_stopped(kube, reconciler)
    kube.fail_next("patch", "mysqlclusters/status", 409, "Conflict", "modified")
    assert reconciler.reconcile(KEY) == POLL
    assert kube.peek(Job, "ns", "db-final-backup") is not None
