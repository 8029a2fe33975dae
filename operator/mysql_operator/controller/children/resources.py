"""Pure builders: a MySQLCluster (as the apiserver returns it) in, the desired child objects out.

Every child carries the common labels (they are also how an orphan proves it is ours, see
`ownership`). Children whose life ends with the cluster (Services, StatefulSet, CronJob) carry a
controller ownerReference, so the garbage collector removes them and their events wake the owner's
reconcile. Data never dies with the cluster: the StatefulSet retains its PVCs, and the credentials
Secret, the backup PVC and the final-backup Job have labels only - the password of kept data must
outlive the CR as the data does, the Job must outlive the CR's last moments, and backups the CR.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...api.v1 import API_VERSION, KIND, MAX_REPLICAS, RETAINED_ANNOTATION, MySQLClusterSpec, parse_spec
from ...database import images
from ...database.backup import ARCHIVE_SCRIPT, DUMP_SCRIPT, RESTORE_SCRIPT
from ...database.engines import engine
from ...database.pod import mysql_pod_spec
from ...database.replication import PRIMARY, ROLE_LABEL
from . import tls
from .quantity import parse_quantity

Obj = dict[str, Any]

MYSQL_PORT = 3306
PASSWORD_KEY = "root-password"
REPLICATION_PASSWORD_KEY = "replication-password"
REPLICATION_KEY_ANNOTATION = "db.example.com/replication-password"
"""On the credentials Secret: it holds REPLICATION_PASSWORD_KEY. Readable from the metadata-only cache,
so a Secret from before that key existed is told apart without reading its data on every pass."""
DATA_VOLUME = "data"
DATA_DIR = "/var/lib/mysql"
BACKUP_DIR = "/backup"
RESTORE_DIR = "/restore"
"""Where a restoring pod mounts the source cluster's backup PVC (read-only)."""
# The final backup's image (tar and find with no surprises) is configurable: images.Images.backup.
CLUSTER_UID_ANNOTATION = "db.example.com/cluster-uid"
FINAL_BACKUP_DEADLINE_FLOOR_SECONDS = 600
"""Every final backup gets this long, whatever the size: pod scheduling, volume attach, image pull."""
FINAL_BACKUP_MIN_BYTES_PER_SECOND = 5 * 2**20
"""The slowest archive rate planned for (5 MiB/s: a throttled CPU running `gzip -1` on a network disk;
kind on a busy 2-CPU machine measured 10-14 MiB/s, see the README). A final backup still running after
`floor + data volume size / this rate` fails, so a stuck one cannot hold the finalizer forever, while
a large healthy one is not cut short as a fixed deadline would."""
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

    def pod(self, ordinal: int) -> str:
        return f"{self.statefulset}-{ordinal}"

    @property
    def first_pod(self) -> str:
        """Pod 0: the primary at creation (and the one a restore fills)."""
        return self.pod(0)

    @staticmethod
    def data_claim(pod: str) -> str:
        """The StatefulSet controller names claims `<template>-<pod>`."""
        return f"{DATA_VOLUME}-{pod}"

    @property
    def tls_secret(self) -> str:
        return f"{self.cluster}-tls"

    @property
    def backup_pvc(self) -> str:
        return f"{self.cluster}-backup"

    @property
    def cronjob(self) -> str:
        return f"{self.cluster}-backup"

    @property
    def final_backup_job(self) -> str:
        return f"{self.cluster}-final-backup"

    @property
    def source_backup_pvc(self) -> str:
        """Read as the source of a restore: the backup PVC of the cluster named `cluster`."""
        return self.backup_pvc

    def primary_host(self, namespace: str) -> str:
        """Clients', replicas' and the backup's address of the primary: the Service that selects the pod
        labelled primary."""
        return f"{self.primary_service}.{namespace}.svc"

    def pod_host(self, ordinal: int, namespace: str) -> str:
        return f"{self.statefulset}-{ordinal}.{self.service}.{namespace}.svc"

    def hosts(self, namespace: str) -> list[str]:
        """Every name a server of the cluster may be reached by (its TLS certificate names them all)."""
        short = [self.primary_host(namespace)] + [self.pod_host(i, namespace) for i in range(MAX_REPLICAS)]
        return [*short, *(f"{h}.cluster.local" for h in short)]


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


def primary_pod(cluster: Obj) -> str:
    """The pod that is the primary (`status.primary`), else pod 0, the primary a cluster starts with."""
    recorded = (cluster.get("status") or {}).get("primary")
    return str(recorded) if recorded else Names(_name(cluster)).first_pod


def primary_data_claim(cluster: Obj) -> str:
    """The primary's data PersistentVolumeClaim: what the final backup archives."""
    return Names.data_claim(primary_pod(cluster))


def database_selector(name: str) -> str:
    """Label selector (for a LIST) of cluster `name`'s database pods."""
    return ",".join(f"{k}={v}" for k, v in pod_labels(name, "database").items())


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


def password_env(cluster: Obj, env_name: str, key: str = PASSWORD_KEY) -> Obj:
    ref = {"name": Names(_name(cluster)).secret, "key": key}
    return {"name": env_name, "valueFrom": {"secretKeyRef": ref}}


def credentials_secret(cluster: Obj, password: str | None = None, *, copied_from: Obj | None = None) -> Obj:
    """Created once and never rewritten: a new password would lock the running database out.

    No ownerReference: the data volumes are retained when the cluster goes, so their root password
    must be too; a cluster re-created under the same name reuses it (the kept datadir ignores
    MYSQL_ROOT_PASSWORD anyway). The annotation is what tells such a Secret from a foreign one.

    `copied_from`: the source cluster's Secret of a restore. Its keys are copied as they are: the
    restored datadir holds the source's root (and replication) password. A key it lacks is generated.
    """
    meta = _metadata(cluster, Names(_name(cluster)).secret, owned=False)
    meta["annotations"] = {RETAINED_ANNOTATION: "true", REPLICATION_KEY_ANNOTATION: "true"}
    copied = dict((copied_from or {}).get("data") or {})
    generated = {
        PASSWORD_KEY: password or secrets.token_urlsafe(24),
        REPLICATION_PASSWORD_KEY: secrets.token_urlsafe(24),
    }
    secret: Obj = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
    }
    if copied:
        secret["data"] = copied
    if missing := {k: v for k, v in generated.items() if k not in copied}:
        secret["stringData"] = missing
    return secret


def tls_secret(cluster: Obj, now: datetime | None = None) -> Obj:
    """The replication TLS of the cluster (`tls.py`): made once, owned by the cluster (a new cluster of
    the name makes a new CA; nothing in a datadir depends on the old one)."""
    names = Names(_name(cluster))
    files = tls.issue(names.cluster, names.hosts(cluster["metadata"]["namespace"]), now)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(cluster, names.tls_secret),
        "type": "kubernetes.io/tls",
        "data": tls.secret_data(files),
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
    """A ClusterIP Service for the pod labelled primary only: where writes go, and where replicas
    replicate from. The operator moves the label on a failover or switchover. Not
    publishNotReadyAddresses: clients should reach a primary that answers and is writable."""
    name = _name(cluster)
    names = Names(name)
    selector = {**pod_labels(name, "database"), ROLE_LABEL: PRIMARY}
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
                    engine=engine(spec.engine),
                    image=images.current().database(spec.engine, spec.image_tag),
                    password_env=password_env(cluster, "MYSQL_ROOT_PASSWORD"),
                    replication_password_env=password_env(
                        cluster, "REPLICATION_PASSWORD", REPLICATION_PASSWORD_KEY
                    ),
                    primary_host=names.primary_host(namespace),
                    resources=container_resources(spec),
                    data_volume=DATA_VOLUME,
                    data_dir=DATA_DIR,
                    port=MYSQL_PORT,
                    tls_secret=names.tls_secret,
                    semi_sync=spec.replication.semi_sync,
                    # Once restored, pod 0 no longer needs the source's backups: the claim may go.
                    **({} if (cluster.get("status") or {}).get("restoredFrom") else _restore_parts(spec)),
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


def backup_size(spec: MySQLClusterSpec) -> str:
    """The backup volume's request: one final archive plus the retained dumps.

    Rule: `data size * (1 + (retentionDays + 1) / 2)`, in whole MiB. The archive is planned at the full
    data volume size (incompressible data; gzip usually halves it), each dump at half of it (a gzipped
    logical dump is far smaller than InnoDB's pages), and daily dumps are kept `retentionDays + 1` at
    most (pruning is by whole days). A schedule more often than daily needs a larger class or a volume
    expansion: the request is fixed when the PVC is created.
    """
    data = parse_quantity(spec.storage.size)
    wanted = data * (spec.backup.retention_days + 3) / 2  # = data * (1 + (retentionDays + 1) / 2)
    return f"{math.ceil(wanted / 2**20)}Mi"


def backup_pvc(cluster: Obj) -> Obj:
    """Where dumps and final archives go (size: `backup_size`).

    Same StorageClass as the data. Where it is provisioned is the class's `volumeBindingMode`: with
    WaitForFirstConsumer (local-path, every zonal cloud class) the volume is made where its first
    consumer is scheduled, which the dump pods' affinity to pod 0 and the final backup Job's affinity
    to the data volume's node or zone (`final_backup_job`) keep in the data's zone. With Immediate it
    lands anywhere, and a zonal final backup Job may then be unschedulable.
    """
    spec = parse_spec(cluster)
    claim = volume_claim_spec(spec)
    claim["resources"] = {"requests": {"storage": backup_size(spec)}}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(cluster, Names(_name(cluster)).backup_pvc, owned=False),
        "spec": claim,
    }


def _restore_parts(spec: MySQLClusterSpec) -> Obj:
    """`mysql_pod_spec`'s extra init container and volume when the cluster restores; none otherwise."""
    if spec.restore is None:
        return {}
    source = Names(spec.restore.from_cluster)
    container = {
        "name": "restore",
        "image": images.current().backup,  # busybox: sh, tar, gzip
        "command": ["sh", "-c", RESTORE_SCRIPT],
        "env": [
            {"name": "SOURCE_CLUSTER", "value": source.cluster},
            {"name": "SOURCE_PVC", "value": source.source_backup_pvc},
        ],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": DATA_VOLUME, "mountPath": DATA_DIR},
            {"name": "restore", "mountPath": RESTORE_DIR, "readOnly": True},
        ],
    }
    volume = {
        "name": "restore",
        "persistentVolumeClaim": {"claimName": source.source_backup_pvc, "readOnly": True},
    }
    return {"first_init": (container,), "volumes": (volume,)}


def _backup_volume(cluster: Obj) -> Obj:
    return {"name": "backup", "persistentVolumeClaim": {"claimName": Names(_name(cluster)).backup_pvc}}


def backup_cronjob(cluster: Obj) -> Obj:
    name, spec = _name(cluster), parse_spec(cluster)
    names = Names(name)
    namespace = cluster["metadata"]["namespace"]
    container = {
        "name": "mysqldump",
        "image": images.current().database(spec.engine, spec.image_tag),
        "command": ["sh", "-c", DUMP_SCRIPT],
        "env": [
            password_env(cluster, "MYSQL_PWD"),
            {"name": "DUMP", "value": engine(spec.engine).dump},
            {"name": "MYSQL_HOST", "value": names.primary_host(namespace)},
            {"name": "RETENTION_DAYS", "value": str(spec.backup.retention_days)},
        ],
        "volumeMounts": [{"name": "backup", "mountPath": BACKUP_DIR}],
    }
    # Preferred, not required: the primary may be down when a dump is due (the dump then fails on its
    # own). The first dump pod is usually the backup volume's first consumer (WaitForFirstConsumer), so
    # this also puts that volume on the primary's node or zone, where the final backup Job needs it.
    primary = {"matchLabels": {**pod_labels(name, "database"), ROLE_LABEL: PRIMARY}}
    near_primary = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": weight, "podAffinityTerm": {"labelSelector": primary, "topologyKey": key}}
                for weight, key in ((100, "kubernetes.io/hostname"), (50, "topology.kubernetes.io/zone"))
            ]
        }
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
                            "affinity": near_primary,
                            "containers": [container],
                            "volumes": [_backup_volume(cluster)],
                        },
                    },
                },
            },
        },
    }


def final_backup_deadline(spec: MySQLClusterSpec) -> int:
    """activeDeadlineSeconds of the final backup: a floor plus the data volume's size at the slowest
    rate planned for (`FINAL_BACKUP_MIN_BYTES_PER_SECOND`)."""
    size = parse_quantity(spec.storage.size)
    return FINAL_BACKUP_DEADLINE_FLOOR_SECONDS + math.ceil(size / FINAL_BACKUP_MIN_BYTES_PER_SECOND)


def final_backup_job(cluster: Obj, data_node_affinity: Obj | None = None) -> Obj:
    """Archive the primary's data volume, mounted read-only, into the backup PVC.

    `data_node_affinity`: the data PersistentVolume's `spec.nodeAffinity.required` (a local-path
    volume names its node, a zonal disk its zone), made the pod's required node affinity. The
    scheduler would honour the data volume's affinity anyway; stating it on the Job puts the backup
    volume, when this Job is its first consumer (WaitForFirstConsumer), in the same place, instead of
    wherever the backup volume alone would have fit.

    Created only once every database pod is gone (`controller.finalizer` scales the StatefulSet to 0 first):
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
        "persistentVolumeClaim": {"claimName": primary_data_claim(cluster), "readOnly": True},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": final_backup_deadline(parse_spec(cluster)),
            "ttlSecondsAfterFinished": FINAL_BACKUP_TTL_SECONDS,
            "template": {
                "metadata": {"labels": pod_labels(name, "final-backup")},
                "spec": {
                    "restartPolicy": "Never",
                    **(
                        {
                            "affinity": {
                                "nodeAffinity": {
                                    "requiredDuringSchedulingIgnoredDuringExecution": data_node_affinity
                                }
                            }
                        }
                        if data_node_affinity
                        else {}
                    ),
                    "containers": [
                        {
                            "name": "archive",
                            "image": images.current().backup,
                            "command": ["sh", "-c", ARCHIVE_SCRIPT],
                            "env": [{"name": "CLUSTER_UID", "value": cluster["metadata"]["uid"]}],
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
