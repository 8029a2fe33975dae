"""The MySQLCluster API at `db.example.com/v1alpha1`: the first version, still served, no longer stored.

Only what differs from the hub (`v1`) is defined here; status, resources and metadata
are shared, so the schemas cannot drift apart where they mean the same thing. What v1alpha1 cannot
hold — `spec.engine` (v1alpha1 only knows mysql), an unset `spec.version` (v1alpha1 shows the engine's
default), `spec.storage.storageClassName`, `spec.backup.schedule.timeZone` — travels in the
`FIELDS_ANNOTATION` of a v1alpha1 object (see `conversion`), so a v1alpha1 client's read-modify-write
loses nothing.
"""

from __future__ import annotations

from pydantic import Field

from .v1 import (
    DEFAULT_CRON,
    GROUP,
    VERSION_PATTERN,
    MySQLClusterStatus,
    ObjectMeta,
    Quantity,
    Resources,
    _Model,
)

VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
FIELDS_ANNOTATION = f"{GROUP}/v1beta1-fields"
"""On v1alpha1 objects only: JSON of the hub's spec fields this version has no place for. Named when
v1beta1 was the hub; kept, since objects that v1alpha1 clients hold carry it."""


class Backup(_Model):
    """Scheduled logical backups (mysqldump) into the `<name>-backup` PVC."""

    enabled: bool = False
    """Run the backup CronJob, and a final backup of the data volume when the cluster is deleted."""
    schedule: str = Field(default=DEFAULT_CRON, min_length=1, max_length=128)
    """Cron schedule in the standard five-field form, or a macro such as `@daily`."""
    retention_days: int = Field(default=7, ge=1, le=3650, alias="retentionDays")
    """Dumps older than this many days are pruned after each backup."""


class MySQLClusterSpec(_Model):
    """Desired state of a MySQL cluster."""

    replicas: int = Field(ge=1, le=9)
    """Number of MySQL pods. Pod 0 is the primary (Service `<name>-primary`); the others replicate
    from it (GTID auto-position) and are read-only."""
    version: str = Field(default="8.0", pattern=VERSION_PATTERN, max_length=64)
    """Tag of the `mysql` image."""
    storage_size: Quantity = Field(
        alias="storageSize",
        json_schema_extra={
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "storageSize is immutable"}]
        },
    )
    """Size of each pod's data volume, e.g. `10Gi`. Immutable."""
    resources: Resources | None = None
    """CPU and memory of each MySQL container; unset means no requests or limits."""
    backup: Backup = Field(default_factory=Backup)
    """Backup settings; backups are off unless enabled."""


class MySQLClusterModel(_Model):
    """A MySQL database cluster run as a StatefulSet (v1alpha1; prefer v1)."""

    api_version: str | None = Field(default=None, alias="apiVersion")
    """APIVersion of this representation."""
    kind: str | None = None
    """Kind of this object."""
    metadata: ObjectMeta | None = None
    spec: MySQLClusterSpec
    """Desired state."""
    status: MySQLClusterStatus | None = None
    """Observed state."""
