"""Every API permission the operator uses, declared once, with the reason for each.

`operator/config/rbac.yaml` (the ClusterRole) is generated from `PERMISSIONS`; the E2E suite runs the
operator under that role, so a call missing here fails a test instead of a deployment.

Leases are the leader election's and live in one namespace: cluster-wide lease rights would let the
operator rewrite any component's lock (kube-scheduler's and kube-controller-manager's included, so
it could make them step down). `operator/config/leader_election_role.yaml` is a namespaced Role
instead, get/update limited to our Lease by resourceNames (create cannot be: the name is not known
to the authorizer at create time); the E2E harness binds it in each test namespace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..api.v1 import GROUP, PLURAL

CLUSTER_ROLE = "mysql-operator"
LEADER_ELECTION_ROLE = "mysql-operator-leader-election"
LEADER_ELECTION_NAMESPACE = "mysql-operator-system"
"""Where the Deployment runs (operator/config/manager.yaml) and so where its Lease lives."""
LEASE_NAME = "mysql-operator-leader"
"""ManagerOptions.leader_election_id's default."""


@dataclass(frozen=True)
class Permission:
    group: str
    """API group; "" is the core group."""
    resource: str
    """Plural resource, with "/subresource" where it applies."""
    verbs: tuple[str, ...]
    why: str
    """Which code path makes these calls."""
    resource_names: tuple[str, ...] = ()
    """Only these objects (`resourceNames`); empty means every object of the resource."""


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
    Permission(
        "",
        "secrets",
        ("get", "list", "watch", "create", "patch"),
        "retained credentials; patch only drops an older operator's ownerReference",
    ),
    Permission(
        "batch",
        "cronjobs",
        ("get", "list", "watch", "create", "patch", "delete"),
        "owned child; deleted when backups are disabled",
    ),
    Permission(
        "batch", "jobs", ("get", "create", "delete"), "final backup Job; a failed one is deleted to retry"
    ),
    Permission(
        "",
        "pods",
        ("list", "delete"),
        "final backup waits until no database pod is left; deletes pods that outstay their grace",
    ),
    Permission("", "persistentvolumeclaims", ("get", "create"), "backup PVC; data PVC existence check"),
    Permission(
        "",
        "persistentvolumes",
        ("get",),
        "final backup Job: node affinity of pod 0's data volume, so the archive runs in its zone",
    ),
    Permission("", "events", ("create", "patch"), "event recorder; patch aggregates repeats"),
    Permission(
        "storage.k8s.io",
        "storageclasses",
        ("get", "list"),
        "webhooks: a referenced class must exist; the default class is pinned at create",
    ),
    Permission(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        ("get",),
        "migrate-storage: the CRD's storage version and storedVersions",
        (f"{PLURAL}.{GROUP}",),
    ),
    Permission(
        "apiextensions.k8s.io",
        "customresourcedefinitions/status",
        ("patch",),
        "migrate-storage: trim storedVersions once every object is re-stored",
        (f"{PLURAL}.{GROUP}",),
    ),
)

LEASE_PERMISSIONS: tuple[Permission, ...] = (
    Permission("coordination.k8s.io", "leases", ("get", "update"), "leader election: renew our Lease"),
    Permission("coordination.k8s.io", "leases", ("create",), "leader election: the first candidate"),
)


def _rule(p: Permission, names: list[str] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"apiGroups": [p.group], "resources": [p.resource]}
    if names:
        rule["resourceNames"] = names
    rule["verbs"] = list(p.verbs)
    return rule


def cluster_role() -> dict[str, Any]:
    rules = [_rule(p, list(p.resource_names)) for p in PERMISSIONS]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": CLUSTER_ROLE, "labels": {"app.kubernetes.io/name": "mysql-operator"}},
        "rules": rules,
    }


def leader_election_role(
    namespace: str = LEADER_ELECTION_NAMESPACE, lease: str = LEASE_NAME
) -> dict[str, Any]:
    """The namespaced Role for the Lease; `resourceNames` where the authorizer can check them."""
    get_update, create = LEASE_PERMISSIONS
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {
            "name": LEADER_ELECTION_ROLE,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "mysql-operator"},
        },
        "rules": [_rule(get_update, [lease]), _rule(create)],
    }


def allowed(group: str, resource: str, verb: str) -> bool:
    """Whether the generated roles grant `verb` on `group`/`resource` (for tests of the code paths)."""
    every = (*PERMISSIONS, *LEASE_PERMISSIONS)
    return any(p.group == group and p.resource == resource and verb in p.verbs for p in every)
