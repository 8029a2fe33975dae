"""Deletion through the finalizer: stop the database, archive, record, let go (against FakeKube)."""

from __future__ import annotations

from typing import Any

import pytest
from operator_fakes import START, Clock, FakeKube, RecordingEvents, api_error, cluster, database_pod

from mysql_operator.api.v1 import FINALIZER, SKIP_FINAL_BACKUP_ANNOTATION
from mysql_operator.controller import backupjob, finalizer
from mysql_operator.controller.children import backups, resources
from mysql_operator.controller.kinds import Event, Job, MySQLCluster, PersistentVolumeClaim, Pod, StatefulSet
from mysql_operator.controller.reconciler import MySQLClusterReconciler
from mysql_operator.controller.status import condition
from mysql_operator.runtime.types import Key, Result

KEY = Key("ns/db")
POLL = Result(requeue_after=finalizer.POLL_SECONDS)


def live(kube: FakeKube) -> dict[str, Any]:
    obj = kube.peek(MySQLCluster, "ns", "db")
    assert obj is not None
    return obj


def record(kube: FakeKube) -> dict[str, Any]:
    return live(kube)["status"].get("finalBackup") or {}


def put_database_pod(kube: FakeKube, ordinal: int = 0) -> None:
    kube.put(Pod, database_pod(ordinal))


def deleted(kube: FakeKube, reconciler: MySQLClusterReconciler, *, backup: bool = True) -> None:
    """A running cluster with pod 0 and its data volume, then deleted (another finalizer too)."""
    kube.put(MySQLCluster, cluster(backup={"enabled": backup}))
    reconciler.reconcile(KEY)
    kube.put(PersistentVolumeClaim, {"metadata": {"name": "data-db-mysql-0", "namespace": "ns"}, "spec": {}})
    put_database_pod(kube)
    kube.patch_merge(MySQLCluster, "ns", "db", {"metadata": {"finalizers": ["example.com/other", FINALIZER]}})
    kube.delete(MySQLCluster, "ns", "db")


def statefulset_at_zero(kube: FakeKube) -> None:
    """What the StatefulSet controller reports once it has acted on the scale to 0."""
    sts = kube.peek(StatefulSet, "ns", "db-mysql")
    assert sts is not None
    observed = {"observedGeneration": sts["metadata"]["generation"], "replicas": 0, "readyReplicas": 0}
    kube.set_status(StatefulSet, "ns", "db-mysql", observed)


def pods_stopped(kube: FakeKube, reconciler: MySQLClusterReconciler) -> None:
    """First pass scales to 0; then the StatefulSet controller removes the pod and says so."""
    assert reconciler.reconcile(KEY) == POLL
    kube.objects.pop(("pods", "ns", "db-mysql-0"))
    statefulset_at_zero(kube)


GRACE = 120
"""The database pods' terminationGracePeriodSeconds in these tests."""
FORCE_AFTER = GRACE + finalizer.STOP_MARGIN_SECONDS


def scheduled_pod(kube: FakeKube, ordinal: int) -> None:
    """A database pod of our StatefulSet, on a node (its deletion waits for the kubelet)."""
    sts = kube.peek(StatefulSet, "ns", "db-mysql")
    assert sts is not None
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db-mysql", "controller": True}
    pod = database_pod(ordinal, spec={"nodeName": "node-a", "terminationGracePeriodSeconds": GRACE})
    pod["metadata"]["ownerReferences"] = [{**owner, "uid": sts["metadata"]["uid"]}]
    kube.put(Pod, pod)


def stuck_scale_down(kube: FakeKube, reconciler: MySQLClusterReconciler) -> None:
    """Deleted with pods 0..2 present; OrderedReady with unready pods: the controller deletes none."""
    deleted(kube, reconciler)
    kube.objects.pop(("pods", "ns", "db-mysql-0"))
    for ordinal in range(3):
        scheduled_pod(kube, ordinal)
    assert reconciler.reconcile(KEY) == POLL  # scaled to 0; stopping begins now
    assert record(kube)["stoppingSince"] == "2026-01-01T00:00:00Z"


def pod_deletes(kube: FakeKube) -> list[tuple[str, int | None]]:
    return [(name, grace) for resource, name, grace in kube.graces if resource == "pods"]


def forced(events: RecordingEvents) -> list[tuple[str, str, str]]:
    return [e for e in events.events if e[1] == finalizer.FORCED]


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
    put_database_pod(kube, 1)
    statefulset_at_zero(kube)
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


def test_an_empty_pod_list_is_not_enough_the_statefulset_must_report_zero_replicas(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    deleted(kube, reconciler)
    assert reconciler.reconcile(KEY) == POLL  # scaled to 0
    kube.objects.pop(("pods", "ns", "db-mysql-0"))  # no pod listed: the controller may not have acted
    assert reconciler.reconcile(KEY) == POLL
    assert kube.peek(Job, "ns", "db-final-backup") is None
    assert "to report 0 replicas" in record(kube)["message"]
    sts = kube.peek(StatefulSet, "ns", "db-mysql")
    assert sts is not None
    # replicas 0, but from a generation before the scale: not an answer about the scale.
    stale = {"observedGeneration": sts["metadata"]["generation"] - 1, "replicas": 0}
    kube.set_status(StatefulSet, "ns", "db-mysql", stale)
    assert reconciler.reconcile(KEY) == POLL
    assert kube.peek(Job, "ns", "db-final-backup") is None
    # Caught up, but still counting a pod (one the list did not show yet).
    kube.set_status(
        StatefulSet, "ns", "db-mysql", {"observedGeneration": sts["metadata"]["generation"], "replicas": 1}
    )
    assert reconciler.reconcile(KEY) == POLL
    assert kube.peek(Job, "ns", "db-final-backup") is None
    statefulset_at_zero(kube)
    assert reconciler.reconcile(KEY) == POLL
    assert kube.peek(Job, "ns", "db-final-backup") is not None


def test_no_pod_is_deleted_by_the_operator_before_the_bound(
    reconciler: MySQLClusterReconciler, kube: FakeKube, clock: Clock, events: RecordingEvents
) -> None:
    stuck_scale_down(kube, reconciler)
    for _ in range(int(FORCE_AFTER // finalizer.POLL_SECONDS)):
        assert reconciler.reconcile(KEY) == POLL
        clock.advance(finalizer.POLL_SECONDS - 0.001)
    assert (clock.now - START).total_seconds() < FORCE_AFTER
    assert pod_deletes(kube) == [] and forced(events) == []
    assert record(kube)["stoppingSince"] == "2026-01-01T00:00:00Z", "the start is kept, not renewed"
    assert record(kube)["message"] == "waiting for 3 database pod(s) to stop before the final backup"


def test_pods_outstaying_their_grace_are_deleted_with_a_warning_naming_them(
    reconciler: MySQLClusterReconciler, kube: FakeKube, clock: Clock, events: RecordingEvents
) -> None:
    stuck_scale_down(kube, reconciler)
    clock.advance(FORCE_AFTER)
    assert reconciler.reconcile(KEY) == POLL
    assert pod_deletes(kube) == [("db-mysql-0", None), ("db-mysql-1", None), ("db-mysql-2", None)]
    uids = {name: uid for resource, name, uid in kube.deletes if resource == "pods"}
    assert all(uid and uid.startswith("uid-") for uid in uids.values()), "deleted by uid precondition"
    (warning,) = forced(events)
    assert warning[0] == "Warning"
    assert "db-mysql-0, db-mysql-1, db-mysql-2" in warning[2] and f"{GRACE}s grace" in warning[2]
    # Now Terminating: looked at again, they are neither deleted again nor reported again.
    clock.advance(finalizer.POLL_SECONDS)
    assert reconciler.reconcile(KEY) == POLL
    assert len(pod_deletes(kube)) == 3 and len(forced(events)) == 1
    assert kube.peek(Job, "ns", "db-final-backup") is None, "no Job while a pod may still run mysqld"


def test_pods_still_terminating_after_the_second_bound_are_deleted_with_no_grace(
    reconciler: MySQLClusterReconciler, kube: FakeKube, clock: Clock, events: RecordingEvents
) -> None:
    stuck_scale_down(kube, reconciler)
    clock.advance(FORCE_AFTER)
    reconciler.reconcile(KEY)  # deleted with their grace; their node never confirms
    clock.advance(FORCE_AFTER - 1)
    assert reconciler.reconcile(KEY) == POLL
    assert [g for _, g in pod_deletes(kube)] == [None, None, None]
    clock.advance(1)
    assert reconciler.reconcile(KEY) == POLL
    assert pod_deletes(kube)[3:] == [("db-mysql-0", 0), ("db-mysql-1", 0), ("db-mysql-2", 0)]
    assert kube.list(Pod, "ns", "") == []
    assert len(forced(events)) == 2 and "gracePeriodSeconds=0" in forced(events)[1][2]
    statefulset_at_zero(kube)
    assert reconciler.reconcile(KEY) == POLL
    assert kube.peek(Job, "ns", "db-final-backup") is not None


def test_a_pod_inside_its_own_grace_period_is_never_cut_short(
    reconciler: MySQLClusterReconciler, kube: FakeKube, clock: Clock, events: RecordingEvents
) -> None:
    stuck_scale_down(kube, reconciler)
    # The controller got round to pod 2 late (OrderedReady deletes one at a time): its server is
    # shutting down, within its grace period, when the operator's bounds from stoppingSince pass.
    clock.advance(2 * FORCE_AFTER - 10)
    kube.delete(Pod, "ns", "db-mysql-2")
    kube.graces.clear()
    clock.advance(20)
    assert reconciler.reconcile(KEY) == POLL
    assert pod_deletes(kube) == [("db-mysql-0", None), ("db-mysql-1", None)], "pod 2 must not be forced"
    clock.advance(GRACE - 10 + finalizer.STOP_MARGIN_SECONDS)  # pod 2's deadline plus the margin
    assert reconciler.reconcile(KEY) == POLL
    assert ("db-mysql-2", 0) in pod_deletes(kube)


def test_a_look_alike_pod_not_of_our_statefulset_is_never_deleted(
    reconciler: MySQLClusterReconciler, kube: FakeKube, clock: Clock, events: RecordingEvents
) -> None:
    deleted(kube, reconciler)  # pod 0 here carries our labels but no ownerReference
    assert reconciler.reconcile(KEY) == POLL
    clock.advance(3 * FORCE_AFTER)
    assert reconciler.reconcile(KEY) == POLL
    assert pod_deletes(kube) == [] and forced(events) == []


def test_once_the_statefulset_is_gone_only_pods_of_its_recorded_uid_are_forced(
    reconciler: MySQLClusterReconciler, kube: FakeKube, clock: Clock, events: RecordingEvents
) -> None:
    stuck_scale_down(kube, reconciler)
    sts = kube.peek(StatefulSet, "ns", "db-mysql")
    assert sts is not None
    assert record(kube)["statefulSetUID"] == sts["metadata"]["uid"]
    # A foreground deletion took the StatefulSet first. Pod 2 now belongs to a namesake that came and
    # went (another uid): same name, same labels, not ours.
    kube.objects.pop(("statefulsets", "ns", "db-mysql"))
    pod2 = kube.peek(Pod, "ns", "db-mysql-2")
    assert pod2 is not None
    pod2["metadata"]["ownerReferences"][0]["uid"] = "uid-of-a-namesake"
    kube.put(Pod, pod2)
    clock.advance(FORCE_AFTER)
    assert reconciler.reconcile(KEY) == POLL
    assert pod_deletes(kube) == [("db-mysql-0", None), ("db-mysql-1", None)]
    (warning,) = forced(events)
    assert "db-mysql-2" not in warning[2]


def test_a_record_without_the_uid_goes_by_the_statefulsets_name(
    reconciler: MySQLClusterReconciler, kube: FakeKube, clock: Clock, events: RecordingEvents
) -> None:
    # A record an operator before statefulSetUID wrote, and the StatefulSet gone since.
    stuck_scale_down(kube, reconciler)
    obj = live(kube)
    del obj["status"]["finalBackup"]["statefulSetUID"]
    kube.put(MySQLCluster, obj)
    kube.objects.pop(("statefulsets", "ns", "db-mysql"))
    clock.advance(FORCE_AFTER)
    assert reconciler.reconcile(KEY) == POLL
    assert pod_deletes(kube) == [("db-mysql-0", None), ("db-mysql-1", None), ("db-mysql-2", None)]
    assert "statefulSetUID" not in record(kube), "nothing to record: the StatefulSet is gone"


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


def failed_job_pod(kube: FakeKube, owner_uid: str, message: str) -> None:
    kube.put(
        Pod,
        {
            "metadata": {
                "name": f"db-final-backup-{owner_uid[-5:]}",
                "namespace": "ns",
                "labels": {"job-name": "db-final-backup"},
                "ownerReferences": [{"kind": "Job", "name": "db-final-backup", "uid": owner_uid}],
            },
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {"name": "archive", "state": {"terminated": {"exitCode": 1, "message": message}}}
                ],
            },
        },
    )


def test_what_the_failed_pod_said_is_in_status_and_the_event(
    reconciler: MySQLClusterReconciler, kube: FakeKube, events: RecordingEvents
) -> None:
    deleted(kube, reconciler)
    job_started(kube, reconciler)
    job = kube.peek(Job, "ns", "db-final-backup")
    assert job is not None
    (archive,) = job["spec"]["template"]["spec"]["containers"]
    assert archive["terminationMessagePolicy"] == "FallbackToLogsOnError", "else no log tail is kept"
    # A pod of an earlier Job of the same name (not yet collected) is not this failure's.
    failed_job_pod(kube, "earlier-job-uid", "archive: an older failure\n")
    failed_job_pod(kube, job["metadata"]["uid"], "\ngzip: write error: No space left on device\n")
    fail_job(kube)
    reconciler.reconcile(KEY)
    message = record(kube)["message"]
    assert message.endswith("its pod said: gzip: write error: No space left on device"), message
    assert "older failure" not in message
    assert message in [m for _, reason, m in events.events if reason == "FinalBackupFailed"]


def test_a_long_log_tail_keeps_its_end(reconciler: MySQLClusterReconciler, kube: FakeKube) -> None:
    deleted(kube, reconciler)
    job_started(kube, reconciler)
    job = kube.peek(Job, "ns", "db-final-backup")
    assert job is not None
    tail = "\n".join(f"line {n}" for n in range(500)) + "\ntar: No space left on device"
    failed_job_pod(kube, job["metadata"]["uid"], tail)
    fail_job(kube)
    reconciler.reconcile(KEY)
    said = record(kube)["message"].split("its pod said: ", 1)[1]
    assert said.startswith("…") and said.endswith("tar: No space left on device")
    assert len(said) == backupjob.LAST_WORDS_MAX_CHARS + 1


def test_a_failure_whose_pod_cannot_be_read_is_still_counted(
    reconciler: MySQLClusterReconciler, kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    deleted(kube, reconciler)
    job_started(kube, reconciler)
    fail_job(kube)
    listed = kube.list

    def refused(kind: Any, namespace: str, selector: str, **kw: Any) -> list[dict[str, Any]]:
        if selector.startswith("job-name="):
            raise api_error(403, "Forbidden", "pods is forbidden")
        return listed(kind, namespace, selector, **kw)

    monkeypatch.setattr(kube, "list", refused)
    reconciler.reconcile(KEY)
    assert record(kube)["attempts"] == 1 and "said" not in record(kube)["message"]
    assert kube.peek(Job, "ns", "db-final-backup") is None, "deleted for the retry all the same"


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
        "annotations": {backups.CLUSTER_UID_ANNOTATION: "old"},
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


def test_the_failed_job_delete_names_its_uid_and_spares_a_namesake(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    deleted(kube, reconciler)
    job_started(kube, reconciler)
    fail_job(kube)
    counted = kube.peek(Job, "ns", "db-final-backup")
    assert counted is not None
    real_delete = kube.delete

    def replaced_first(kind: Any, namespace: Any, name: str, **kw: Any) -> bool:
        # Between the status write that counted the failure and the delete, someone replaces the Job.
        if kind is Job and kube.peek(Job, "ns", name)["metadata"]["uid"] == counted["metadata"]["uid"]:  # type: ignore[index]
            del kube.objects[("jobs", "ns", name)]
            kube.put(Job, {"metadata": {"name": name, "namespace": "ns"}, "spec": {}})
        return real_delete(kind, namespace, name, **kw)

    kube.delete = replaced_first  # type: ignore[method-assign]
    assert reconciler.reconcile(KEY) == Result(requeue_after=finalizer.backoff(1)), "a 409 is no error"
    assert [d for d in kube.deletes if d[0] == "jobs"] == [
        ("jobs", "db-final-backup", counted["metadata"]["uid"])
    ]
    survivor = kube.peek(Job, "ns", "db-final-backup")
    assert survivor is not None and survivor["metadata"]["uid"] != counted["metadata"]["uid"]
    assert record(kube)["attempts"] == 1


def put_event(
    kube: FakeKube, kind: str, name: str, reason: str, message: str, type_: str = "Warning"
) -> None:
    kube.put(
        Event,
        {
            "metadata": {"name": f"{name}.{reason}", "namespace": "ns"},
            "involvedObject": {"kind": kind, "name": name, "namespace": "ns"},
            "reason": reason,
            "type": type_,
            "message": message,
        },
    )


def test_a_job_whose_pod_admission_refuses_says_why_at_once(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    deleted(kube, reconciler)
    job_started(kube, reconciler)
    refusal = (
        'Error creating: pods "db-final-backup-x" is forbidden: violates PodSecurity "restricted:latest"'
    )
    put_event(kube, "Job", "db-final-backup", "FailedCreate", refusal)
    assert reconciler.reconcile(KEY) == POLL
    degraded = condition(live(kube)["status"], "Degraded")
    assert degraded["reason"] == "FinalBackupBlocked" and "violates PodSecurity" in degraded["message"]
    assert record(kube)["phase"] == "Running" and "cannot create its pod" in record(kube)["message"]


def test_a_job_pod_that_cannot_be_scheduled_names_the_unbound_volume_and_why(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    deleted(kube, reconciler)
    job_started(kube, reconciler)
    pending = {"phase": "Pending"}
    kube.set_status(PersistentVolumeClaim, "ns", "db-backup", pending)
    put_event(
        kube, "PersistentVolumeClaim", "db-backup", "ProvisioningFailed", 'storageclass "gone" not found'
    )
    unscheduled = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
    }
    kube.put(
        Pod,
        {
            "metadata": {
                "name": "db-final-backup-x",
                "namespace": "ns",
                "labels": {"job-name": "db-final-backup"},
            },
            "status": {"phase": "Pending", "conditions": [unscheduled]},
        },
    )
    reconciler.reconcile(KEY)
    message = condition(live(kube)["status"], "Degraded")["message"]
    assert "cannot be scheduled: 0/1 nodes are available" in message
    assert "PersistentVolumeClaim db-backup" in message and 'storageclass "gone" not found' in message


def test_a_running_job_with_nothing_against_it_is_just_running(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    deleted(kube, reconciler)
    job_started(kube, reconciler)
    put_event(kube, "Job", "db-final-backup", "SuccessfulCreate", "Created pod: db-final-backup-x", "Normal")
    reconciler.reconcile(KEY)
    assert condition(live(kube)["status"], "Degraded")["status"] == "False"
