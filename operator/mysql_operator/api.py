"""The MySQLCluster API (`db.example.com/v1alpha1`) as pydantic models.

These models are the single source of truth: `manifests.py` turns them into the CRD's structural
schema, and the reconciler parses live objects with them, so a default lives in exactly one place.
Attribute docstrings become the schema's descriptions (what `kubectl explain` shows).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

GROUP = "db.example.com"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "MySQLCluster"
PLURAL = "mysqlclusters"
SINGULAR = "mysqlcluster"
SHORT_NAMES = ["mysql"]

FINALIZER = f"{GROUP}/final-backup"
SKIP_FINAL_BACKUP_ANNOTATION = f"{GROUP}/skip-final-backup"

MAX_NAME_LENGTH = 45
"""The longest child name is `<name>-backup`, a CronJob: its name may have 52 characters at most
because Jobs it spawns append 11. 52 - len("-backup") = 45."""

# Kubernetes' canonical quantity grammar (resource.Quantity), without a sign: sizes are positive.
QUANTITY_PATTERN = r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|([eE][-+]?[0-9]+))?$"
# Tags of the official mysql image: 8.0, 8.4.3, 9, 8.0-debian, 8.0.36-oracle.
VERSION_PATTERN = r"^[0-9]+(\.[0-9]+){0,2}(-[a-z0-9]+)?$"
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


class Backup(_Model):
    """Scheduled logical backups (mysqldump) into the `<name>-backup` PVC."""

    enabled: bool = False
    """Run the backup CronJob, and a final backup of the data volume when the cluster is deleted."""
    schedule: str = Field(default="0 2 * * *", min_length=1, max_length=128)
    """Cron schedule in the standard five-field form, or a macro such as `@daily`."""
    retention_days: int = Field(default=7, ge=1, le=3650, alias="retentionDays")
    """Dumps older than this many days are pruned after each backup."""


class MySQLClusterSpec(_Model):
    """Desired state of a MySQL cluster."""

    replicas: int = Field(ge=1, le=9)
    """Number of MySQL pods; pod 0 is the primary."""
    version: str = Field(default="8.0", pattern=VERSION_PATTERN, max_length=64)
    """Tag of the `mysql` image."""
    storage_size: Quantity = Field(
        alias="storageSize",
        json_schema_extra={
            # volumeClaimTemplates of a StatefulSet cannot change after creation.
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "storageSize is immutable"}]
        },
    )
    """Size of each pod's data volume, e.g. `10Gi`. Immutable."""
    resources: Resources | None = None
    """CPU and memory of each MySQL container; unset means no requests or limits."""
    backup: Backup = Field(default_factory=Backup)
    """Backup settings; backups are off unless enabled."""


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


class MySQLClusterStatus(_Model):
    """Observed state, written only by the operator through the status subresource."""

    phase: Phase | None = None
    """Pending, Running, Failed or Terminating."""
    ready_replicas: int | None = Field(default=None, ge=0, alias="readyReplicas")
    """MySQL pods passing their readiness probe."""
    primary_endpoint: str | None = Field(default=None, alias="primaryEndpoint")
    """host:port of the primary (pod 0)."""
    observed_generation: int | None = Field(default=None, ge=0, alias="observedGeneration")
    """metadata.generation this status was computed from."""
    conditions: list[Condition] | None = Field(
        default=None,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Ready, Progressing and Degraded."""


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
