"""MySQLClusterReconciler against the in-memory FakeKube (the real apiserver comes in tests/e2e)."""

from __future__ import annotations

import pytest
from operator_fakes import FakeKube, RecordingEvents, cluster, rollout_completed
from pykube.exceptions import HTTPError

from mysql_operator.api.v1 import FINALIZER, RETAINED_ANNOTATION
from mysql_operator.controller.children import resources
from mysql_operator.controller.children.ssa import with_config_hash
from mysql_operator.controller.kinds import (
    CronJob,
    MySQLCluster,
    PersistentVolumeClaim,
    Secret,
    Service,
    StatefulSet,
)
from mysql_operator.controller.reconciler import BLOCKED_RETRY_SECONDS, MySQLClusterReconciler
from mysql_operator.controller.status import condition
from mysql_operator.runtime.types import Key, Result

KEY = Key("ns/db")


def live_cluster(kube: FakeKube) -> dict:
    obj = kube.peek(MySQLCluster, "ns", "db")
    assert obj is not None
    return obj


def test_missing_cluster_is_a_noop(reconciler: MySQLClusterReconciler, kube: FakeKube) -> None:
    assert reconciler.reconcile(KEY) == Result()
    assert kube.writes == []


def test_first_reconcile_adds_finalizer_creates_children_and_reports_pending(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    assert reconciler.reconcile(KEY) == Result()
    assert live_cluster(kube)["metadata"]["finalizers"] == [FINALIZER]
    children = ((Secret, "db-credentials"), (Service, "db-headless"), (Service, "db-primary"))
    for kind, name in (*children, (StatefulSet, "db-mysql")):
        assert kube.peek(kind, "ns", name) is not None, name
    assert kube.peek(CronJob, "ns", "db-backup") is None
    status = live_cluster(kube)["status"]
    assert status["phase"] == "Pending"
    assert status["primaryEndpoint"] == "db-primary.ns.svc:3306"


def test_the_children_of_one_pass_are_told_in_one_created_event(
    reconciler: MySQLClusterReconciler, kube: FakeKube, events: RecordingEvents
) -> None:
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    created = [e for e in events.events if e[1] == "Created"]
    assert created == [
        (
            "Normal",
            "Created",
            "created Secret db-credentials, Service db-headless, Service db-primary, Secret db-tls, "
            "StatefulSet db-mysql",
        )
    ]
    kube.delete(Service, "ns", "db-primary")
    reconciler.reconcile(KEY)
    assert [e for e in events.events if e[1] == "Created"][1:] == [
        ("Normal", "Created", "created Service db-primary")
    ]


def test_a_pass_that_fails_still_tells_what_it_created(
    reconciler: MySQLClusterReconciler, kube: FakeKube, events: RecordingEvents
) -> None:
    kube.put(MySQLCluster, cluster())
    kube.fail_next("patch", "mysqlclusters/status", 500, "InternalError", "etcd is away")
    with pytest.raises(HTTPError):
        reconciler.reconcile(KEY)
    told = [e[2] for e in events.events if e[1] == "Created"]
    assert told == [
        "created Secret db-credentials, Service db-headless, Service db-primary, Secret db-tls, "
        "StatefulSet db-mysql"
    ]


def test_converged_cluster_gets_no_write_on_the_next_reconcile(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster(backup={"enabled": True}))
    reconciler.reconcile(KEY)
    rollout_completed(kube)
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
    rollout_completed(kube)
    reconciler.reconcile(KEY)
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"replicas": 3}})
    kube.writes.clear()
    reconciler.reconcile(KEY)
    assert kube.writes == [
        ("apply", "statefulsets", "db-mysql"),
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


def test_lost_create_reply_comes_back_as_ours_without_a_write(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    uid = live_cluster(kube)["metadata"]["uid"]
    # Our earlier create succeeded but its reply was lost: the object is there, carrying our reference.
    owner = {**cluster(), "metadata": {"name": "db", "namespace": "ns", "uid": uid}}
    kube.before_create["services"] = with_config_hash(resources.headless_service(owner))
    reconciler.reconcile(KEY)
    svc = kube.peek(Service, "ns", "db-headless")
    assert svc is not None and svc["metadata"]["uid"] != uid
    (ref,) = svc["metadata"]["ownerReferences"]
    assert ref["uid"] == uid and ref["controller"] is True
    assert [w for w in kube.writes if w[2] == "db-headless"] == [], "nothing to adopt, nothing to rewrite"


def test_foreign_service_of_the_same_name_is_a_conflict_not_adopted(
    reconciler: MySQLClusterReconciler, kube: FakeKube, events: RecordingEvents
) -> None:
    foreign = {
        "metadata": {"name": "db-headless", "namespace": "ns", "labels": {"app": "theirs"}},
        "spec": {"clusterIP": "None", "selector": {"app": "theirs"}, "ports": []},
    }
    kube.put(Service, foreign)
    before = kube.peek(Service, "ns", "db-headless")
    kube.put(MySQLCluster, cluster())
    assert reconciler.reconcile(KEY) == Result(requeue_after=BLOCKED_RETRY_SECONDS)
    assert kube.peek(Service, "ns", "db-headless") == before, "a foreign object was rewritten"
    degraded = condition(live_cluster(kube)["status"], "Degraded")
    assert degraded is not None and degraded["reason"] == "ChildConflict"
    assert "Service db-headless exists and is not ours" in degraded["message"]
    assert ("Warning", "ChildConflict", degraded["message"]) in events.events


def test_lost_create_race_with_a_foreign_statefulset_is_a_conflict(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    kube.before_create["statefulsets"] = {
        "metadata": {"name": "db-mysql", "namespace": "ns"},
        "spec": {"replicas": 7, "template": {"spec": {"containers": [{"name": "app", "image": "nginx"}]}}},
    }
    reconciler.reconcile(KEY)
    sts = kube.peek(StatefulSet, "ns", "db-mysql")
    assert sts is not None and "ownerReferences" not in sts["metadata"]
    assert (
        sts["spec"]["replicas"] == 7 and sts["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx"
    )
    degraded = condition(live_cluster(kube)["status"], "Degraded")
    assert degraded is not None and "StatefulSet db-mysql exists and is not ours" in degraded["message"]


def test_orphan_labelled_as_ours_is_adopted(reconciler: MySQLClusterReconciler, kube: FakeKube) -> None:
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    # What a propagationPolicy=Orphan deletion of an earlier cluster of this name leaves behind.
    kube.objects[("services", "ns", "db-headless")]["metadata"].pop("ownerReferences")
    kube.writes.clear()
    reconciler.reconcile(KEY)
    (ref,) = kube.peek(Service, "ns", "db-headless")["metadata"]["ownerReferences"]  # type: ignore[index]
    assert ref["uid"] == live_cluster(kube)["metadata"]["uid"]
    assert kube.writes == [("apply", "services", "db-headless")]


def test_foreign_secret_is_never_used_and_blocks_the_pods(
    reconciler: MySQLClusterReconciler, kube: FakeKube, events: RecordingEvents
) -> None:
    # Even with our labels: only the retained annotation (set by us at create) marks our Secret.
    labels = resources.labels("db")
    kube.put(Secret, {"metadata": {"name": "db-credentials", "namespace": "ns", "labels": labels}})
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    assert kube.peek(StatefulSet, "ns", "db-mysql") is None, "pods would run on someone else's password"
    degraded = condition(live_cluster(kube)["status"], "Degraded")
    assert degraded is not None and degraded["reason"] == "ChildConflict"
    assert degraded["message"].startswith("Secret db-credentials exists and is not a credentials Secret")
    assert "ownerReferences" not in kube.peek(Secret, "ns", "db-credentials")["metadata"]  # type: ignore[index]


def test_credentials_secret_is_retained_not_owned(reconciler: MySQLClusterReconciler, kube: FakeKube) -> None:
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    meta = kube.peek(Secret, "ns", "db-credentials")["metadata"]  # type: ignore[index]
    assert "ownerReferences" not in meta, "the garbage collector would take the password of kept data"
    assert meta["annotations"] == {RETAINED_ANNOTATION: "true", resources.REPLICATION_KEY_ANNOTATION: "true"}
    assert meta["labels"] == resources.labels("db")


def test_recreated_cluster_reuses_the_retained_secret(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    first = kube.peek(Secret, "ns", "db-credentials")
    kube.delete(MySQLCluster, "ns", "db")
    reconciler.reconcile(KEY)  # finalizer off, the cluster is gone; the Secret stays
    assert kube.peek(MySQLCluster, "ns", "db") is None
    assert sorted(kube.collect_garbage()) == ["db-headless", "db-mysql", "db-primary", "db-tls"]
    kube.put(MySQLCluster, cluster())  # same name, new uid
    kube.writes.clear()
    reconciler.reconcile(KEY)
    assert kube.peek(Secret, "ns", "db-credentials") == first, "reused as it was: not adopted, not rewritten"
    # The credentials are never written again; the replication TLS is the new cluster's own, made anew.
    assert [w for w in kube.writes if w[1] == "secrets"] == [("create", "secrets", "db-tls")]
    assert live_cluster(kube)["status"]["phase"] == "Pending"


def test_secret_owned_by_an_older_operator_is_made_retained(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    secret = kube.objects[("secrets", "ns", "db-credentials")]
    secret["metadata"].pop("annotations")
    secret["metadata"]["ownerReferences"] = [resources.owner_reference(live_cluster(kube))]
    reconciler.reconcile(KEY)
    meta = kube.peek(Secret, "ns", "db-credentials")["metadata"]  # type: ignore[index]
    assert "ownerReferences" not in meta and meta["annotations"][RETAINED_ANNOTATION] == "true"


def test_orphan_is_not_adopted_back_while_the_cluster_is_being_deleted(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    real_get = kube.get
    reads: list[str] = []

    def deleted_after_first_read(kind, namespace, name, **kw):  # type: ignore[no-untyped-def]
        obj = real_get(kind, namespace, name, **kw)
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
    kube.put(MySQLCluster, cluster(backup={"enabled": True, "schedule": {"cron": "every night"}}))
    assert reconciler.reconcile(KEY) == Result()
    assert {w[1] for w in kube.writes} == {"mysqlclusters", "mysqlclusters/status"}
    status = live_cluster(kube)["status"]
    assert status["phase"] == "Failed"
    ready = condition(status, "Ready")
    assert ready is not None and ready["reason"] == "InvalidSchedule"
    assert "spec.backup.schedule.cron" in ready["message"]
    kube.writes.clear()
    assert reconciler.reconcile(KEY) == Result()
    assert kube.writes == []  # no status churn either


def test_six_field_cron_is_invalid_although_croniter_accepts_it(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster(backup={"enabled": True, "schedule": {"cron": "0 0 2 * * *"}}))
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

    def stale_get(kind, namespace, name, **kw):  # type: ignore[no-untyped-def]
        obj = real_get(kind, namespace, name, **kw)
        if kind is MySQLCluster:
            kube.patch_merge(MySQLCluster, "ns", "db", {"metadata": {"labels": {"edited": "yes"}}})
        return obj

    kube.get = stale_get  # type: ignore[method-assign]
    with pytest.raises(HTTPError) as raised:
        reconciler.reconcile(KEY)
    assert raised.value.code == 409
    assert live_cluster(kube)["metadata"].get("finalizers") is None


def test_a_field_we_stop_setting_is_removed_and_a_sidecar_kept(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster(resources={"cpu": "1", "memory": "1Gi"}))
    reconciler.reconcile(KEY)  # created
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"replicas": 2}})
    reconciler.reconcile(KEY)  # applied once: from here on the fake remembers our fields
    sts = kube.objects[("statefulsets", "ns", "db-mysql")]
    sts["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "envoy:1"})
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"resources": {"cpu": None}}})
    reconciler.reconcile(KEY)
    containers = kube.peek(StatefulSet, "ns", "db-mysql")["spec"]["template"]["spec"]["containers"]  # type: ignore[index]
    assert [c["name"] for c in containers] == ["mysql", "replication", "sidecar"]
    mysqld, _, sidecar = containers
    assert mysqld["resources"] == {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}
    assert sidecar["image"] == "envoy:1", "another writer's container was kept"
    kube.writes.clear()
    reconciler.reconcile(KEY)
    assert kube.writes == [], "the sidecar is not a difference: no write loop"


def test_an_update_goes_to_the_object_we_checked_or_nowhere(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"replicas": 3}})
    real_get = kube.get

    def replaced_before_the_apply(kind, namespace, name, **kw):  # type: ignore[no-untyped-def]
        obj = real_get(kind, namespace, name, **kw)
        if kind is StatefulSet and kw.get("fresh"):
            # A foreign object took the name between our GET and our apply.
            kube.objects.pop(("statefulsets", "ns", "db-mysql"))
            kube.put(
                StatefulSet, {"metadata": {"name": "db-mysql", "namespace": "ns"}, "spec": {"replicas": 9}}
            )
        return obj

    kube.get = replaced_before_the_apply  # type: ignore[method-assign]
    with pytest.raises(HTTPError) as raised:
        reconciler.reconcile(KEY)
    assert raised.value.code == 409
    assert kube.peek(StatefulSet, "ns", "db-mysql")["spec"]["replicas"] == 9  # type: ignore[index]


def old_secret(kube: FakeKube, data: dict[str, str]) -> None:
    """A credentials Secret as operators before the replication account made it."""
    labels = resources.labels("db")
    meta = {"name": "db-credentials", "namespace": "ns", "labels": labels}
    kube.put(Secret, {"metadata": {**meta, "annotations": {RETAINED_ANNOTATION: "true"}}, "data": data})


def test_an_old_secret_gets_a_replication_password_and_keeps_its_root_password(
    reconciler: MySQLClusterReconciler, kube: FakeKube, events: RecordingEvents
) -> None:
    kube.put(MySQLCluster, cluster())
    old_secret(kube, {"root-password": "b64:kept"})
    reconciler.reconcile(KEY)
    secret = kube.peek(Secret, "ns", "db-credentials")
    assert secret is not None
    assert secret["data"]["root-password"] == "b64:kept"
    assert secret["data"]["replication-password"].startswith("b64:")
    assert secret["metadata"]["annotations"][resources.REPLICATION_KEY_ANNOTATION] == "true"
    assert [e for e in events.events if e[1] == "ReplicationPasswordAdded"]
    kube.writes.clear()
    reconciler.reconcile(KEY)  # the annotation says it is done: no more reads of the data, no writes
    assert not [w for w in kube.writes if w[1] == "secrets"]


def test_a_secret_that_has_the_key_only_gets_the_annotation(
    reconciler: MySQLClusterReconciler, kube: FakeKube, events: RecordingEvents
) -> None:
    kube.put(MySQLCluster, cluster())
    old_secret(kube, {"root-password": "b64:kept", "replication-password": "b64:theirs"})
    reconciler.reconcile(KEY)
    secret = kube.peek(Secret, "ns", "db-credentials")
    assert secret is not None
    assert secret["data"] == {"root-password": "b64:kept", "replication-password": "b64:theirs"}
    assert secret["metadata"]["annotations"][resources.REPLICATION_KEY_ANNOTATION] == "true"
    assert not [e for e in events.events if e[1] == "ReplicationPasswordAdded"]
