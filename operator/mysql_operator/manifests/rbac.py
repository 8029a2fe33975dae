"""Every API permission the operator uses, declared once, with the reason for each.

Two install modes, generated from the same table (`PERMISSIONS`):

* cluster-wide: `operator/config/rbac.yaml`, one ClusterRole bound cluster-wide (manager.yaml): the
  operator watches every namespace, so it may read and write its children's kinds in every one;
* namespaced (`run --watch-namespaces a,b`): `rbac_namespaced.yaml`, a Role and RoleBinding applied in
  each watched namespace (`kubectl apply -n a -f …`), and `rbac_cluster_reads.yaml`, a ClusterRole of
  the two cluster-scoped reads (PersistentVolumes, StorageClasses). No Secret, StatefulSet or Job
  right exists outside the watched namespaces.

The E2E suite runs the operator under rbac.yaml bound in the test's namespace only (the harness derives
the cluster-scoped part), so a call missing here fails a test instead of a deployment.

`migrate-storage` runs once per upgrade, as its own ServiceAccount (`storage_migration.yaml`: the
account, a ClusterRole and a Job): the CRD status patch it needs is nobody else's, the running
operator's least of all.

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
ROLE = "mysql-operator"
"""The namespaced mode's Role (and RoleBinding), one in each watched namespace."""
CLUSTER_READS_ROLE = "mysql-operator-cluster-reads"
SERVICE_ACCOUNT = "mysql-operator"
MIGRATION = "mysql-operator-storage-migration"
"""ServiceAccount, ClusterRole and Job of `migrate-storage`."""
IMAGE = "mysql-operator:dev"
"""The image manager.yaml runs (kind-deploy builds and loads it)."""
LABELS = {"app.kubernetes.io/name": "mysql-operator"}
RBAC_API = "rbac.authorization.k8s.io/v1"
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
    cluster_scoped: bool = False
    """The resource has no namespace: granted by a ClusterRole in either install mode."""


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
        ("get", "list", "watch", "patch", "delete"),
        "informer (roles: readiness, the primary); patch: the role label that moves the primary "
        "Service; delete: final backup stops pods that outstay their grace",
    ),
    Permission(
        "",
        "pods/exec",
        ("create", "get"),
        "failover and switchover: GTID positions, fencing, promotion (create; get for the WebSocket "
        "upgrade where the apiserver still authorizes it so)",
    ),
    Permission(
        "",
        "persistentvolumeclaims",
        ("get", "list", "watch", "create"),
        "backup PVC; informer of the data claims (a replaced primary volume is never served)",
    ),
    Permission(
        "",
        "persistentvolumes",
        ("get",),
        "final backup Job: node affinity of the primary's data volume, so the archive runs in its zone",
        cluster_scoped=True,
    ),
    Permission(
        "",
        "events",
        ("create", "patch", "list"),
        "event recorder (patch aggregates repeats); list: why a final backup Job cannot create its pod",
    ),
    Permission(
        "storage.k8s.io",
        "storageclasses",
        ("get", "list"),
        "webhooks: a referenced class must exist; the default class is pinned at create",
        cluster_scoped=True,
    ),
)
"""What the running operator calls (the PersistentVolume rule above is cluster-scoped too)."""

MIGRATION_PERMISSIONS: tuple[Permission, ...] = (
    Permission(
        GROUP, PLURAL, ("list", "patch"), "migrate-storage: re-store every object, in every namespace"
    ),
    Permission(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        ("get",),
        "migrate-storage: the CRD's storage version and storedVersions",
        (f"{PLURAL}.{GROUP}",),
        cluster_scoped=True,
    ),
    Permission(
        "apiextensions.k8s.io",
        "customresourcedefinitions/status",
        ("patch",),
        "migrate-storage: trim storedVersions once every object is re-stored",
        (f"{PLURAL}.{GROUP}",),
        cluster_scoped=True,
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


def _role(kind: str, name: str, permissions: tuple[Permission, ...]) -> dict[str, Any]:
    return {
        "apiVersion": RBAC_API,
        "kind": kind,
        "metadata": {"name": name, "labels": LABELS},
        "rules": [_rule(p, list(p.resource_names)) for p in permissions],
    }


def _binding(kind: str, name: str, role_kind: str, account: str = SERVICE_ACCOUNT) -> dict[str, Any]:
    return {
        "apiVersion": RBAC_API,
        "kind": kind,
        "metadata": {"name": name, "labels": LABELS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": LEADER_ELECTION_NAMESPACE}],
    }


def cluster_role() -> dict[str, Any]:
    """The cluster-wide mode: every permission, in every namespace (bound in manager.yaml)."""
    return _role("ClusterRole", CLUSTER_ROLE, PERMISSIONS)


def namespaced_role_docs() -> list[dict[str, Any]]:
    """The namespaced mode, per watched namespace: a Role of the namespaced permissions and its
    RoleBinding. Neither names a namespace: `kubectl apply -n NS` puts them where they grant."""
    namespaced = tuple(p for p in PERMISSIONS if not p.cluster_scoped)
    return [_role("Role", ROLE, namespaced), _binding("RoleBinding", ROLE, "Role")]


def cluster_reads_docs() -> list[dict[str, Any]]:
    """The namespaced mode's cluster-scoped reads (no namespace holds PersistentVolumes or
    StorageClasses): a ClusterRole of those rules only, bound cluster-wide."""
    cluster_scoped = tuple(p for p in PERMISSIONS if p.cluster_scoped)
    return [
        _role("ClusterRole", CLUSTER_READS_ROLE, cluster_scoped),
        _binding("ClusterRoleBinding", CLUSTER_READS_ROLE, "ClusterRole"),
    ]


def storage_migration_docs() -> list[dict[str, Any]]:
    """`migrate-storage` as a Job of its own ServiceAccount, the only holder of its grants: run it
    after an upgrade (`kubectl apply -f`; `kubectl -n mysql-operator-system wait --for=condition=complete
    job/mysql-operator-storage-migration`), delete it after."""
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": MIGRATION, "namespace": LEADER_ELECTION_NAMESPACE, "labels": LABELS},
    }
    binding = _binding("ClusterRoleBinding", MIGRATION, "ClusterRole", account=MIGRATION)
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": MIGRATION, "namespace": LEADER_ELECTION_NAMESPACE, "labels": LABELS},
        "spec": {
            "backoffLimit": 3,
            "ttlSecondsAfterFinished": 86400,
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {
                    "serviceAccountName": MIGRATION,
                    "restartPolicy": "Never",
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65532,
                        "runAsGroup": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "migrate-storage",
                            "image": IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "args": ["migrate-storage", "--log-format=json"],
                            "securityContext": {**restricted, "readOnlyRootFilesystem": True},
                        }
                    ],
                },
            },
        },
    }
    return [account, _role("ClusterRole", MIGRATION, MIGRATION_PERMISSIONS), binding, job]


def leader_election_role(
    namespace: str = LEADER_ELECTION_NAMESPACE, lease: str = LEASE_NAME
) -> dict[str, Any]:
    """The namespaced Role for the Lease; `resourceNames` where the authorizer can check them."""
    get_update, create = LEASE_PERMISSIONS
    return {
        "apiVersion": RBAC_API,
        "kind": "Role",
        "metadata": {"name": LEADER_ELECTION_ROLE, "namespace": namespace, "labels": LABELS},
        "rules": [_rule(get_update, [lease]), _rule(create)],
    }


def allowed(group: str, resource: str, verb: str) -> bool:
    """Whether the running operator's roles grant `verb` on `group`/`resource` (for tests of the code
    paths; `migrate-storage`'s grants are not the operator's)."""
    every = (*PERMISSIONS, *LEASE_PERMISSIONS)
    return any(p.group == group and p.resource == resource and verb in p.verbs for p in every)
