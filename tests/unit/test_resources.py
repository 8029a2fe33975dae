"""Child builders: names, labels, owner references, and the settings that protect data."""

from __future__ import annotations

from typing import Any

import pytest
from operator_fakes import cluster

from mysql_operator.controller.children import backups, resources
from mysql_operator.database import replication
from mysql_operator.database.engines import MARIADB, MYSQL

COMMON = {
    "app.kubernetes.io/name": "mysql",
    "app.kubernetes.io/instance": "db",
    "app.kubernetes.io/managed-by": "mysql-operator",
}


def live(**spec: Any) -> dict[str, Any]:
    obj = cluster(**spec)
    obj["metadata"] |= {"uid": "uid-1", "resourceVersion": "7", "generation": 1}
    return obj


OWNED = [
    resources.headless_service,
    resources.primary_service,
    resources.statefulset,
    backups.backup_cronjob,
]
UNOWNED = [resources.credentials_secret, backups.backup_pvc, backups.final_backup_job]


def container(sts: dict[str, Any], name: str = "mysql") -> dict[str, Any]:
    (c,) = [c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return c


@pytest.mark.parametrize("build", OWNED + UNOWNED)
def test_every_child_carries_the_common_labels_in_the_cluster_namespace(build: Any) -> None:
    meta = build(live())["metadata"]
    assert meta["labels"].items() >= COMMON.items()
    assert meta["namespace"] == "ns"


@pytest.mark.parametrize("build", OWNED)
def test_owned_children_have_one_controller_owner_reference(build: Any) -> None:
    (ref,) = build(live())["metadata"]["ownerReferences"]
    assert ref == {
        "apiVersion": "db.example.com/v1",  # the hub: what the operator reads and writes
        "kind": "MySQLCluster",
        "name": "db",
        "uid": "uid-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }


@pytest.mark.parametrize("build", UNOWNED)
def test_credentials_backup_storage_and_final_job_outlive_the_cluster(build: Any) -> None:
    assert "ownerReferences" not in build(live())["metadata"]


def test_child_names() -> None:
    names = resources.Names("db")
    assert (names.secret, names.service, names.statefulset) == ("db-credentials", "db-headless", "db-mysql")
    assert (names.cronjob, names.backup_pvc, names.final_backup_job) == (
        "db-backup",
        "db-backup",
        "db-final-backup",
    )
    assert (names.first_pod, names.data_claim("db-mysql-2")) == ("db-mysql-0", "data-db-mysql-2")
    assert names.tls_secret == "db-tls"
    assert names.primary_service == "db-primary"
    assert names.primary_host("ns") == "db-primary.ns.svc"
    assert names.pod_host(0, "ns") == "db-mysql-0.db-headless.ns.svc"


@pytest.mark.parametrize("key", [resources.PASSWORD_KEY, resources.REPLICATION_PASSWORD_KEY])
def test_secret_holds_fresh_random_passwords(key: str) -> None:
    a = resources.credentials_secret(live())["stringData"][key]
    b = resources.credentials_secret(live())["stringData"][key]
    assert a != b and len(a) >= 24


def test_the_replication_account_has_its_own_password() -> None:
    data = resources.credentials_secret(live(), password="given")["stringData"]
    assert data.keys() == {"root-password", "replication-password"}
    assert data["root-password"] == "given" and data["replication-password"] != "given"


def test_statefulset_reads_the_root_password_from_the_secret() -> None:
    (password,) = container(resources.statefulset(live()))["env"]
    assert password == {
        "name": "MYSQL_ROOT_PASSWORD",
        "valueFrom": {"secretKeyRef": {"name": "db-credentials", "key": "root-password"}},
    }


def test_retained_secret_is_marked_and_labelled() -> None:
    meta = resources.credentials_secret(live())["metadata"]
    # retained: ours, kept with the data; replication-password: holds the replication account's key.
    assert meta["annotations"] == {
        "db.example.com/retained": "true",
        "db.example.com/replication-password": "true",
    }
    assert meta["labels"] == COMMON


def test_primary_service_selects_the_pod_labelled_primary_only() -> None:
    svc = resources.primary_service(live(replicas=3))
    assert svc["metadata"]["name"] == "db-primary"
    assert "clusterIP" not in svc["spec"], "a ClusterIP Service: one stable address for writes"
    assert svc["spec"]["selector"] == {
        **resources.pod_labels("db", "database"),
        "db.example.com/role": "primary",
    }
    assert svc["spec"]["ports"] == [{"name": "mysql", "port": 3306, "targetPort": 3306}]


@pytest.mark.parametrize("engine", [MYSQL, MARIADB], ids=lambda e: e.name)
def test_every_pod_is_configured_from_its_ordinal_before_the_server_starts(engine: Any) -> None:
    """The scripts' behaviour is pinned by running them (test_engine_scripts.py); here, that the pod
    runs the engine's scripts with the volumes they work on."""
    sts = resources.statefulset(live(replicas=3, engine=engine.name))
    pod = sts["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["image"] == container(sts)["image"]
    assert init["command"] == ["sh", "-c", replication.configure_script(engine, "/var/lib/mysql")]
    mounts = {m["mountPath"]: m["name"] for m in init["volumeMounts"]}
    shared = {
        "/etc/mysql/conf.d": "conf",
        "/docker-entrypoint-initdb.d": "initdb",
        "/var/lib/mysql": "data",
        "/run/mysql-operator": "run",
    }
    assert mounts == {**shared, "/etc/mysql-operator/tls": "tls"}, "only configure reads the TLS Secret"
    server_mounts = {m["mountPath"]: m["name"] for m in container(sts)["volumeMounts"]}
    assert server_mounts == {**shared, "/etc/podinfo": "podinfo"}, "what configure wrote, and its role"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["run"]["emptyDir"]["medium"] == "Memory", "the clients' option file never on disk"
    assert volumes["tls"]["secret"] == {"secretName": "db-tls", "defaultMode": 0o400}
    assert volumes["podinfo"]["downwardAPI"]["items"] == [
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
    ]
    probe = container(sts)["readinessProbe"]["exec"]["command"]
    assert probe == ["sh", "-c", replication.probe_script(engine)]
    start = ["sh", "-c", replication.start_script(engine, "/var/lib/mysql"), "sh", engine.server]
    assert container(sts)["command"] == start, "every start settles the datadir, then the image's entrypoint"
    assert "args" not in container(sts)


@pytest.mark.parametrize("engine", [MYSQL, MARIADB], ids=lambda e: e.name)
def test_the_replication_sidecar_runs_the_engines_script_with_its_own_account(engine: Any) -> None:
    sts = resources.statefulset(live(replicas=3, engine=engine.name))
    assert [c["name"] for c in sts["spec"]["template"]["spec"]["containers"]] == ["mysql", "replication"]
    sidecar = container(sts, "replication")
    assert sidecar["image"] == container(sts)["image"]
    assert sidecar["command"] == ["sh", "-c", replication.replication_script(engine)]
    secret = "db-credentials"
    assert sidecar["env"] == [
        {
            "name": "REPLICATION_PASSWORD",
            "valueFrom": {"secretKeyRef": {"name": secret, "key": "replication-password"}},
        },
        {"name": "REPLICATION_USER", "value": "repl"},
        {"name": "PRIMARY_HOST", "value": "db-primary.ns.svc"},
        {"name": "SEMI_SYNC", "value": "off"},
    ]
    # Root logs in by the option file; the conf volume carries the start's flag, podinfo its role and
    # annotations, the data volume the datadir's fresh marker.
    assert [m["name"] for m in sidecar["volumeMounts"]] == ["conf", "run", "podinfo", "data"]


def test_the_sidecar_keeps_a_guaranteed_pod_guaranteed() -> None:
    sts = resources.statefulset(live(resources={"cpu": "500m", "memory": "1Gi"}))
    limits = container(sts, "replication")["resources"]
    assert limits["requests"] == limits["limits"] and set(limits["limits"]) == {"cpu", "memory"}


def test_pods_get_time_for_a_clean_mysqld_shutdown() -> None:
    pod = resources.statefulset(live())["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] >= 60


def test_statefulset_never_deletes_volumes() -> None:
    spec = resources.statefulset(live())["spec"]
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}


def test_statefulset_follows_the_spec() -> None:
    spec = resources.statefulset(live(replicas=3, version="8.4", storage={"size": "5Gi"}))["spec"]
    assert spec["replicas"] == 3 and spec["serviceName"] == "db-headless"
    assert container({"spec": spec})["image"] == "mysql:8.4"
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert "storageClassName" not in claim["spec"], "unset: the cluster's default class decides"
    assert "readinessProbe" in container({"spec": spec})


@pytest.mark.parametrize(("engine", "image"), [("mysql", "mysql:8.4"), ("mariadb", "mariadb:10.11")])
def test_statefulset_default_version_is_the_engines(engine: str, image: str) -> None:
    assert container(resources.statefulset(live(engine=engine)))["image"] == image


def test_statefulset_runs_the_mariadb_image_at_the_spec_version() -> None:
    assert container(resources.statefulset(live(engine="mariadb", version="11.4")))["image"] == "mariadb:11.4"


def test_resources_are_both_requests_and_limits() -> None:
    c = container(resources.statefulset(live(resources={"cpu": "500m", "memory": "1Gi"})))
    wanted = {"cpu": "500m", "memory": "1Gi"}
    assert c["resources"] == {"requests": wanted, "limits": wanted}
    c = container(resources.statefulset(live(resources={"memory": "1Gi"})))
    assert c["resources"] == {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}


def test_no_resources_means_an_empty_block_so_removal_reaches_the_pod() -> None:
    assert container(resources.statefulset(live()))["resources"] == {}


def test_service_is_headless_and_selects_only_database_pods() -> None:
    svc = resources.headless_service(live())["spec"]
    sts = resources.statefulset(live())["spec"]
    assert svc["clusterIP"] == "None"
    assert svc["ports"][0]["port"] == 3306
    assert svc["selector"] == sts["selector"]["matchLabels"]
    assert sts["template"]["metadata"]["labels"].items() >= svc["selector"].items()


def test_backup_pods_stay_out_of_the_statefulset_selector() -> None:
    selector = resources.statefulset(live())["spec"]["selector"]["matchLabels"]
    cron = backups.backup_cronjob(live(backup={"enabled": True}))
    job = backups.final_backup_job(live(backup={"enabled": True}))
    for pod_labels in (
        cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"],
        job["spec"]["template"]["metadata"]["labels"],
    ):
        assert not pod_labels.items() >= selector.items()


def test_cronjob_dumps_the_primary_into_the_backup_pvc_and_prunes() -> None:
    spec = live(backup={"enabled": True, "schedule": {"cron": "30 1 * * *"}, "retentionDays": 3})
    cron = backups.backup_cronjob(spec)["spec"]
    assert cron["schedule"] == "30 1 * * *" and cron["concurrencyPolicy"] == "Forbid"
    assert "timeZone" not in cron
    pod = cron["jobTemplate"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert env["MYSQL_HOST"] == "db-primary.ns.svc"
    assert env["RETENTION_DAYS"] == "3"
    # Not MYSQL_PWD: the script writes the client's option file from it (no password in argv).
    assert env["DB_PASSWORD"] == {"secretKeyRef": {"name": "db-credentials", "key": "root-password"}}
    assert (env["DUMP"], c["image"]) == ("mysqldump", "mysql:8.4")
    script = c["command"][-1]
    assert '"$DUMP" --defaults-extra-file=' in script and "-mtime" in script
    assert pod["volumes"] == [
        {"name": "backup", "persistentVolumeClaim": {"claimName": "db-backup"}},
        {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    ]


@pytest.mark.parametrize("build", ["cronjob", "job"])
def test_backup_pods_run_restricted_as_the_datadirs_owner(build: str) -> None:
    """The `restricted` Pod Security Standard: a namespace that enforces it admits them."""
    for recorded, owner in ((None, (999, 999)), ("105:107", (105, 107))):
        cluster = live(backup={"enabled": True})
        if recorded:
            cluster["status"] = {"datadirOwner": recorded}
        if build == "cronjob":
            pod = backups.backup_cronjob(cluster)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        else:
            pod = backups.final_backup_job(cluster)["spec"]["template"]["spec"]
        context = pod["securityContext"]
        assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (*owner, owner[1])
        assert context["runAsNonRoot"] and context["seccompProfile"] == {"type": "RuntimeDefault"}
        (c,) = pod["containers"]
        assert c["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        }


def test_final_backup_archives_the_primary_volume_read_only() -> None:
    job = backups.final_backup_job(live(backup={"enabled": True}))
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["ttlSecondsAfterFinished"] >= 3600, "kept after success: deletion is idempotent"
    assert job["metadata"]["annotations"] == {backups.CLUSTER_UID_ANNOTATION: "uid-1"}
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    volumes = {v["name"]: v["persistentVolumeClaim"] for v in pod["volumes"]}
    assert volumes["data"] == {"claimName": "data-db-mysql-0", "readOnly": True}
    assert volumes["backup"] == {"claimName": "db-backup"}
    (c,) = pod["containers"]
    assert {"name": "data", "mountPath": "/var/lib/mysql", "readOnly": True} in c["volumeMounts"]
    assert "tar" in c["command"][-1]


def test_backup_pvc_holds_a_data_volume_sized_archive_and_the_retained_dumps() -> None:
    pvc = backups.backup_pvc(live(storage={"size": "3Gi"}, backup={"enabled": True}))
    # 3Gi * (2 archives + (7 days + 1) / 2): see backups.backup_size
    assert pvc["spec"]["resources"]["requests"]["storage"] == f"{18 * 1024}Mi"


def test_storage_class_applies_to_data_and_backup_volumes() -> None:
    cluster = live(storage={"size": "3Gi", "storageClassName": "fast"}, backup={"enabled": True})
    (claim,) = resources.statefulset(cluster)["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "fast"
    assert backups.backup_pvc(cluster)["spec"]["storageClassName"] == "fast"


def test_cronjob_runs_in_the_schedules_time_zone() -> None:
    schedule = {"cron": "0 3 * * *", "timeZone": "Europe/Berlin"}
    cron = backups.backup_cronjob(live(backup={"enabled": True, "schedule": schedule}))["spec"]
    assert (cron["schedule"], cron["timeZone"]) == ("0 3 * * *", "Europe/Berlin")


def test_cronjob_dumps_with_the_engines_own_program() -> None:
    cron = backups.backup_cronjob(live(engine="mariadb", backup={"enabled": True}))
    (c,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert (env["DUMP"], c["image"]) == ("mariadb-dump", "mariadb:10.11")


def test_a_restored_cluster_drops_the_restore_step_and_the_sources_claim() -> None:
    restoring = live(restore={"fromCluster": "old"})
    pod = resources.statefulset(restoring)["spec"]["template"]["spec"]
    assert pod["initContainers"][0]["name"] == "restore"
    assert any(
        (v.get("persistentVolumeClaim") or {}).get("claimName") == "old-backup" for v in pod["volumes"]
    )
    restored = {**restoring, "status": {"restoredFrom": "old"}}
    pod = resources.statefulset(restored)["spec"]["template"]["spec"]
    assert "restore" not in [c["name"] for c in pod["initContainers"]]
    assert not any(
        (v.get("persistentVolumeClaim") or {}).get("claimName") == "old-backup" for v in pod["volumes"]
    )
