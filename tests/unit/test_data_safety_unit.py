"""What keeps data and credentials safe: uid-preconditioned deletes, no regenerated password for kept
data, fields fixed at creation never applied (FakeKube refuses them with 422, as the apiserver does)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from operator_fakes import FakeKube, RecordingEvents, cluster, database_pod, rollout_completed

from mysql_operator.api.v1 import RETAINED_ANNOTATION
from mysql_operator.controller.children import resources
from mysql_operator.controller.children.immutable import STORAGE_IMMUTABLE
from mysql_operator.controller.client import delete_exactly
from mysql_operator.controller.kinds import (
    CronJob,
    Job,
    MySQLCluster,
    PersistentVolumeClaim,
    Pod,
    Secret,
    StatefulSet,
)
from mysql_operator.controller.reconciler import CREDENTIALS_MISSING, MySQLClusterReconciler
from mysql_operator.controller.status import DEGRADED, condition
from mysql_operator.controller.versions import ENGINE_IMMUTABLE, VERSION_DOWNGRADE
from mysql_operator.database.engines import ENGINES, MARIADB, MYSQL
from mysql_operator.runtime.types import Key

KEY = Key("ns/db")


def live(kube: FakeKube) -> dict[str, Any]:
    obj = kube.peek(MySQLCluster, "ns", "db")
    assert obj is not None
    return obj


def degraded(kube: FakeKube) -> dict[str, Any]:
    found = condition(live(kube).get("status"), DEGRADED)
    assert found is not None
    return found


def data_pvc(kube: FakeKube, ordinal: int = 0) -> None:
    """What the StatefulSet controller leaves behind, and a deletion of the cluster keeps."""
    kube.put(PersistentVolumeClaim, {"metadata": {"name": f"data-db-mysql-{ordinal}", "namespace": "ns"}})


# -- deletes -----------------------------------------------------------------------------------


def test_deletes_name_the_uid_of_the_object_we_looked_at(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster(backup={"enabled": True}))
    reconciler.reconcile(KEY)
    cronjob = kube.peek(CronJob, "ns", "db-backup")
    assert cronjob is not None
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"backup": {"enabled": False}}})
    reconciler.reconcile(KEY)
    assert kube.deletes == [("cronjobs", "db-backup", cronjob["metadata"]["uid"])]
    assert kube.peek(CronJob, "ns", "db-backup") is None


def test_a_namesake_created_since_we_looked_is_not_deleted_and_not_retried(
    reconciler: MySQLClusterReconciler, kube: FakeKube, events: RecordingEvents
) -> None:
    kube.put(MySQLCluster, cluster(backup={"enabled": True}))
    reconciler.reconcile(KEY)
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"backup": {"enabled": False}}})
    seen = kube.peek(CronJob, "ns", "db-backup")
    assert seen is not None
    # Between our read and our delete, the CronJob is deleted and another one created in its place.
    real_get = kube.get

    def get_then_replace(kind: Any, namespace: str | None, name: str, **kw: Any) -> Any:
        found = real_get(kind, namespace, name, **kw)
        if kind is CronJob and found is not None:
            del kube.objects[("cronjobs", "ns", "db-backup")]
            kube.put(CronJob, {"metadata": {"name": "db-backup", "namespace": "ns"}, "spec": {"x": 1}})
        return found

    kube.get = get_then_replace  # type: ignore[method-assign]
    reconciler.reconcile(KEY)  # no exception: a 409 on the uid is an answer, not an error
    kube.get = real_get  # type: ignore[method-assign]
    survivor = kube.peek(CronJob, "ns", "db-backup")
    assert survivor is not None and survivor["spec"]["x"] == 1, "someone else's CronJob was deleted"
    assert not [e for e in events.events if e[1] == "Deleted"], "no Event claims a delete that did not happen"


def test_delete_exactly_reports_a_replaced_object_and_raises_other_errors(kube: FakeKube) -> None:
    first = kube.put(Job, {"metadata": {"name": "j", "namespace": "ns"}})
    del kube.objects[("jobs", "ns", "j")]
    kube.put(Job, {"metadata": {"name": "j", "namespace": "ns"}})
    assert delete_exactly(kube, Job, first) is False  # type: ignore[arg-type]
    assert kube.peek(Job, "ns", "j") is not None
    kube.fail_next("delete", "jobs", 500, "InternalError", "boom")
    with pytest.raises(Exception, match="boom"):
        delete_exactly(kube, Job, kube.peek(Job, "ns", "j"))  # type: ignore[arg-type]


# -- credentials -------------------------------------------------------------------------------


def test_a_new_cluster_gets_a_generated_secret(reconciler: MySQLClusterReconciler, kube: FakeKube) -> None:
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    secret = kube.peek(Secret, "ns", "db-credentials")
    assert secret is not None and secret["data"][resources.PASSWORD_KEY]
    assert degraded(kube)["status"] == "False"


def test_a_missing_secret_with_data_left_is_reported_and_never_regenerated(
    reconciler: MySQLClusterReconciler, kube: FakeKube, events: RecordingEvents
) -> None:
    data_pvc(kube)  # an earlier cluster of this name ran; its Secret was deleted since
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    assert kube.peek(Secret, "ns", "db-credentials") is None, "a new password would lock the data out"
    assert kube.peek(StatefulSet, "ns", "db-mysql") is None, "no pod starts without its password"
    found = degraded(kube)
    assert (found["status"], found["reason"]) == ("True", CREDENTIALS_MISSING)
    assert "db-credentials" in found["message"] and "data-db-mysql-0" in found["message"]
    assert ("Warning", CREDENTIALS_MISSING, found["message"]) in events.events
    reconciler.reconcile(KEY)
    warned = [e for e in events.events if e[1] == CREDENTIALS_MISSING]
    assert warned == [("Warning", CREDENTIALS_MISSING, found["message"])], (
        "one Warning per problem, not per pass"
    )


def test_a_running_cluster_whose_secret_is_deleted_is_degraded_not_rekeyed(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster(replicas=2))
    reconciler.reconcile(KEY)
    password = kube.peek(Secret, "ns", "db-credentials")["data"]  # type: ignore[index]
    data_pvc(kube, ordinal=1)  # pod 0's claim is gone too: any ordinal the spec asks for counts
    del kube.objects[("secrets", "ns", "db-credentials")]
    reconciler.reconcile(KEY)
    assert kube.peek(Secret, "ns", "db-credentials") is None
    assert degraded(kube)["reason"] == CREDENTIALS_MISSING
    # A human restores it; the next pass uses it as it is.
    restored = resources.credentials_secret(live(kube))
    restored.pop("stringData")
    kube.put(Secret, {**restored, "data": password})
    reconciler.reconcile(KEY)
    assert kube.peek(Secret, "ns", "db-credentials")["data"] == password  # type: ignore[index]
    assert degraded(kube)["status"] == "False"
    assert kube.peek(StatefulSet, "ns", "db-mysql") is not None


def test_status_that_says_it_ran_counts_as_data(reconciler: MySQLClusterReconciler, kube: FakeKube) -> None:
    ran = cluster()
    ran["status"] = {"phase": "Running", "readyReplicas": 1}
    kube.put(MySQLCluster, ran)
    reconciler.reconcile(KEY)
    assert kube.peek(Secret, "ns", "db-credentials") is None
    assert degraded(kube)["reason"] == CREDENTIALS_MISSING


def test_a_restored_secret_must_carry_the_retained_marks(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    data_pvc(kube)
    kube.put(MySQLCluster, cluster())
    kube.put(
        Secret, {"metadata": {"name": "db-credentials", "namespace": "ns"}, "data": {"root-password": "x"}}
    )
    reconciler.reconcile(KEY)
    found = degraded(kube)
    assert found["reason"] == "ChildConflict" and RETAINED_ANNOTATION in found["message"]
    assert kube.peek(StatefulSet, "ns", "db-mysql") is None


# -- fields fixed at creation ------------------------------------------------------------------


def test_a_storage_change_is_refused_with_a_message_not_a_422_loop(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    # The CRD refuses this change; a cluster re-created over an orphaned StatefulSet gets past it.
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"storage": {"size": "5Gi"}, "replicas": 3}})
    reconciler.reconcile(KEY)
    sts = kube.peek(StatefulSet, "ns", "db-mysql")
    assert sts is not None
    assert sts["spec"]["replicas"] == 3, "the rest of the spec still converges"
    claim = sts["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim["resources"]["requests"]["storage"] == "1Gi"
    found = degraded(kube)
    assert (found["status"], found["reason"]) == ("True", STORAGE_IMMUTABLE)
    assert "1Gi" in found["message"] and "spec.storage" in found["message"]
    assert live(kube)["status"]["phase"] != "Failed"
    kube.writes.clear()
    reconciler.reconcile(KEY)
    assert kube.writes == [], "no apply on every pass for a change that cannot be applied"
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"storage": {"size": "1Gi"}}})
    reconciler.reconcile(KEY)
    assert degraded(kube)["status"] == "False"


def test_applies_after_creation_never_carry_fixed_fields(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"replicas": 2}})
    reconciler.reconcile(KEY)
    applied = kube.applied[("statefulsets", "ns", "db-mysql")]
    assert applied["spec"]["replicas"] == 2
    assert not {"selector", "serviceName", "volumeClaimTemplates", "podManagementPolicy"} & set(
        applied["spec"]
    )
    sts = kube.peek(StatefulSet, "ns", "db-mysql")
    assert sts is not None and sts["spec"]["selector"] and sts["spec"]["volumeClaimTemplates"]


# -- the database's version --------------------------------------------------------------------


def server_image(kube: FakeKube) -> str:
    sts = kube.peek(StatefulSet, "ns", "db-mysql")
    assert sts is not None
    (server,) = [c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "mysql"]
    return str(server["image"])


def rolled_out(kube: FakeKube, reconciler: MySQLClusterReconciler) -> None:
    """The StatefulSet controller has run every pod on the latest template; the operator looks."""
    rollout_completed(kube)
    reconciler.reconcile(KEY)


def test_an_unset_version_keeps_what_the_pods_ran_when_the_default_moves(
    reconciler: MySQLClusterReconciler, kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(ENGINES, "mysql", replace(MYSQL, default_version="8.0"))  # an older release's
    kube.put(MySQLCluster, cluster())
    reconciler.reconcile(KEY)
    assert server_image(kube) == "mysql:8.0"
    assert "version" not in live(kube)["status"], "no pod has run it yet"
    rolled_out(kube, reconciler)
    assert live(kube)["status"]["version"] == "8.0"

    monkeypatch.setitem(ENGINES, "mysql", replace(MYSQL, default_version="9.9"))  # the operator upgraded
    reconciler.reconcile(KEY)
    assert server_image(kube) == "mysql:8.0", "an operator upgrade must never upgrade a database"
    assert degraded(kube)["status"] == "False"

    # Even with the StatefulSet gone (deleted with --cascade=orphan, say): the status remembers.
    kube.delete(StatefulSet, "ns", "db-mysql")
    reconciler.reconcile(KEY)
    assert server_image(kube) == "mysql:8.0"

    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"version": "9.9"}})  # the owner upgrades
    reconciler.reconcile(KEY)
    assert server_image(kube) == "mysql:9.9"


def test_a_new_cluster_without_a_version_gets_the_engines_default(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster(engine="mariadb"))
    reconciler.reconcile(KEY)
    assert server_image(kube) == f"mariadb:{MARIADB.default_version}"


def test_a_downgrade_is_refused_and_the_pods_keep_their_version(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster(version="8.4"))
    reconciler.reconcile(KEY)
    rolled_out(kube, reconciler)
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"version": "8.0.36", "replicas": 2}})
    reconciler.reconcile(KEY)
    assert server_image(kube) == "mysql:8.4"
    sts = kube.peek(StatefulSet, "ns", "db-mysql")
    assert sts is not None and sts["spec"]["replicas"] == 2, "the rest of the spec still converges"
    found = degraded(kube)
    assert (found["status"], found["reason"]) == ("True", VERSION_DOWNGRADE)
    assert "spec.version '8.0.36'" in found["message"] and "'8.4'" in found["message"]

    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"version": "8.4.3"}})  # a patch: allowed
    reconciler.reconcile(KEY)
    assert server_image(kube) == "mysql:8.4.3"
    assert degraded(kube)["status"] == "False"


def test_an_upgrade_that_never_ran_can_be_taken_back(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster(version="8.4"))
    reconciler.reconcile(KEY)
    rolled_out(kube, reconciler)
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"version": "9.9"}})  # no such image, say
    reconciler.reconcile(KEY)
    assert server_image(kube) == "mysql:9.9"
    assert live(kube)["status"]["version"] == "8.4", "the rollout never completed"
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"version": "8.4"}})
    reconciler.reconcile(KEY)
    assert server_image(kube) == "mysql:8.4"
    assert degraded(kube)["status"] == "False"


def test_an_engine_change_that_got_past_the_crd_is_refused(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster(engine="mariadb"))
    reconciler.reconcile(KEY)
    rolled_out(kube, reconciler)
    # v1alpha1 has no engine: a replace through it can turn the hub's engine back to the default.
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"engine": "mysql", "version": "8.0"}})
    reconciler.reconcile(KEY)
    assert server_image(kube) == f"mariadb:{MARIADB.default_version}"
    sts = kube.peek(StatefulSet, "ns", "db-mysql")
    assert sts is not None
    (server,) = [c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "mysql"]
    assert server["command"][-1] == "mariadbd"
    found = degraded(kube)
    assert (found["status"], found["reason"]) == ("True", ENGINE_IMMUTABLE)


def test_an_upgrade_a_pod_started_cannot_be_taken_back(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster(version="8.4"))
    reconciler.reconcile(KEY)
    rolled_out(kube, reconciler)
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"version": "9.9"}})
    reconciler.reconcile(KEY)
    # The StatefulSet controller replaced the highest ordinal first; its server started (and may have
    # upgraded its datadir) but never became ready, so the rollout never completed.
    started = {"name": "mysql", "state": {"running": {}}, "lastState": {}}
    pod = database_pod(
        spec={"containers": [{"name": "mysql", "image": "mysql:9.9"}]},
        status={"containerStatuses": [started]},
    )
    kube.put(Pod, pod)
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"version": "8.4"}})
    reconciler.reconcile(KEY)
    assert server_image(kube) == "mysql:9.9"
    found = degraded(kube)
    assert (found["status"], found["reason"]) == ("True", VERSION_DOWNGRADE)


def configure_env(kube: FakeKube) -> dict[str, str]:
    sts = kube.peek(StatefulSet, "ns", "db-mysql")
    assert sts is not None
    (configure,) = sts["spec"]["template"]["spec"]["initContainers"]
    return {e["name"]: e.get("value", "") for e in configure["env"] if "valueFrom" not in e}


def test_an_upgrade_asked_for_is_recorded_and_lets_only_that_release_be_opened_by_the_new_one(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster(version="8.0"))
    reconciler.reconcile(KEY)
    rolled_out(kube, reconciler)
    env = configure_env(kube)
    assert (env["SERVER_VERSION"], env["UPGRADE_FROM"], env["CLUSTER_NAME"]) == ("8.0", "", "db")
    kube.patch_merge(MySQLCluster, "ns", "db", {"spec": {"version": "8.4"}})
    reconciler.reconcile(KEY)
    assert live(kube)["status"]["upgradeFrom"] == "8.0"
    assert (configure_env(kube)["SERVER_VERSION"], configure_env(kube)["UPGRADE_FROM"]) == ("8.4", "8.0")
    generation = kube.peek(StatefulSet, "ns", "db-mysql")["metadata"]["generation"]  # type: ignore[index]
    rolled_out(kube, reconciler)
    assert live(kube)["status"]["version"] == "8.4"
    reconciler.reconcile(KEY)
    after = kube.peek(StatefulSet, "ns", "db-mysql")
    assert after is not None and after["metadata"]["generation"] == generation, "no second rollout"


def test_a_pod_whose_datadir_is_not_its_engines_or_releases_is_degraded_naming_both(
    reconciler: MySQLClusterReconciler, kube: FakeKube
) -> None:
    kube.put(MySQLCluster, cluster(version="8.4"))
    reconciler.reconcile(KEY)
    refused = (
        "DatadirMismatch: pod db-mysql-0's datadir was written by mysql 8.0; this pod runs mysql 8.4: "
        "set spec.version to 8.0 to run it as it is (upgrade later by changing spec.version)"
    )
    ended = {"terminated": {"exitCode": 1, "message": refused}}
    init = [{"name": "configure", "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": ended}]
    kube.put(Pod, database_pod(0, status={"initContainerStatuses": init}))
    reconciler.reconcile(KEY)
    problem = degraded(kube)
    assert problem["reason"] == "DatadirMismatch"
    assert (
        "pod db-mysql-0 cannot start" in problem["message"] and "written by mysql 8.0" in problem["message"]
    )
    assert "runs mysql 8.4" in problem["message"]
