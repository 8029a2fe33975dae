"""Pure builders: a MySQLCluster (as the apiserver returns it) in, the desired child objects out.

Every child carries the common labels (they are also how an orphan proves it is ours, see
`ownership.py`). Children whose life ends with the cluster (Services, StatefulSet, CronJob) carry a
controller ownerReference, so the garbage collector removes them and their events wake the owner's
reconcile. Data never dies with the cluster: the StatefulSet retains its PVCs, and the credentials
Secret, the backup PVC and the final-backup Job have labels only - the password of kept data must
outlive the CR as the data does, the Job must outlive the CR's last moments, and backups the CR.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from . import images
from .api import API_VERSION, KIND, RETAINED_ANNOTATION, MySQLClusterSpec, parse_spec
from .replication import mysql_pod_spec

Obj = dict[str, Any]

MYSQL_PORT = 3306
PASSWORD_KEY = "root-password"
DATA_VOLUME = "data"
DATA_DIR = "/var/lib/mysql"
BACKUP_DIR = "/backup"
# The final backup's image (tar and find with no surprises) is configurable: images.Images.backup.
CLUSTER_UID_ANNOTATION = "db.example.com/cluster-uid"
FINAL_BACKUP_DEADLINE_SECONDS = 3600
"""A final backup still running after this long fails, so a stuck one cannot hold the finalizer forever."""
FINAL_BACKUP_TTL_SECONDS = 3600
"""A finished final-backup Job is kept this long: the finalizer comes off while it still exists (its
success is already in the cluster's status), and the TTL controller cleans it up."""


@dataclass(frozen=True)
class Names:
    """Names of everything the operator makes for the cluster `name`."""

    cluster: str

    @property
    def secret(self) -> str:
        return f"{self.cluster}-credentials"

    @property
    def service(self) -> str:
        return f"{self.cluster}-headless"

    @property
    def primary_service(self) -> str:
        return f"{self.cluster}-primary"

    @property
    def statefulset(self) -> str:
        return f"{self.cluster}-mysql"

    @property
    def primary_pod(self) -> str:
        return f"{self.statefulset}-0"

    @property
    def primary_data_pvc(self) -> str:
        """The StatefulSet controller names claims `<template>-<pod>`."""
        return f"{DATA_VOLUME}-{self.primary_pod}"

    @property
    def backup_pvc(self) -> str:
        return f"{self.cluster}-backup"

    @property
    def cronjob(self) -> str:
        return f"{self.cluster}-backup"

    @property
    def final_backup_job(self) -> str:
        return f"{self.cluster}-final-backup"

    def primary_host(self, namespace: str) -> str:
        """Clients' (and the backup's) address of the primary: the Service that selects pod 0 only."""
        return f"{self.primary_service}.{namespace}.svc"

    def pod_host(self, ordinal: int, namespace: str) -> str:
        return f"{self.statefulset}-{ordinal}.{self.service}.{namespace}.svc"


INSTANCE_LABEL = "app.kubernetes.io/instance"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "mysql-operator"


def labels(name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "mysql",
        INSTANCE_LABEL: name,
        MANAGED_BY_LABEL: MANAGED_BY,
    }


def pod_labels(name: str, component: str) -> dict[str, str]:
    # The component keeps backup pods out of the StatefulSet's selector and the Service's endpoints.
    return {**labels(name), "app.kubernetes.io/component": component}


def owner_reference(cluster: Obj) -> Obj:
    meta = cluster["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(cluster: Obj, name: str, *, owned: bool = True) -> Obj:
    meta: Obj = {
        "name": name,
        "namespace": cluster["metadata"]["namespace"],
        "labels": labels(_name(cluster)),
    }
    if owned:
        meta["ownerReferences"] = [owner_reference(cluster)]
    return meta


def _name(cluster: Obj) -> str:
    return cluster["metadata"]["name"]


def password_env(cluster: Obj, env_name: str) -> Obj:
    ref = {"name": Names(_name(cluster)).secret, "key": PASSWORD_KEY}
    return {"name": env_name, "valueFrom": {"secretKeyRef": ref}}


def credentials_secret(cluster: Obj, password: str | None = None) -> Obj:
    """Created once and never rewritten: a new password would lock the running database out.

    No ownerReference: the data volumes are retained when the cluster goes, so their root password
    must be too; a cluster re-created under the same name reuses it (the kept datadir ignores
    MYSQL_ROOT_PASSWORD anyway). The annotation is what tells such a Secret from a foreign one.
    """
    meta = _metadata(cluster, Names(_name(cluster)).secret, owned=False)
    meta["annotations"] = {RETAINED_ANNOTATION: "true"}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "stringData": {PASSWORD_KEY: password or secrets.token_urlsafe(24)},
    }


def headless_service(cluster: Obj) -> Obj:
    name = _name(cluster)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(cluster, Names(name).service),
        "spec": {
            "clusterIP": "None",
            # Pods get DNS names before they are ready, so replicas can find the primary while starting.
            "publishNotReadyAddresses": True,
            "selector": pod_labels(name, "database"),
            "ports": [{"name": "mysql", "port": MYSQL_PORT, "targetPort": MYSQL_PORT}],
        },
    }


def primary_service(cluster: Obj) -> Obj:
    """A ClusterIP Service for pod 0 only: where writes go. Not publishNotReadyAddresses: clients
    should reach a primary that answers, unlike replicas looking for their source while starting."""
    name = _name(cluster)
    names = Names(name)
    selector = {**pod_labels(name, "database"), "statefulset.kubernetes.io/pod-name": names.primary_pod}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(cluster, names.primary_service),
        "spec": {
            "selector": selector,
            "ports": [{"name": "mysql", "port": MYSQL_PORT, "targetPort": MYSQL_PORT}],
        },
    }


def container_resources(spec: MySQLClusterSpec) -> Obj:
    """Requests equal limits (Guaranteed QoS for what is given); `{}` when nothing is given."""
    wanted = {k: v for k, v in (spec.resources.model_dump() if spec.resources else {}).items() if v}
    return {"requests": dict(wanted), "limits": dict(wanted)} if wanted else {}


def statefulset(cluster: Obj) -> Obj:
    name, spec = _name(cluster), parse_spec(cluster)
    names = Names(name)
    namespace = cluster["metadata"]["namespace"]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _metadata(cluster, names.statefulset),
        "spec": {
            "replicas": spec.replicas,
            "serviceName": names.service,
            "selector": {"matchLabels": pod_labels(name, "database")},
            # Deleting the cluster or scaling down never deletes data.
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
            "template": {
                "metadata": {"labels": pod_labels(name, "database")},
                "spec": mysql_pod_spec(
                    image=images.current().mysql(spec.version),
                    password_env=password_env(cluster, "MYSQL_ROOT_PASSWORD"),
                    primary_host=names.pod_host(0, namespace),
                    resources=container_resources(spec),
                    data_volume=DATA_VOLUME,
                    data_dir=DATA_DIR,
                    port=MYSQL_PORT,
                ),
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": DATA_VOLUME, "labels": labels(name)},
                    "spec": volume_claim_spec(spec),
                }
            ],
        },
    }


def volume_claim_spec(spec: MySQLClusterSpec) -> Obj:
    """Data and backup volumes alike: the backup volume must live wherever the data may be restored."""
    claim: Obj = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": spec.storage.size}}}
    if spec.storage.storage_class_name:
        claim["storageClassName"] = spec.storage.storage_class_name
    return claim


def backup_pvc(cluster: Obj) -> Obj:
    """Where dumps and final archives go; sized like one data volume, which holds a compressed copy."""
    spec = parse_spec(cluster)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(cluster, Names(_name(cluster)).backup_pvc, owned=False),
        "spec": volume_claim_spec(spec),
    }


# Write under a dot-name and rename, so a half-written dump is never taken for a good one.
# find rounds ages down to whole days: -mtime +(N-1) matches files at least N days old.
DUMP_SCRIPT = """set -eu
stamp=$(date -u +%Y%m%dT%H%M%SZ)
mysqldump -h "$MYSQL_HOST" -u root --all-databases --single-transaction --routines --events \
  --triggers > "/backup/.dump-$stamp.sql"
gzip "/backup/.dump-$stamp.sql"
mv "/backup/.dump-$stamp.sql.gz" "/backup/dump-$stamp.sql.gz"
find /backup -maxdepth 1 -name 'dump-*.sql.gz' -mtime "+$((RETENTION_DAYS - 1))" -delete
"""

ARCHIVE_SCRIPT = """set -eu
stamp=$(date -u +%Y%m%dT%H%M%SZ)
tar -czf "/backup/.final-$stamp.tar.gz" -C /var/lib/mysql .
mv "/backup/.final-$stamp.tar.gz" "/backup/final-$stamp.tar.gz"
"""


def _backup_volume(cluster: Obj) -> Obj:
    return {"name": "backup", "persistentVolumeClaim": {"claimName": Names(_name(cluster)).backup_pvc}}


def backup_cronjob(cluster: Obj) -> Obj:
    name, spec = _name(cluster), parse_spec(cluster)
    names = Names(name)
    namespace = cluster["metadata"]["namespace"]
    container = {
        "name": "mysqldump",
        "image": images.current().mysql(spec.version),
        "command": ["sh", "-c", DUMP_SCRIPT],
        "env": [
            password_env(cluster, "MYSQL_PWD"),
            {"name": "MYSQL_HOST", "value": names.primary_host(namespace)},
            {"name": "RETENTION_DAYS", "value": str(spec.backup.retention_days)},
        ],
        "volumeMounts": [{"name": "backup", "mountPath": BACKUP_DIR}],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": _metadata(cluster, names.cronjob),
        "spec": {
            "schedule": spec.backup.schedule.cron,
            **({"timeZone": spec.backup.schedule.time_zone} if spec.backup.schedule.time_zone else {}),
            # Two dumps at once would only compete for the same primary and volume.
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": pod_labels(name, "backup")},
                "spec": {
                    "backoffLimit": 2,
                    "template": {
                        "metadata": {"labels": pod_labels(name, "backup")},
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [container],
                            "volumes": [_backup_volume(cluster)],
                        },
                    },
                },
            },
        },
    }


def final_backup_job(cluster: Obj) -> Obj:
    """Archive the primary's data volume, mounted read-only, into the backup PVC.

    Created only once every database pod is gone (`finalizer.py` scales the StatefulSet to 0 first):
    mysqld has shut down cleanly, so the datadir is consistent for every engine, and the volume is
    free to attach wherever this pod lands (ReadWriteOnce). backoffLimit 0: the reconciler retries
    a failure itself, counting attempts in status and backing off.
    """
    name = _name(cluster)
    names = Names(name)
    meta = _metadata(cluster, names.final_backup_job, owned=False)
    meta["labels"] = pod_labels(name, "final-backup")
    # The Job outlives the CR; the uid tells a leftover of an earlier cluster of the same name.
    meta["annotations"] = {CLUSTER_UID_ANNOTATION: cluster["metadata"]["uid"]}
    data_volume = {
        "name": DATA_VOLUME,
        "persistentVolumeClaim": {"claimName": names.primary_data_pvc, "readOnly": True},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": FINAL_BACKUP_DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": FINAL_BACKUP_TTL_SECONDS,
            "template": {
                "metadata": {"labels": pod_labels(name, "final-backup")},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "archive",
                            "image": images.current().backup,
                            "command": ["sh", "-c", ARCHIVE_SCRIPT],
                            "volumeMounts": [
                                {"name": DATA_VOLUME, "mountPath": DATA_DIR, "readOnly": True},
                                {"name": "backup", "mountPath": BACKUP_DIR},
                            ],
                        }
                    ],
                    "volumes": [data_volume, _backup_volume(cluster)],
                },
            },
        },
    }
