"""Pure builders: a MySQLCluster (as the apiserver returns it) in, the desired child objects out.

Every child carries the common labels (they are also how an orphan proves it is ours, see
`ownership`). Children whose life ends with the cluster (Services, StatefulSet, CronJob) carry a
controller ownerReference, so the garbage collector removes them and their events wake the owner's
reconcile. Data never dies with the cluster: the StatefulSet retains its PVCs, and the credentials
Secret, the backup PVC and the final-backup Job have labels only - the password of kept data must
outlive the CR as the data does, the Job must outlive the CR's last moments, and backups the CR.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...api.v1 import API_VERSION, KIND, MAX_REPLICAS, RETAINED_ANNOTATION, MySQLClusterSpec, parse_spec
from ...database import images
from ...database.backup import RESTORE_SCRIPT
from ...database.engines import engine
from ...database.pod import mysql_pod_spec
from ...database.replication import DATA_DIR, PRIMARY, ROLE_LABEL
from . import tls

Obj = dict[str, Any]

MYSQL_PORT = 3306
PASSWORD_KEY = "root-password"
REPLICATION_PASSWORD_KEY = "replication-password"
REPLICATION_KEY_ANNOTATION = "db.example.com/replication-password"
"""On the credentials Secret: it holds REPLICATION_PASSWORD_KEY. Readable from the metadata-only cache,
so a Secret from before that key existed is told apart without reading its data on every pass."""
DATA_VOLUME = "data"
RESTORE_DIR = "/restore"
"""Where a restoring pod mounts the source cluster's backup PVC (read-only)."""


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
                    identity_env=tuple(identity_env(cluster, spec)),
                    # Once restored, pod 0 no longer needs the source's backups: the claim may go.
                    **(
                        {}
                        if (cluster.get("status") or {}).get("restoredFrom")
                        else _restore_parts(cluster, spec)
                    ),
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


def identity_env(cluster: Obj, spec: MySQLClusterSpec) -> list[Obj]:
    """What a datadir (or a restored archive) is judged against (`database.identity`): this pod's
    release, the cluster's name and uid, and the release an upgrade asked for starts from
    (`status.upgradeFrom`, kept until the next upgrade, so it changes the template only then)."""
    upgrade_from = (cluster.get("status") or {}).get("upgradeFrom") or ""
    return [
        {"name": "SERVER_VERSION", "value": spec.image_tag},
        {"name": "CLUSTER_NAME", "value": _name(cluster)},
        {"name": "CLUSTER_UID", "value": cluster["metadata"]["uid"]},
        # No value when none: the apiserver drops an empty one, and the next compare would differ.
        {"name": "UPGRADE_FROM", **({"value": upgrade_from} if upgrade_from else {})},
    ]


def _restore_parts(cluster: Obj, spec: MySQLClusterSpec) -> Obj:
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
            {"name": "ENGINE", "value": spec.engine},
            *identity_env(cluster, spec),
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
