"""The MySQLCluster API at `db.example.com/v1` — the hub and storage version — as pydantic models.

These models are the single source of truth: `manifests` turns them into the CRD's structural
schema, and the reconciler parses live objects with them, so a default lives in exactly one place.
Attribute docstrings become the schema's descriptions (what `kubectl explain` shows).

The path is v1alpha1 → v1beta1 → v1. v1 has v1beta1's shape (v1beta1 was the version that settled it;
v1 is the same contract declared stable and made the storage version), so `v1beta1` reuses these
models. `v1alpha1` holds the oldest, still served spoke. `conversion` maps each spoke to and
from this hub. The operator reads and writes only this version: the apiserver converts (through the
conversion webhook) for clients of the others. Objects written while v1beta1 was stored are re-stored at
v1 by `cli.storage_migration`.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..database.engines import ENGINES, EngineName, engine

GROUP = "db.example.com"
VERSION = "v1"
"""The hub: the version stored in etcd and the only one the reconciler sees."""
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "MySQLCluster"
PLURAL = "mysqlclusters"
SINGULAR = "mysqlcluster"
SHORT_NAMES = ["mysql"]

FINALIZER = f"{GROUP}/final-backup"
SKIP_FINAL_BACKUP_ANNOTATION = f"{GROUP}/skip-final-backup"
SWITCHOVER_ANNOTATION = f"{GROUP}/switchover-to"
"""On the cluster: the pod (or ordinal) to make the primary by a planned switchover; removed once done."""
RETAINED_ANNOTATION = f"{GROUP}/retained"
"""On the credentials Secret: kept after the cluster is deleted (like its data), reused on re-create."""
FIELD_MANAGER = "mysql-operator"
"""Our server-side apply field manager."""

MAX_REPLICAS = 9
MAX_NAME_LENGTH = 45
"""The longest child name is `<name>-backup`, a CronJob: its name may have 52 characters at most
because Jobs it spawns append 11. 52 - len("-backup") = 45."""

# Kubernetes' canonical quantity grammar (resource.Quantity), without a sign: sizes are positive.
QUANTITY_PATTERN = r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|([eE][-+]?[0-9]+))?$"
# Tags of the official mysql image: 8.0, 8.4.3, 9, 8.0-debian, 8.0.36-oracle.
VERSION_PATTERN = r"^[0-9]+(\.[0-9]+){0,2}(-[a-z0-9]+)?$"
# A StorageClass name is a DNS-1123 subdomain.
DNS1123_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# From metav1.Condition's own validation markers.
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
# The <name>-headless Service needs a DNS-1035 label, the strictest of the children's rules.
DNS1035_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

Quantity = Annotated[str, Field(pattern=QUANTITY_PATTERN, max_length=64)]
Phase = Literal["Pending", "Running", "Failed", "Terminating"]
FailoverPhase = Literal["Fencing", "Promoting", "Repointing", "Completed"]
FailoverReason = Literal["PrimaryLost", "Switchover"]
FinalBackupPhase = Literal["Stopping", "Running", "Failed", "Succeeded", "Skipped"]
ConditionStatus = Literal["True", "False", "Unknown"]


class _Model(BaseModel):
    # Unknown fields are pruned by the apiserver anyway; ignoring them keeps old operators
    # working against objects written by a newer CRD.
    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True, populate_by_name=True)


class Resources(_Model):
    """Compute resources of each MySQL container, used as both requests and limits."""

    cpu: Quantity | None = None
    """CPU, e.g. `500m` or `2`."""
    memory: Quantity | None = None
    """Memory, e.g. `1Gi`."""


DEFAULT_CRON = "0 2 * * *"


class Schedule(_Model):
    """When backups run: a cron expression read in a time zone (the CronJob's `schedule`/`timeZone`)."""

    cron: str = Field(default=DEFAULT_CRON, min_length=1, max_length=128)
    """Cron schedule in the standard five-field form, or a macro such as `@daily`."""
    time_zone: str | None = Field(default=None, alias="timeZone", min_length=1, max_length=64)
    """IANA time zone of `cron`, e.g. `Europe/Berlin`; unset means kube-controller-manager's own zone."""


class Backup(_Model):
    """Scheduled logical backups (mysqldump) into the `<name>-backup` PVC."""

    enabled: bool = False
    """Run the backup CronJob, and a final backup of the data volume when the cluster is deleted."""
    schedule: Schedule = Field(default_factory=Schedule)
    """When backups run."""
    retention_days: int = Field(default=7, ge=1, le=3650, alias="retentionDays")
    """Dumps older than this many days are pruned after each backup."""


class Storage(_Model):
    """The data volume of each MySQL pod (and the size of the backup volume)."""

    size: Quantity
    """Size of each pod's data volume, e.g. `10Gi`."""
    storage_class_name: str | None = Field(
        default=None, alias="storageClassName", max_length=253, pattern=DNS1123_SUBDOMAIN_PATTERN
    )
    """StorageClass of the data and backup volumes; unset means the cluster's default class."""


DEFAULT_FAILOVER_AFTER_SECONDS = 30


class Failover(_Model):
    """Replacing a primary that is lost: promote the replica that received the most."""

    enabled: bool = True
    """Fail over automatically. Off: a lost primary is only reported (Degraded); a switchover still works."""
    after_seconds: int = Field(default=DEFAULT_FAILOVER_AFTER_SECONDS, ge=5, le=3600, alias="afterSeconds")
    """Seconds the primary must stay lost (pod gone or unready, or every replica cut off from it) before
    a replica is promoted. A primary whose data volume was replaced is replaced at once."""


class Replication(_Model):
    """How replicas follow the primary."""

    semi_sync: bool = Field(default=False, alias="semiSync")
    """Semi-synchronous replication: a commit returns only once a replica has received it, so a
    failover loses no acknowledged write while a replica is connected (after 10 s without one the
    primary falls back to asynchronous). MariaDB has it built in; MySQL needs 8.0.26 or newer."""


class Restore(_Model):
    """Start the cluster from another cluster's final backup instead of an empty datadir."""

    from_cluster: str = Field(
        alias="fromCluster", min_length=1, max_length=MAX_NAME_LENGTH, pattern=DNS1035_PATTERN
    )
    """Name of the source cluster, in this namespace. Its newest `final-*.tar.gz` in PVC
    `<fromCluster>-backup` becomes pod 0's datadir (only while that datadir is empty), and its
    credentials Secret `<fromCluster>-credentials` is copied: the restored data opens only with the
    source's passwords. Replicas start empty and replicate from pod 0. Pods mount that backup PVC
    read-only for the cluster's whole life, so keep it while this cluster exists."""


def _version_rule() -> dict[str, str]:
    """The CRD's twin of `MySQLClusterSpec._supported_version`: the apiserver refuses what the
    operator could not drive, naming the field, before anything is created."""
    checks = " : ".join(
        f"self.engine == '{e.name}' ? self.version.matches(r'{e.version_pattern}')" for e in ENGINES.values()
    )
    return {
        "rule": f"!has(self.version) || ({checks} : false)",
        "fieldPath": ".version",
        "reason": "FieldValueInvalid",
        "message": "version is not one the operator can drive: "
        + "; ".join(f"{e.name} needs {e.supported}" for e in ENGINES.values()),
    }


_RESTORE_FIXED_RULE = {
    # The field's own rule covers a change; this one adding or removing it (a transition rule: on
    # update only). Added later it would restore nothing (pod 0's datadir is not empty) but roll
    # every pod; removed, the pods would roll too.
    "rule": "has(self.restore) == has(oldSelf.restore)",
    "fieldPath": ".restore",
    "reason": "FieldValueForbidden",
    "message": "restore is immutable: set it when the cluster is created, or never",
}


class MySQLClusterSpec(_Model):
    """Desired state of a MySQL cluster."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [_version_rule(), _RESTORE_FIXED_RULE]}
    )

    replicas: int = Field(ge=1, le=MAX_REPLICAS)
    """Number of database pods. One is the primary (label `db.example.com/role=primary`, selected by the
    Service `<name>-primary`; pod 0 at creation); the others replicate from it (GTID auto-position,
    TLS) and are read-only."""
    engine: EngineName = Field(
        default="mysql",
        json_schema_extra={
            # A datadir belongs to one server: switching would start the other on files it cannot read.
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "engine is immutable"}]
        },
    )
    """Database server: `mysql` (8.0.23 or newer) or `mariadb` (10.6 or newer). Immutable."""
    version: str | None = Field(default=None, pattern=VERSION_PATTERN, max_length=64)
    """Tag of the engine's image, e.g. `8.4` or `10.11`. Unset: the engine's default when the cluster is
    created (8.4 for mysql, 10.11 for mariadb), kept afterwards, so an operator upgrade never upgrades
    the database (`status.version` shows what ran); to upgrade, set it. Versions the operator cannot
    drive (mysql before 8.0.23, mariadb before 10.6) are refused, and so is a downgrade (older
    major.minor than a tag the pods ran): a datadir cannot go back."""
    storage: Storage = Field(
        json_schema_extra={
            # volumeClaimTemplates of a StatefulSet cannot change after creation.
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "storage is immutable"}]
        },
    )
    """Each pod's data volume. Immutable."""
    resources: Resources | None = None
    """CPU and memory of each MySQL container; unset means no requests or limits."""
    backup: Backup = Field(default_factory=Backup)
    """Backup settings; backups are off unless enabled."""
    restore: Restore | None = Field(
        default=None,
        json_schema_extra={
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "restore is immutable"}]
        },
    )
    """Create the cluster from another cluster's final backup. Immutable: set at creation or never."""
    failover: Failover = Field(default_factory=Failover)
    """Automatic failover; on by default."""
    replication: Replication = Field(default_factory=Replication)
    """Replication settings; asynchronous by default."""

    @model_validator(mode="after")
    def _supported_version(self) -> MySQLClusterSpec:
        e = engine(self.engine)
        if self.version is not None and not e.supports(self.version):
            raise ValueError(f"spec.version {self.version!r}: {e.name} needs {e.supported}")
        if (
            self.replication.semi_sync
            and self.engine == "mysql"
            and re.match(r"^8\.0\.2[345]\b", self.image_tag)
        ):
            raise ValueError(
                f"spec.replication.semiSync: mysql {self.image_tag} has the old plugin names; 8.0.26+"
            )
        return self

    @property
    def image_tag(self) -> str:
        """spec.version, or the engine's default."""
        return self.version or engine(self.engine).default_version


class Condition(_Model):
    """metav1.Condition."""

    type: str = Field(pattern=CONDITION_TYPE_PATTERN, max_length=316)
    """Ready, Progressing or Degraded."""
    status: ConditionStatus
    """True, False or Unknown."""
    observed_generation: int | None = Field(default=None, ge=0, alias="observedGeneration")
    """metadata.generation the condition was computed from."""
    last_transition_time: datetime = Field(alias="lastTransitionTime")
    """When status last changed from one value to another."""
    reason: str = Field(pattern=CONDITION_REASON_PATTERN, min_length=1, max_length=1024)
    """CamelCase reason of the last transition."""
    message: str = Field(max_length=32768)
    """Human-readable details."""


class FailoverStatus(_Model):
    """The last failover or switchover: in progress until phase Completed (each step is idempotent, so
    one interrupted is driven on by the next reconcile)."""

    reason: FailoverReason
    """PrimaryLost (automatic) or Switchover (asked for by the annotation)."""
    phase: FailoverPhase
    """Fencing the old primary, Promoting the new one, Repointing the other replicas, or Completed."""
    from_: str = Field(alias="from", max_length=64)
    """The pod that was primary."""
    to: str = Field(max_length=64)
    """The pod promoted."""
    started_at: datetime = Field(alias="startedAt")
    completed_at: datetime | None = Field(default=None, alias="completedAt")
    message: str | None = Field(default=None, max_length=32768)
    """Why, and what the new primary had (its GTID position)."""
    position: str | None = Field(default=None, max_length=32768)
    """A switchover's: the GTIDs the fenced primary had written, which the new one applies before it is
    promoted."""


class FinalBackupStatus(_Model):
    """Progress of the final backup taken when the cluster is deleted (the record that makes
    deletion idempotent: a success recorded here is never repeated)."""

    phase: FinalBackupPhase
    """Stopping (database pods going away), Running, Failed (retrying), Succeeded or Skipped."""
    attempts: int = Field(default=0, ge=0)
    """Failed attempts so far; each retry waits twice as long as the last, up to a cap."""
    last_failure_time: datetime | None = Field(default=None, alias="lastFailureTime")
    """When the last attempt was seen failing; the next one starts after the backoff from here."""
    last_failed_job: str | None = Field(default=None, alias="lastFailedJob", max_length=64)
    """UID of the Job counted in `attempts` last, so a repeated look never counts it twice."""
    stopping_since: datetime | None = Field(default=None, alias="stoppingSince")
    """When stopping the database began; database pods still there a grace period plus a margin
    later are deleted by the operator (with a Warning Event ForcedPodDeletion)."""
    stateful_set_uid: str | None = Field(default=None, alias="statefulSetUID", max_length=64)
    """UID of the StatefulSet being stopped: only its pods are ever deleted by the operator, also
    after the StatefulSet itself is gone."""
    message: str | None = Field(default=None, max_length=32768)
    """What happened last, in words."""


class MySQLClusterStatus(_Model):
    """Observed state, written only by the operator through the status subresource."""

    phase: Phase | None = None
    """Pending, Running, Failed or Terminating."""
    ready_replicas: int | None = Field(default=None, ge=0, alias="readyReplicas")
    """MySQL pods passing their readiness probe."""
    primary_endpoint: str | None = Field(default=None, alias="primaryEndpoint")
    """host:port of the primary (Service `<name>-primary`, which selects the pod labelled primary)."""
    primary: str | None = Field(default=None, max_length=64)
    """The pod that is the primary (labelled `db.example.com/role=primary`)."""
    primary_claim_uid: str | None = Field(default=None, alias="primaryClaimUID", max_length=64)
    """The uid of the primary's data PersistentVolumeClaim when it became primary: a pod of that name on
    another claim (a new, empty volume) is not served as primary."""
    primary_lost_since: datetime | None = Field(default=None, alias="primaryLostSince")
    """When the primary was first seen lost; a failover follows `spec.failover.afterSeconds` later."""
    failover: FailoverStatus | None = None
    """The last failover or switchover."""
    observed_generation: int | None = Field(default=None, ge=0, alias="observedGeneration")
    """metadata.generation this status was computed from."""
    conditions: list[Condition] | None = Field(
        default=None,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Ready, Progressing and Degraded."""
    final_backup: FinalBackupStatus | None = Field(default=None, alias="finalBackup")
    """Set once the cluster is being deleted with a final backup wanted."""
    version: str | None = Field(default=None, max_length=64)
    """Tag of the engine's image every database pod ran at the last completed rollout. With
    `spec.version` unset it is kept (an operator upgrade never upgrades a database), and a
    `spec.version` older by major.minor is refused (reason VersionDowngrade)."""
    upgrade_from: str | None = Field(default=None, alias="upgradeFrom", max_length=64)
    """The tag the pods ran before the last upgrade asked for (a newer spec.version): datadirs written by
    that release may be opened by the new one. Any other release's data refuses to start (reason
    DatadirMismatch), a re-created cluster's kept data included."""
    datadir_owner: str | None = Field(
        default=None, alias="datadirOwner", max_length=32, pattern=r"^[0-9]+:[0-9]+$"
    )
    """uid:gid of the database image's server user: the backup pods run as it."""
    restored_from: str | None = Field(default=None, alias="restoredFrom", max_length=MAX_NAME_LENGTH)
    """With `spec.restore`: the source cluster, set once pod 0 first became ready on the restored data."""


class ObjectMeta(_Model):
    """The only part of metadata a CRD schema may restrict (the apiserver owns the rest)."""

    # Child names derive from metadata.name; rejecting names that would make invalid children here
    # names the field, where a failed child write later would not.
    name: str | None = Field(default=None, max_length=MAX_NAME_LENGTH, pattern=DNS1035_PATTERN)


class MySQLClusterModel(_Model):
    """A MySQL database cluster run as a StatefulSet."""

    # Named apart from kinds.MySQLCluster (the pykube class): this one is only the CRD schema.
    api_version: str | None = Field(default=None, alias="apiVersion")
    """APIVersion of this representation."""
    kind: str | None = None
    """Kind of this object."""
    metadata: ObjectMeta | None = None
    spec: MySQLClusterSpec
    """Desired state."""
    status: MySQLClusterStatus | None = None
    """Observed state."""


def parse_spec(cluster: dict[str, Any]) -> MySQLClusterSpec:
    """The spec of a live MySQLCluster, defaults applied; raises pydantic.ValidationError."""
    return MySQLClusterSpec.model_validate(cluster.get("spec") or {})
