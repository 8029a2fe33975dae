"""Pure builders: a MySQLCluster (as the apiserver returns it) in, the desired child objects out.

Every child carries the common labels. Children whose life ends with the cluster (Secret, Service,
StatefulSet, CronJob) carry a controller ownerReference, so the garbage collector removes them and
their events wake the owner's reconcile. Data never dies with the cluster: the StatefulSet retains
its PVCs, and the backup PVC and the final-backup Job have labels only - the Job must outlive the
CR's last moments, and backups must outlive the CR.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from .api import API_VERSION, KIND, MySQLClusterSpec, parse_spec

Obj = dict[str, Any]

MYSQL_PORT = 3306
PASSWORD_KEY = "root-password"
DATA_VOLUME = "data"
DATA_DIR = "/var/lib/mysql"
BACKUP_DIR = "/backup"
# tar and find with no surprises; the mysql image's userland varies between its tags.
ARCHIVE_IMAGE = "busybox:1.36"
CLUSTER_UID_ANNOTATION = "db.example.com/cluster-uid"
FINAL_BACKUP_DEADLINE_SECONDS = 3600
"""A final backup still running after this long fails, so a stuck one cannot hold the finalizer forever."""


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
        return f"{self.primary_pod}.{self.service}.{namespace}.svc"


def labels(name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "mysql",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/managed-by": "mysql-operator",
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


def _password_env(cluster: Obj, env_name: str) -> Obj:
    ref = {"name": Names(_name(cluster)).secret, "key": PASSWORD_KEY}
    return {"name": env_name, "valueFrom": {"secretKeyRef": ref}}


def credentials_secret(cluster: Obj, password: str | None = None) -> Obj:
    """Created once and never rewritten: a new password would lock the running database out."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(cluster, Names(_name(cluster)).secret),
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


def container_resources(spec: MySQLClusterSpec) -> Obj:
    """Requests equal limits (Guaranteed QoS for what is given); `{}` when nothing is given."""
    wanted = {k: v for k, v in (spec.resources.model_dump() if spec.resources else {}).items() if v}
    return {"requests": dict(wanted), "limits": dict(wanted)} if wanted else {}


def statefulset(cluster: Obj) -> Obj:
    name, spec = _name(cluster), parse_spec(cluster)
    names = Names(name)
    probe_command = 'MYSQL_PWD="$MYSQL_ROOT_PASSWORD" mysqladmin ping -h 127.0.0.1 -u root'
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
                "spec": {
                    "containers": [
                        {
                            "name": "mysql",
                            "image": f"mysql:{spec.version}",
                            "ports": [{"name": "mysql", "containerPort": MYSQL_PORT}],
                            "env": [_password_env(cluster, "MYSQL_ROOT_PASSWORD")],
                            "resources": container_resources(spec),
                            # TCP on 127.0.0.1 answers only once the real server is up: the image's
                            # init phase runs a temporary server with networking off.
                            "readinessProbe": {
                                "exec": {"command": ["sh", "-c", probe_command]},
                                "initialDelaySeconds": 5,
                                "periodSeconds": 10,
                                "timeoutSeconds": 5,
                            },
                            "volumeMounts": [{"name": DATA_VOLUME, "mountPath": DATA_DIR}],
                        }
                    ],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": DATA_VOLUME, "labels": labels(name)},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": spec.storage_size}},
                    },
                }
            ],
        },
    }


def backup_pvc(cluster: Obj) -> Obj:
    """Where dumps and final archives go; sized like one data volume, which holds a compressed copy."""
    spec = parse_spec(cluster)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(cluster, Names(_name(cluster)).backup_pvc, owned=False),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": spec.storage_size}},
        },
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
        "image": f"mysql:{spec.version}",
        "command": ["sh", "-c", DUMP_SCRIPT],
        "env": [
            _password_env(cluster, "MYSQL_PWD"),
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
            "schedule": spec.backup.schedule,
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

    It needs no running database, so it works whatever the deletion propagation did to the pods.
    backoffLimit 0: the reconciler retries a failure itself (delete, then recreate with backoff).
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
            "template": {
                "metadata": {"labels": pod_labels(name, "final-backup")},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "archive",
                            "image": ARCHIVE_IMAGE,
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
