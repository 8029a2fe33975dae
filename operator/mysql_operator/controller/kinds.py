"""pykube classes for every kind the operator reads or writes.

pykube-ng ships most of them; MySQLCluster is ours, Lease is the leader election's. The reconciler and
`client` use only each class's `version`, `endpoint` and `kind`, so these stay plain.
"""

from __future__ import annotations

from typing import Any

from pykube import (
    CronJob,
    Event,
    Job,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    Secret,
    Service,
    StatefulSet,
)
from pykube.objects import APIObject, NamespacedAPIObject

from ..api.v1 import API_VERSION, KIND, PLURAL
from ..runtime.leader import Lease

__all__ = [
    "APIObject",
    "CronJob",
    "Event",
    "Job",
    "Kind",
    "Lease",
    "MySQLCluster",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Pod",
    "Secret",
    "Service",
    "StatefulSet",
]

Kind = type[APIObject]
"""A pykube class standing for a resource type (its version, endpoint and kind)."""


class MySQLCluster(NamespacedAPIObject):
    version = API_VERSION
    endpoint = PLURAL
    kind = KIND

    def patch_status(self, status: dict[str, Any]) -> None:
        """Merge-patch the status subresource: the main endpoint ignores status changes."""
        self.patch({"status": status}, subresource="status")
