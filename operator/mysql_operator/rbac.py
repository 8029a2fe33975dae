"""Every API permission the operator uses, declared once, with the reason for each.

`operator/config/rbac.yaml` (the ClusterRole) is generated from `PERMISSIONS`; the E2E suite runs the
operator under that role, so a call missing here fails a test instead of a deployment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .api import GROUP, PLURAL

CLUSTER_ROLE = "mysql-operator"


@dataclass(frozen=True)
class Permission:
    group: str
    """API group; "" is the core group."""
    resource: str
    """Plural resource, with "/subresource" where it applies."""
    verbs: tuple[str, ...]
    why: str
    """Which code path makes these calls."""


PERMISSIONS: tuple[Permission, ...] = (
    Permission(GROUP, PLURAL, ("get", "list", "watch", "patch"), "informer, fresh reads, finalizer"),
    Permission(GROUP, f"{PLURAL}/status", ("patch",), "status merge patch"),
    Permission(
        GROUP,
        f"{PLURAL}/finalizers",
        ("update",),
        "children carry blockOwnerDeletion, which OwnerReferencesPermissionEnforcement checks",
    ),
    Permission("apps", "statefulsets", ("get", "list", "watch", "create", "patch"), "owned child"),
    Permission("", "services", ("get", "list", "watch", "create", "patch"), "owned child"),
    Permission("", "secrets", ("get", "list", "watch", "create", "patch"), "owned child; patch only adopts"),
    Permission(
        "batch",
        "cronjobs",
        ("get", "list", "watch", "create", "patch", "delete"),
        "owned child; deleted when backups are disabled",
    ),
    Permission("batch", "jobs", ("get", "create", "delete"), "final backup Job, deleted once finished"),
    Permission("", "persistentvolumeclaims", ("get", "create"), "backup PVC; data PVC existence check"),
    Permission("", "events", ("create", "patch"), "event recorder; patch aggregates repeats"),
    Permission("coordination.k8s.io", "leases", ("get", "create", "update"), "leader election"),
)


def cluster_role() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": CLUSTER_ROLE, "labels": {"app.kubernetes.io/name": "mysql-operator"}},
        "rules": [
            {"apiGroups": [p.group], "resources": [p.resource], "verbs": list(p.verbs)} for p in PERMISSIONS
        ],
    }


def allowed(group: str, resource: str, verb: str) -> bool:
    """Whether the generated role grants `verb` on `group`/`resource` (for tests of the code paths)."""
    return any(p.group == group and p.resource == resource and verb in p.verbs for p in PERMISSIONS)
