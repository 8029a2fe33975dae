"""The children of one MySQLCluster, as operator/mysql_operator/resources.py builds them.

A port, not an import: importing `mysql_operator` would load the whole reference operator (its
runtime, prometheus-client, pydantic) into this process and blur the memory comparison. The scale
benchmark's conformance check compares every live child with the reference's own builders.
"""

from __future__ import annotations

import secrets
from typing import Any

Obj = dict[str, Any]

GROUP = "db.example.com"
API_VERSION = f"{GROUP}/v1beta1"
FINALIZER = f"{GROUP}/final-backup"
RETAINED = f"{GROUP}/retained"
SKIP_FINAL_BACKUP = f"{GROUP}/skip-final-backup"
CLUSTER_UID = f"{GROUP}/cluster-uid"
INSTANCE = "app.kubernetes.io/instance"
MANAGED_BY = "app.kubernetes.io/managed-by"
OPERATOR = "mysql-operator"
PORT = 3306
PASSWORD_KEY = "root-password"

CONFIGURE_SCRIPT = """set -eu
ordinal="${HOSTNAME##*-}"
cat > /etc/mysql/conf.d/server.cnf <<EOF
[mysqld]
server-id=$((100 + ordinal))
gtid-mode=ON
enforce-gtid-consistency=ON
EOF
if [ "$ordinal" -gt 0 ]; then
  cat > /docker-entrypoint-initdb.d/replica.sh <<'EOF'
docker_process_sql <<SQL
CHANGE REPLICATION SOURCE TO SOURCE_HOST='$PRIMARY_HOST', SOURCE_PORT=3306, SOURCE_USER='root',
  SOURCE_PASSWORD='$MYSQL_ROOT_PASSWORD', SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1;
SET PERSIST read_only = ON;
SET PERSIST super_read_only = ON;
START REPLICA;
SQL
EOF
fi
"""
PROBE = 'MYSQL_PWD="$MYSQL_ROOT_PASSWORD" mysqladmin ping -h 127.0.0.1 -u root'
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


def spec_of(cluster: Obj) -> Obj:
    """The spec with api.py's defaults (the CRD's defaults too, for objects written before them)."""
    spec = dict(cluster.get("spec") or {})
    spec.setdefault("version", "8.0")
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


def password_env(cluster: Obj, env: str) -> Obj:
    ref = {"name": f"{cluster['metadata']['name']}-credentials", "key": PASSWORD_KEY}
    return {"name": env, "valueFrom": {"secretKeyRef": ref}}


def credentials_secret(cluster: Obj) -> Obj:
    # Retained with the data volumes: no ownerReference, the annotation marks it ours.
    meta = metadata(cluster, f"{cluster['metadata']['name']}-credentials", owned=False)
    meta["annotations"] = {RETAINED: "true"}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque"}
    return {**body, "stringData": {PASSWORD_KEY: secrets.token_urlsafe(24)}}


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
    selector = {**pod_labels(name, "database"), "statefulset.kubernetes.io/pod-name": f"{name}-mysql-0"}
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


def statefulset(cluster: Obj) -> Obj:
    name, namespace, spec = cluster["metadata"]["name"], cluster["metadata"]["namespace"], spec_of(cluster)
    image = f"mysql:{spec['version']}"
    wanted = {k: v for k, v in (spec.get("resources") or {}).items() if v}
    generated = [
        {"name": "conf", "mountPath": "/etc/mysql/conf.d"},
        {"name": "initdb", "mountPath": "/docker-entrypoint-initdb.d"},
    ]
    mysql = {
        "name": "mysql",
        "image": image,
        "ports": [{"name": "mysql", "containerPort": PORT}],
        "env": [
            password_env(cluster, "MYSQL_ROOT_PASSWORD"),
            {"name": "PRIMARY_HOST", "value": f"{name}-mysql-0.{name}-headless.{namespace}.svc"},
        ],
        "resources": {"requests": dict(wanted), "limits": dict(wanted)} if wanted else {},
        "readinessProbe": {
            "exec": {"command": ["sh", "-c", PROBE]},
            "initialDelaySeconds": 5,
            "periodSeconds": 10,
            "timeoutSeconds": 5,
        },
        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/mysql"}, *generated],
    }
    configure = {"name": "configure", "image": image, "command": ["sh", "-c", CONFIGURE_SCRIPT]}
    pod = {
        "terminationGracePeriodSeconds": 120,
        "initContainers": [{**configure, "volumeMounts": generated}],
        "containers": [mysql],
        "volumes": [{"name": "conf", "emptyDir": {}}, {"name": "initdb", "emptyDir": {}}],
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


def backup_pvc(cluster: Obj) -> Obj:
    meta = metadata(cluster, f"{cluster['metadata']['name']}-backup", owned=False)
    spec = claim_spec(spec_of(cluster))
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def _backup_volume(name: str) -> Obj:
    return {"name": "backup", "persistentVolumeClaim": {"claimName": f"{name}-backup"}}


def backup_cronjob(cluster: Obj) -> Obj:
    name, namespace, spec = cluster["metadata"]["name"], cluster["metadata"]["namespace"], spec_of(cluster)
    backup = spec["backup"]
    container = {
        "name": "mysqldump",
        "image": f"mysql:{spec['version']}",
        "command": ["sh", "-c", DUMP_SCRIPT],
        "env": [
            password_env(cluster, "MYSQL_PWD"),
            {"name": "MYSQL_HOST", "value": f"{name}-primary.{namespace}.svc"},
            {"name": "RETENTION_DAYS", "value": str(backup["retentionDays"])},
        ],
        "volumeMounts": [{"name": "backup", "mountPath": "/backup"}],
    }
    pod = {"restartPolicy": "Never", "containers": [container], "volumes": [_backup_volume(name)]}
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


def final_backup_job(cluster: Obj) -> Obj:
    """No ownerReference (it outlives the cluster); the uid tells it from an earlier cluster's."""
    name = cluster["metadata"]["name"]
    meta = metadata(cluster, f"{name}-final-backup", owned=False)
    meta["labels"] = pod_labels(name, "final-backup")
    meta["annotations"] = {CLUSTER_UID: cluster["metadata"]["uid"]}
    data = {"name": "data", "persistentVolumeClaim": {"claimName": f"data-{name}-mysql-0", "readOnly": True}}
    container = {
        "name": "archive",
        "image": "busybox:1.36",
        "command": ["sh", "-c", ARCHIVE_SCRIPT],
        "volumeMounts": [
            {"name": "data", "mountPath": "/var/lib/mysql", "readOnly": True},
            {"name": "backup", "mountPath": "/backup"},
        ],
    }
    pod = {"restartPolicy": "Never", "containers": [container], "volumes": [data, _backup_volume(name)]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": 3600,
            "ttlSecondsAfterFinished": 3600,
            "template": {"metadata": {"labels": pod_labels(name, "final-backup")}, "spec": pod},
        },
    }
