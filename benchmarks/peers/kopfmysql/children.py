"""The children of one MySQLCluster, as operator/mysql_operator/controller/children/resources.py builds them.

A port, not an import: importing `mysql_operator` would load the whole reference operator (its
runtime, prometheus-client, pydantic) into this process and blur the memory comparison. The scale
benchmark's conformance check compares every live child with the reference's own builders.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from decimal import Decimal
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

GROUP = "db.example.com"
VERSION = "v1"
"""The hub and storage version: what the reference reads, writes and names in owner references."""
API_VERSION = f"{GROUP}/{VERSION}"
FINALIZER = f"{GROUP}/final-backup"
RETAINED = f"{GROUP}/retained"
SKIP_FINAL_BACKUP = f"{GROUP}/skip-final-backup"
CLUSTER_UID = f"{GROUP}/cluster-uid"
INSTANCE = "app.kubernetes.io/instance"
MANAGED_BY = "app.kubernetes.io/managed-by"
OPERATOR = "mysql-operator"
PORT = 3306
PASSWORD_KEY = "root-password"
REPLICATION_PASSWORD_KEY = "replication-password"
REPLICATION_KEY_ANNOTATION = f"{GROUP}/replication-password"
"""On the Secret: it holds REPLICATION_PASSWORD_KEY."""
BACKUP_IMAGE = "busybox:1.36"
FINAL_BACKUP_DEADLINE_FLOOR_SECONDS = 600
FINAL_BACKUP_MIN_BYTES_PER_SECOND = 5 * 2**20
REPLICATION_USER = "repl"
DATA_DIR = "/var/lib/mysql"
CONF_DIR = "/etc/mysql/conf.d"
INITDB_DIR = "/docker-entrypoint-initdb.d"
RUN_DIR = "/run/mysql-operator"
PODINFO_DIR = "/etc/podinfo"
TLS_SOURCE_DIR = "/etc/mysql-operator/tls"
ROLE = f"{GROUP}/role"
SIDECAR_RESOURCES = {"cpu": "20m", "memory": "32Mi"}

# The reference's scripts, as its builders make them: written by benchmarks/peers/gomysql/genscripts.py
# (a unit test fails when they drift), read here without importing the reference.
_SCRIPTS = json.loads((Path(__file__).with_name("scripts.json")).read_text())
ENGINES: dict[str, dict[str, str]] = _SCRIPTS["engines"]
DUMP_SCRIPT: str = _SCRIPTS["dump"]
ARCHIVE_SCRIPT: str = _SCRIPTS["archive"]
RESTORE_SCRIPT: str = _SCRIPTS["restore"]


_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE]?)$")
_EXPONENTS = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def quantity_bytes(value: str) -> Decimal:
    """A Kubernetes quantity, exactly (`"1Gi"` -> 1073741824); ValueError naming the value."""
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    number, suffix = Decimal(match.group(1)), match.group(2)
    if suffix.endswith("i"):
        return number * 2 ** (10 * "KMGTPE".index(suffix[0]) + 10)
    return number.scaleb(int(suffix[1:]) if suffix[:1] in ("e", "E") else _EXPONENTS[suffix])


def spec_of(cluster: Obj) -> Obj:
    """The spec with api.py's defaults (the CRD's defaults too, for objects written before them)."""
    spec = dict(cluster.get("spec") or {})
    spec.setdefault("engine", "mysql")
    if not spec.get("version"):
        spec["version"] = ENGINES[spec["engine"]]["defaultVersion"]
    backup = {"enabled": False, "retentionDays": 7, **(spec.get("backup") or {})}
    backup["schedule"] = {"cron": "0 2 * * *", **(backup.get("schedule") or {})}
    spec["backup"] = backup
    return spec


def labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "mysql", INSTANCE: name, MANAGED_BY: OPERATOR}


def pod_labels(name: str, component: str) -> dict[str, str]:
    return {**labels(name), "app.kubernetes.io/component": component}


def metadata(cluster: Obj, name: str, *, owned: bool = True) -> Obj:
    meta = cluster["metadata"]
    out: Obj = {"name": name, "namespace": meta["namespace"], "labels": labels(meta["name"])}
    if owned:
        ref = {"apiVersion": API_VERSION, "kind": "MySQLCluster", "name": meta["name"], "uid": meta["uid"]}
        out["ownerReferences"] = [{**ref, "controller": True, "blockOwnerDeletion": True}]
    return out


def password_env(cluster: Obj, env: str, key: str = PASSWORD_KEY) -> Obj:
    ref = {"name": f"{cluster['metadata']['name']}-credentials", "key": key}
    return {"name": env, "valueFrom": {"secretKeyRef": ref}}


def credentials_secret(cluster: Obj) -> Obj:
    # Retained with the data volumes: no ownerReference, the annotation marks it ours.
    meta = metadata(cluster, f"{cluster['metadata']['name']}-credentials", owned=False)
    meta["annotations"] = {RETAINED: "true", REPLICATION_KEY_ANNOTATION: "true"}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque"}
    passwords = {PASSWORD_KEY: secrets.token_urlsafe(24), REPLICATION_PASSWORD_KEY: secrets.token_urlsafe(24)}
    return {**body, "stringData": passwords}


def image(spec: Obj) -> str:
    return f"{spec['engine']}:{spec['version']}"


def _ports() -> list[Obj]:
    return [{"name": "mysql", "port": PORT, "targetPort": PORT}]


def headless_service(cluster: Obj) -> Obj:
    name = cluster["metadata"]["name"]
    spec = {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": pod_labels(name, "database"),
        "ports": _ports(),
    }
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(cluster, f"{name}-headless"),
        "spec": spec,
    }


def primary_service(cluster: Obj) -> Obj:
    name = cluster["metadata"]["name"]
    selector = {**pod_labels(name, "database"), ROLE: "primary"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(cluster, f"{name}-primary"),
        "spec": {"selector": selector, "ports": _ports()},
    }


def claim_spec(spec: Obj) -> Obj:
    storage = spec["storage"]
    claim: Obj = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage["size"]}}}
    if storage.get("storageClassName"):
        claim["storageClassName"] = storage["storageClassName"]
    return claim


def identity_env(cluster: Obj, spec: Obj) -> list[Obj]:
    """What a datadir or a restored archive is judged against: this release, the cluster, the
    release an asked-for upgrade starts from (status.upgradeFrom)."""
    upgrade_from = (cluster.get("status") or {}).get("upgradeFrom") or ""
    return [
        {"name": "SERVER_VERSION", "value": spec["version"]},
        {"name": "CLUSTER_NAME", "value": cluster["metadata"]["name"]},
        {"name": "CLUSTER_UID", "value": cluster["metadata"]["uid"]},
        # No value when none: the apiserver drops an empty one, and the next compare would differ.
        {"name": "UPGRADE_FROM", **({"value": upgrade_from} if upgrade_from else {})},
    ]


def _restore_parts(cluster: Obj, spec: Obj) -> tuple[list[Obj], list[Obj]]:
    """With spec.restore: the init container that fills pod 0's datadir first, and its volume."""
    if not spec.get("restore"):
        return [], []
    source = spec["restore"]["fromCluster"]
    container = {
        "name": "restore",
        "image": BACKUP_IMAGE,
        "command": ["sh", "-c", RESTORE_SCRIPT],
        "env": [
            {"name": "SOURCE_CLUSTER", "value": source},
            {"name": "SOURCE_PVC", "value": f"{source}-backup"},
            {"name": "ENGINE", "value": spec["engine"]},
            *identity_env(cluster, spec),
        ],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_DIR},
            {"name": "restore", "mountPath": "/restore", "readOnly": True},
        ],
    }
    volume = {"name": "restore", "persistentVolumeClaim": {"claimName": f"{source}-backup", "readOnly": True}}
    return [container], [volume]


def statefulset(cluster: Obj) -> Obj:
    name, namespace, spec = cluster["metadata"]["name"], cluster["metadata"]["namespace"], spec_of(cluster)
    engine = ENGINES[spec["engine"]]
    wanted = {k: v for k, v in (spec.get("resources") or {}).items() if v}
    conf, initdb = {"name": "conf", "mountPath": CONF_DIR}, {"name": "initdb", "mountPath": INITDB_DIR}
    run, data = {"name": "run", "mountPath": RUN_DIR}, {"name": "data", "mountPath": DATA_DIR}
    podinfo = {"name": "podinfo", "mountPath": PODINFO_DIR, "readOnly": True}
    root_password = password_env(cluster, "MYSQL_ROOT_PASSWORD")
    semi = {"name": "SEMI_SYNC", "value": "on" if (spec.get("replication") or {}).get("semiSync") else "off"}
    mysql = {
        "name": "mysql",
        "image": image(spec),
        "command": ["sh", "-c", engine["start"], "sh", engine["server"]],
        "ports": [{"name": "mysql", "containerPort": PORT}],
        "env": [root_password],
        "resources": {"requests": dict(wanted), "limits": dict(wanted)} if wanted else {},
        "readinessProbe": {
            "exec": {"command": ["sh", "-c", engine["probe"]]},
            "initialDelaySeconds": 5,
            "periodSeconds": 5,
            "timeoutSeconds": 5,
        },
        "volumeMounts": [data, conf, initdb, run, podinfo],
    }
    configure = {
        "name": "configure",
        "image": image(spec),
        "command": ["sh", "-c", engine["configure"]],
        "env": [root_password, semi, *identity_env(cluster, spec)],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            conf,
            initdb,
            data,
            run,
            {"name": "tls", "mountPath": TLS_SOURCE_DIR, "readOnly": True},
        ],
    }
    sidecar = {
        "name": "replication",
        "image": image(spec),
        "command": ["sh", "-c", engine["replication"]],
        "volumeMounts": [conf, run, podinfo, data],
        "env": [
            password_env(cluster, "REPLICATION_PASSWORD", REPLICATION_PASSWORD_KEY),
            {"name": "REPLICATION_USER", "value": REPLICATION_USER},
            {"name": "PRIMARY_HOST", "value": f"{name}-primary.{namespace}.svc"},
            semi,
        ],
        "resources": {"requests": SIDECAR_RESOURCES, "limits": SIDECAR_RESOURCES},
    }
    restore, restore_volumes = _restore_parts(cluster, spec)
    labels_file = {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}
    annotations_file = {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
    pod = {
        "terminationGracePeriodSeconds": 120,
        "initContainers": [*restore, configure],
        "containers": [mysql, sidecar],
        "volumes": [
            {"name": "conf", "emptyDir": {}},
            {"name": "initdb", "emptyDir": {}},
            {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
            {"name": "podinfo", "downwardAPI": {"items": [labels_file, annotations_file]}},
            {"name": "tls", "secret": {"secretName": f"{name}-tls", "defaultMode": 0o400}},
            *restore_volumes,
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(cluster, f"{name}-mysql"),
        "spec": {
            "replicas": spec["replicas"],
            "serviceName": f"{name}-headless",
            "selector": {"matchLabels": pod_labels(name, "database")},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
            "template": {"metadata": {"labels": pod_labels(name, "database")}, "spec": pod},
            "volumeClaimTemplates": [
                {"metadata": {"name": "data", "labels": labels(name)}, "spec": claim_spec(spec)}
            ],
        },
    }


def backup_size(spec: Obj) -> str:
    """Two final archives at the data size plus retentionDays + 1 dumps at half of it, in whole MiB."""
    wanted = quantity_bytes(spec["storage"]["size"]) * (spec["backup"]["retentionDays"] + 5) / 2
    return f"{math.ceil(wanted / 2**20)}Mi"


def backup_pvc(cluster: Obj) -> Obj:
    meta = metadata(cluster, f"{cluster['metadata']['name']}-backup", owned=False)
    spec = claim_spec(spec_of(cluster))
    spec["resources"] = {"requests": {"storage": backup_size(spec_of(cluster))}}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def restricted(cluster: Obj) -> tuple[Obj, Obj]:
    """The restricted Pod Security Standard, as the datadir's owner (status.datadirOwner, else 999)."""
    uid, _, gid = str((cluster.get("status") or {}).get("datadirOwner") or "999:999").partition(":")
    pod = {
        "runAsNonRoot": True,
        "runAsUser": int(uid),
        "runAsGroup": int(gid),
        "fsGroup": int(gid),
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    return pod, container


def _backup_volume(name: str) -> Obj:
    return {"name": "backup", "persistentVolumeClaim": {"claimName": f"{name}-backup"}}


def backup_cronjob(cluster: Obj) -> Obj:
    name, namespace, spec = cluster["metadata"]["name"], cluster["metadata"]["namespace"], spec_of(cluster)
    backup = spec["backup"]
    container = {
        "name": "mysqldump",
        "image": image(spec),
        "command": ["sh", "-c", DUMP_SCRIPT],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "env": [
            password_env(cluster, "DB_PASSWORD"),
            {"name": "DUMP", "value": ENGINES[spec["engine"]]["dump"]},
            {"name": "MYSQL_HOST", "value": f"{name}-primary.{namespace}.svc"},
            {"name": "RETENTION_DAYS", "value": str(backup["retentionDays"])},
        ],
        "securityContext": restricted(cluster)[1],
        "volumeMounts": [
            {"name": "backup", "mountPath": "/backup"},
            {"name": "run", "mountPath": "/run/mysql-operator"},
        ],
    }
    # Preferred near the primary: a WaitForFirstConsumer backup volume then lands where the final backup
    # needs it.
    pod_0 = {"matchLabels": {**pod_labels(name, "database"), ROLE: "primary"}}
    terms = ((100, "kubernetes.io/hostname"), (50, "topology.kubernetes.io/zone"))
    preferred = [
        {"weight": w, "podAffinityTerm": {"labelSelector": pod_0, "topologyKey": k}} for w, k in terms
    ]
    pod = {
        "restartPolicy": "Never",
        "securityContext": restricted(cluster)[0],
        "affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}},
        "containers": [container],
        "volumes": [
            _backup_volume(name),
            {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        ],
    }
    template = {"metadata": {"labels": pod_labels(name, "backup")}, "spec": pod}
    zone = backup["schedule"].get("timeZone")
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": metadata(cluster, f"{name}-backup"),
        "spec": {
            "schedule": backup["schedule"]["cron"],
            **({"timeZone": zone} if zone else {}),
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": pod_labels(name, "backup")},
                "spec": {"backoffLimit": 2, "template": template},
            },
        },
    }


def final_backup_deadline(spec: Obj) -> int:
    """A floor plus the data volume's size at the slowest archive rate planned for."""
    size = quantity_bytes(spec["storage"]["size"])
    return FINAL_BACKUP_DEADLINE_FLOOR_SECONDS + math.ceil(size / FINAL_BACKUP_MIN_BYTES_PER_SECOND)


def final_backup_job(cluster: Obj) -> Obj:
    """No ownerReference (it outlives the cluster); the uid tells it from an earlier cluster's.

    No node affinity: the reference takes it from the data PersistentVolume, which this peer does
    not read, and builds none where it has none."""
    name = cluster["metadata"]["name"]
    meta = metadata(cluster, f"{name}-final-backup", owned=False)
    meta["labels"] = pod_labels(name, "final-backup")
    meta["annotations"] = {CLUSTER_UID: cluster["metadata"]["uid"]}
    data = {"name": "data", "persistentVolumeClaim": {"claimName": f"data-{name}-mysql-0", "readOnly": True}}
    container = {
        "name": "archive",
        "image": BACKUP_IMAGE,
        "command": ["sh", "-c", ARCHIVE_SCRIPT],
        "env": [{"name": "CLUSTER_UID", "value": cluster["metadata"]["uid"]}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": restricted(cluster)[1],
        "volumeMounts": [
            {"name": "data", "mountPath": "/var/lib/mysql", "readOnly": True},
            {"name": "backup", "mountPath": "/backup"},
        ],
    }
    pod = {
        "restartPolicy": "Never",
        "securityContext": restricted(cluster)[0],
        "containers": [container],
        "volumes": [data, _backup_volume(name)],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": final_backup_deadline(spec_of(cluster)),
            "ttlSecondsAfterFinished": 3600,
            "template": {"metadata": {"labels": pod_labels(name, "final-backup")}, "spec": pod},
        },
    }
