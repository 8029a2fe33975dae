"""The children of one MySQLCluster, as operator/mysql_operator/controller/children/resources.py builds them.

A port, not an import: importing `mysql_operator` would load the whole reference operator (its
runtime, prometheus-client, pydantic) into this process and blur the memory comparison. The scale
benchmark's conformance check compares every live child with the reference's own builders.
"""

from __future__ import annotations

import math
import re
import secrets
from decimal import Decimal
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
MARKER = "mysql-operator-initialised"
LEGACY_MARKER = "mysqld-auto.cnf"
SIDECAR_RESOURCES = {"cpu": "20m", "memory": "32Mi"}

# operator/mysql_operator/database/engines.py: what differs between the two database servers.
ENGINES: dict[str, Obj] = {
    "mysql": {
        "default_version": "8.4",
        "server": "mysqld",
        "client": "mysql",
        "dump": "mysqldump",
        "gtid_config": ("gtid-mode=ON", "enforce-gtid-consistency=ON"),
        "replica_config": ("read-only=ON", "super-read-only=ON"),
        "status": "SHOW REPLICA STATUS\\G",
        "point": (
            "CHANGE REPLICATION SOURCE TO SOURCE_HOST='$PRIMARY_HOST', SOURCE_PORT=3306, "
            "SOURCE_USER='$REPLICATION_USER', SOURCE_PASSWORD='$REPLICATION_PASSWORD', "
            "SOURCE_AUTO_POSITION=1, SOURCE_SSL=$tls, GET_SOURCE_PUBLIC_KEY=1; START REPLICA;"
        ),
    },
    "mariadb": {
        "default_version": "10.11",
        "server": "mariadbd",
        "client": "mariadb",
        "dump": "mariadb-dump",
        "gtid_config": (
            "log-bin=mysql-bin",
            "log-slave-updates=ON",
            "gtid-strict-mode=ON",
            "binlog-format=ROW",
        ),
        "replica_config": ("read-only=ON",),
        "status": "SHOW SLAVE STATUS\\G",
        "point": (
            "CHANGE MASTER TO MASTER_HOST='$PRIMARY_HOST', MASTER_PORT=3306, "
            "MASTER_USER='$REPLICATION_USER', MASTER_PASSWORD='$REPLICATION_PASSWORD', "
            "MASTER_USE_GTID=slave_pos, MASTER_SSL=$tls; START SLAVE;"
        ),
    },
}


def configure_script(engine: Obj) -> str:
    """The init container: server.cnf, the marking init script, a replica's read-only config."""
    config = "\n".join(engine["gtid_config"])
    replica = "\\n".join(engine["replica_config"])
    pending, active = f"{CONF_DIR}/replica.cnf.pending", f"{CONF_DIR}/replica.cnf"
    return f"""set -eu
ordinal="${{HOSTNAME##*-}}"
{{
  echo '[mysqld]'
  echo "server-id=$((100 + ordinal))"
  cat <<'EOF'
{config}
EOF
}} > {CONF_DIR}/server.cnf
# The last init script: marks the one-time init done and makes a replica read-only from the real
# server's first start on (not before: the init phase's own writes, e.g. the root password, would fail).
cat > {INITDB_DIR}/zz-initialised.sh <<'EOF'
touch {DATA_DIR}/{MARKER}
if [ -e {pending} ]; then cp {pending} {active}; fi
EOF
if [ "$ordinal" -gt 0 ]; then
  printf '[mysqld]\\n{replica}\\n' > {pending}
fi
"""


def start_script(engine: Obj) -> str:
    """The server container's command, on every start: a replica's datadir settled, then the image's
    entrypoint (a crashed server is restarted without the init containers)."""
    pending, active = f"{CONF_DIR}/replica.cnf.pending", f"{CONF_DIR}/replica.cnf"
    initialised = f"[ -e {DATA_DIR}/{MARKER} ] || [ -e {DATA_DIR}/{LEGACY_MARKER} ]"
    return f"""set -eu
if [ -e {pending} ]; then
  if {initialised}; then
    cp {pending} {active}
  else
    # Read-only only once the init phase has run (again): its own writes would be refused.
    rm -f {active}
    if [ -n "$(ls -A {DATA_DIR} | grep -v '^lost+found$')" ]; then
      echo "{engine["server"]}: the datadir's first init did not finish; clearing it to initialise it again"
      find {DATA_DIR} -mindepth 1 -maxdepth 1 ! -name lost+found -exec rm -rf {{}} +
      touch {CONF_DIR}/datadir-wiped
    fi
  fi
fi
# The official images' entrypoint is on PATH; some derived images keep it at the root.
exec "$(command -v docker-entrypoint.sh || echo /docker-entrypoint.sh)" "$@"
"""


def probe_script(engine: Obj) -> str:
    """Ready: an authenticated query answers and, on a replica, both replication threads run."""
    client = engine["client"]
    return f"""ordinal="${{HOSTNAME##*-}}"
export MYSQL_PWD="$MYSQL_ROOT_PASSWORD"
if [ "$ordinal" -eq 0 ]; then
  exec {client} -h 127.0.0.1 -u root -N -e 'SELECT 1' >/dev/null
fi
status="$({client} -h 127.0.0.1 -u root -e '{engine["status"]}')" || exit 1
for thread in IO SQL; do
  echo "$status" | grep -Eq "(Replica|Slave)_${{thread}}_Running: Yes" \\
    || {{ echo "$thread thread not running"; exit 1; }}
done
"""


def replication_script(engine: Obj) -> str:
    """The sidecar: the primary's replication account, or a replica pointed at the primary (again
    after its server's start wiped the datadir)."""
    client = engine["client"]
    if client == "mariadb":  # TLS when the primary has it, decided by its answer only
        tls = (
            f'ssl="$(MYSQL_PWD="$REPLICATION_PASSWORD" {client} -h "$PRIMARY_HOST" '
            '-u "$REPLICATION_USER" -N -e \'SELECT @@have_ssl\' 2>/dev/null)" \\\n'
            '      && if [ "$ssl" = YES ]; then tls=1; else tls=0; fi'
        )
    else:
        tls = "tls=1"
    return f"""set -u
trap 'exit 0' TERM INT
# The password goes into SQL string literals: only what needs no quoting (generated ones are so).
case "$REPLICATION_PASSWORD" in
  '' | *[!A-Za-z0-9_-]*)
    echo "replication: the credentials Secret's replication-password must be non-empty [A-Za-z0-9_-]" >&2
    exit 1 ;;
esac
ordinal="${{HOSTNAME##*-}}"
export MYSQL_PWD="$MYSQL_ROOT_PASSWORD"
sql() {{ {client} -h 127.0.0.1 -u root -N "$@"; }}
pause() {{ sleep "$1" & wait $!; }}
until sql -e 'SELECT 1' >/dev/null 2>&1; do pause 2; done
if [ "$ordinal" -eq 0 ]; then
  until sql -e "CREATE USER IF NOT EXISTS '$REPLICATION_USER'@'%' IDENTIFIED BY '$REPLICATION_PASSWORD';
      ALTER USER '$REPLICATION_USER'@'%' IDENTIFIED BY '$REPLICATION_PASSWORD';
      GRANT REPLICATION SLAVE ON *.* TO '$REPLICATION_USER'@'%';"; do pause 5; done
  echo "replication: account $REPLICATION_USER ready"
  while :; do pause 3600; done
fi
# A replica with no source is pointed at pod 0; one with a source, running or stopped, is left as it
# is. A server restarted alone (no new pod, so no new sidecar) on a datadir its start wiped has no
# source any more: its start leaves a flag, looked for every 10 s.
point() {{
  # A failed query is no answer: taken for "none configured", it would re-point (and restart) a
  # replication someone stopped.
  until status="$(sql -e '{engine["status"]}')"; do pause 5; done
  [ -z "$status" ] || return 1
  until {tls} \\
    && sql -e "{engine["point"]}"
  do pause 5; done
  echo "replication: replicating from $PRIMARY_HOST (tls=$tls)"
}}
point || echo "replication: already configured; left as it is"
while :; do
  pause 10
  if [ -e {CONF_DIR}/datadir-wiped ]; then
    echo "replication: the server's start wiped the datadir; pointing it again"
    point || echo "replication: already configured; left as it is"
    rm -f {CONF_DIR}/datadir-wiped
  fi
done
"""


# operator/mysql_operator/controller/children/resources.py's scripts, as they are.
DUMP_SCRIPT = """set -eu
find /backup -maxdepth 1 -name '.dump-*' -exec rm -f {} +
stamp=$(date -u +%Y%m%dT%H%M%SZ)
partial="/backup/.dump-$stamp.sql.gz"
failed="/backup/.dump-$stamp.failed"
{ "$DUMP" -h "$MYSQL_HOST" -u root --all-databases --single-transaction --routines --events \
  --triggers || echo "$?" > "$failed"; } | gzip -1 > "$partial"
if [ -e "$failed" ]; then
  echo "dump: $DUMP exited $(cat "$failed")" >&2
  rm -f "$failed" "$partial"
  exit 1
fi
mv "$partial" "/backup/dump-$stamp.sql.gz"
find /backup -maxdepth 1 -name 'dump-*.sql.gz' -mtime "+$((RETENTION_DAYS - 1))" -delete
"""
ARCHIVE_SCRIPT = """set -eu
set -o pipefail
done_already=$(ls /backup | grep -E "^final-.*-$CLUSTER_UID[.]tar[.]gz$" || true)
if [ -n "$done_already" ]; then
  echo "archive: $done_already is this cluster's final backup already; nothing to do"; exit 0
fi
find /backup -maxdepth 1 -name '.final-*' -exec rm -f {} +
stamp=$(date -u +%Y%m%dT%H%M%SZ)
name="final-$stamp-$CLUSTER_UID.tar.gz"
start=$(date +%s)
tar -cf - -C /var/lib/mysql . | gzip -1 > "/backup/.$name"
mv "/backup/.$name" "/backup/$name"
kib=$(du -sk /var/lib/mysql | cut -f1)
echo "archive: $name: $kib KiB of data in $(($(date +%s) - start)) s"
"""
RESTORE_SCRIPT = """set -eu
set -o pipefail
data=/var/lib/mysql
incomplete="$data/.restore-incomplete"
restored="$data/.restored-from"
fail() { echo "restore: $*" | tee /dev/termination-log >&2; exit 1; }
if [ "${HOSTNAME##*-}" -ne 0 ]; then
  echo "restore: a replica starts empty and replicates from pod 0"; exit 0
fi
if [ -e "$incomplete" ]; then
  echo "restore: an earlier restore did not finish; starting it again"
  find "$data" -mindepth 1 -maxdepth 1 ! -name lost+found ! -name .restore-incomplete -exec rm -rf {} +
elif [ -n "$(ls -A "$data" | grep -v '^lost+found$')" ]; then
  if [ -e "$restored" ]; then
    echo "restore: done before ($(cat "$restored")); left as it is"; exit 0
  fi
  fail "pod 0's datadir holds data no restore put there (a data PersistentVolumeClaim kept from an \
earlier cluster of this name?): not restoring over it; delete that claim, or restore into another name"
fi
archive=$(ls /restore | grep -E '^final-.*[.]tar[.]gz$' | sort | tail -n 1 || true)
[ -n "$archive" ] || fail "no final-*.tar.gz in PersistentVolumeClaim $SOURCE_PVC (was $SOURCE_CLUSTER \
deleted with backup enabled, and did its final backup succeed?)"
archive="/restore/$archive"
touch "$incomplete"
start=$(date +%s)
gzip -dc "$archive" | tar -xf - -C "$data" || fail "unpacking $archive from $SOURCE_PVC failed"
echo "$SOURCE_CLUSTER $(basename "$archive")" > "$restored"
rm "$incomplete"
echo "restore: $archive from $SOURCE_PVC unpacked in $(($(date +%s) - start)) s"
"""


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
        spec["version"] = ENGINES[spec["engine"]]["default_version"]
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


def _restore_parts(spec: Obj) -> tuple[list[Obj], list[Obj]]:
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
    engine, primary_host = ENGINES[spec["engine"]], f"{name}-mysql-0.{name}-headless.{namespace}.svc"
    wanted = {k: v for k, v in (spec.get("resources") or {}).items() if v}
    generated = [{"name": "conf", "mountPath": CONF_DIR}, {"name": "initdb", "mountPath": INITDB_DIR}]
    data = {"name": "data", "mountPath": DATA_DIR}
    root_password = password_env(cluster, "MYSQL_ROOT_PASSWORD")
    mysql = {
        "name": "mysql",
        "image": image(spec),
        "command": ["sh", "-c", start_script(engine), "sh", engine["server"]],
        "ports": [{"name": "mysql", "containerPort": PORT}],
        "env": [root_password, {"name": "PRIMARY_HOST", "value": primary_host}],
        "resources": {"requests": dict(wanted), "limits": dict(wanted)} if wanted else {},
        "readinessProbe": {
            "exec": {"command": ["sh", "-c", probe_script(engine)]},
            "initialDelaySeconds": 5,
            "periodSeconds": 10,
            "timeoutSeconds": 5,
        },
        "volumeMounts": [data, *generated],
    }
    configure = {"name": "configure", "image": image(spec), "command": ["sh", "-c", configure_script(engine)]}
    sidecar = {
        "name": "replication",
        "image": image(spec),
        "command": ["sh", "-c", replication_script(engine)],
        "volumeMounts": [{"name": "conf", "mountPath": CONF_DIR}],
        "env": [
            root_password,
            password_env(cluster, "REPLICATION_PASSWORD", REPLICATION_PASSWORD_KEY),
            {"name": "REPLICATION_USER", "value": REPLICATION_USER},
            {"name": "PRIMARY_HOST", "value": primary_host},
        ],
        "resources": {"requests": SIDECAR_RESOURCES, "limits": SIDECAR_RESOURCES},
    }
    restore, restore_volumes = _restore_parts(spec)
    pod = {
        "terminationGracePeriodSeconds": 120,
        "initContainers": [*restore, {**configure, "volumeMounts": [*generated, data]}],
        "containers": [mysql, sidecar],
        "volumes": [{"name": "conf", "emptyDir": {}}, {"name": "initdb", "emptyDir": {}}, *restore_volumes],
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
    """One final archive at the data size plus retentionDays + 1 dumps at half of it, in whole MiB."""
    wanted = quantity_bytes(spec["storage"]["size"]) * (spec["backup"]["retentionDays"] + 3) / 2
    return f"{math.ceil(wanted / 2**20)}Mi"


def backup_pvc(cluster: Obj) -> Obj:
    meta = metadata(cluster, f"{cluster['metadata']['name']}-backup", owned=False)
    spec = claim_spec(spec_of(cluster))
    spec["resources"] = {"requests": {"storage": backup_size(spec_of(cluster))}}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def _backup_volume(name: str) -> Obj:
    return {"name": "backup", "persistentVolumeClaim": {"claimName": f"{name}-backup"}}


def backup_cronjob(cluster: Obj) -> Obj:
    name, namespace, spec = cluster["metadata"]["name"], cluster["metadata"]["namespace"], spec_of(cluster)
    backup = spec["backup"]
    container = {
        "name": "mysqldump",
        "image": image(spec),
        "command": ["sh", "-c", DUMP_SCRIPT],
        "env": [
            password_env(cluster, "MYSQL_PWD"),
            {"name": "DUMP", "value": ENGINES[spec["engine"]]["dump"]},
            {"name": "MYSQL_HOST", "value": f"{name}-primary.{namespace}.svc"},
            {"name": "RETENTION_DAYS", "value": str(backup["retentionDays"])},
        ],
        "volumeMounts": [{"name": "backup", "mountPath": "/backup"}],
    }
    # Preferred near pod 0: a WaitForFirstConsumer backup volume then lands where the final backup needs it.
    pod_0 = {"matchLabels": {"statefulset.kubernetes.io/pod-name": f"{name}-mysql-0"}}
    terms = ((100, "kubernetes.io/hostname"), (50, "topology.kubernetes.io/zone"))
    preferred = [
        {"weight": w, "podAffinityTerm": {"labelSelector": pod_0, "topologyKey": k}} for w, k in terms
    ]
    pod = {
        "restartPolicy": "Never",
        "affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}},
        "containers": [container],
        "volumes": [_backup_volume(name)],
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
            "activeDeadlineSeconds": final_backup_deadline(spec_of(cluster)),
            "ttlSecondsAfterFinished": 3600,
            "template": {"metadata": {"labels": pod_labels(name, "final-backup")}, "spec": pod},
        },
    }
