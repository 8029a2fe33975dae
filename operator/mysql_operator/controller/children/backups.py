"""The backup children: the `<name>-backup` volume, the dump CronJob and the final backup Job.

Pure builders like `resources`' (a cluster in, objects out). None of them is owned by the cluster but the
CronJob: backups outlive the cluster they are of, and so does the Job that takes the last one.

The pods run restricted (the `restricted` Pod Security Standard: not root, no privilege escalation, no
capability, the runtime's seccomp profile, a read-only root filesystem): as the datadir's owner
(`status.datadirOwner`: the image's `mysql` user, which a database pod's `configure` container names in
its termination message, recorded with the first primary; the official images' 999:999 until then),
which is what reading a stopped datadir and writing the backup volume need.
"""

from __future__ import annotations

import math
from typing import Any

from ...api.v1 import MySQLClusterSpec, parse_spec
from ...database import images
from ...database.backup import ARCHIVE_SCRIPT, DUMP_SCRIPT, FINAL_ARCHIVES_KEPT, OPTION_FILE
from ...database.engines import engine
from ...database.replication import PRIMARY, ROLE_LABEL
from .quantity import parse_quantity
from .resources import (
    DATA_DIR,
    DATA_VOLUME,
    Names,
    _metadata,
    _name,
    password_env,
    pod_labels,
    primary_data_claim,
    volume_claim_spec,
)

Obj = dict[str, Any]

BACKUP_DIR = "/backup"
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
DEFAULT_DATADIR_OWNER = "999:999"
"""The official mysql and mariadb images' `mysql` user and group, until the image's own is known."""


def datadir_owner(cluster: Obj) -> tuple[int, int]:
    """(uid, gid) the backup pods run as: `status.datadirOwner`, else `DEFAULT_DATADIR_OWNER`."""
    recorded = str((cluster.get("status") or {}).get("datadirOwner") or DEFAULT_DATADIR_OWNER)
    uid, _, gid = recorded.partition(":")
    return int(uid), int(gid or uid)


def restricted(cluster: Obj) -> tuple[Obj, Obj]:
    """(pod, container) securityContext of the `restricted` Pod Security Standard, as the datadir's
    owner. fsGroup makes a fresh backup volume writable to that group where the volume supports it."""
    uid, gid = datadir_owner(cluster)
    pod = {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": gid,
        "fsGroup": gid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    return pod, container


def backup_size(spec: MySQLClusterSpec) -> str:
    """The backup volume's request: the final archives kept plus the retained dumps.

    Rule: `data size * (FINAL_ARCHIVES_KEPT + (retentionDays + 1) / 2)`, in whole MiB. Each archive is
    planned at the full data volume size (incompressible data; gzip usually halves it), and at most
    `FINAL_ARCHIVES_KEPT` exist at once (`database.backup`: older ones are pruned before a new one is
    written); each dump at half of it (a gzipped logical dump is far smaller than InnoDB's pages), and
    daily dumps are kept `retentionDays + 1` at most (pruning is by whole days). A schedule more often
    than daily needs a larger class or a volume expansion: the request is fixed when the PVC is created.
    """
    data = parse_quantity(spec.storage.size)
    wanted = data * (2 * FINAL_ARCHIVES_KEPT + spec.backup.retention_days + 1) / 2
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
        "terminationMessagePolicy": "FallbackToLogsOnError",  # `kubectl describe` says why it failed
        # Not MYSQL_PWD: the script writes an option file from it, which the client reads.
        "env": [
            password_env(cluster, "DB_PASSWORD"),
            {"name": "DUMP", "value": engine(spec.engine).dump},
            {"name": "MYSQL_HOST", "value": names.primary_host(namespace)},
            {"name": "RETENTION_DAYS", "value": str(spec.backup.retention_days)},
        ],
        "securityContext": restricted(cluster)[1],
        "volumeMounts": [
            {"name": "backup", "mountPath": BACKUP_DIR},
            {"name": "run", "mountPath": OPTION_FILE.rsplit("/", 1)[0]},
        ],
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
                            "securityContext": restricted(cluster)[0],
                            "affinity": near_primary,
                            "containers": [container],
                            "volumes": [
                                _backup_volume(cluster),
                                {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
                            ],
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
                    "securityContext": restricted(cluster)[0],
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
                            # A failed pod's log tail stays in its status, and the operator copies
                            # it into the cluster's (backupjob.last_words) before deleting the Job.
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "securityContext": restricted(cluster)[1],
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
