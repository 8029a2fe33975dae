"""The operator's RBAC, granted the way a test needs it: per test namespace, never as admin.

From the manifests of `envtest_operator_rbac`:
- the ClusterRole is bound in the test namespace with a RoleBinding (its namespaced rules apply there
  only), and a ClusterRole derived from it — only the rules on resources discovery reports as
  cluster-scoped, and nonResourceURLs — is bound cluster-wide with a ClusterRoleBinding. Binding the
  whole ClusterRole cluster-wide would grant its namespaced rules in every namespace, which the
  operator under test must not get (it would hide a missing namespace scope);
- each Role (leader election on a Lease, get/update limited by resourceNames, …) is re-created in the
  test namespace and bound there.
The derived ClusterRole depends on the manifests only, not on the namespace: one per process and
cluster serves every test (`envtest.plugin.context`), labelled for the process so its session sweep
finds it. Everything that grants is per test: the bindings, of that test's ServiceAccount. The
ClusterRoleBinding also carries the test namespace's label; teardown deletes it by name.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import requests

RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_API = f"apis/{RBAC_GROUP}/v1"
NAMESPACE_LABEL = "envtest.io/namespace"
"""On the cluster-scoped objects made for one test namespace: teardown deletes them by it."""

Manifest = tuple[Path, dict[str, Any]]
Rule = dict[str, Any]
"""One PolicyRule, as the API holds it."""
Scopes = Mapping[str, Mapping[str, bool]]
"""API group → resource name → namespaced, as discovery reports it."""


def is_role(doc: dict[str, Any]) -> bool:
    return doc.get("kind") == "Role" and str(doc.get("apiVersion", "")).startswith(f"{RBAC_GROUP}/")


def split_manifests(docs: Iterable[Manifest]) -> tuple[list[Manifest], list[Manifest]]:
    """(documents applied once per session, Roles applied in each test namespace). A Role has no
    namespace of its own here: the operator's deployment namespace is not the test's."""
    session, roles = [], []
    for source, doc in docs:
        (roles if is_role(doc) else session).append((source, doc))
    return session, roles


def role_in(doc: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The Role re-namespaced: only its name, labels and rules travel (no uid, no resourceVersion)."""
    meta = doc.get("metadata") or {}
    role = {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "Role",
        "metadata": {"name": meta["name"], "namespace": namespace},
        "rules": copy.deepcopy(doc.get("rules") or []),
    }
    if meta.get("labels"):
        role["metadata"]["labels"] = dict(meta["labels"])
    return role


def binding(
    kind: str,
    name: str,
    *,
    role_kind: str,
    role_name: str,
    service_account: str,
    namespace: str,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A RoleBinding (in `namespace`) or ClusterRoleBinding of `service_account` in `namespace`."""
    meta: dict[str, Any] = {"name": name}
    if kind == "RoleBinding":
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }


def cluster_role(name: str, rules: list[dict[str, Any]], labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": dict(labels)},
        "rules": rules,
    }


def url_of(server: str, doc: Mapping[str, Any]) -> str:
    """The URL of an RBAC object: the four kinds are known, so no discovery round trip is needed."""
    meta = doc["metadata"]
    scope = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    return f"{server}/{RBAC_API}{scope}/{str(doc['kind']).lower()}s/{meta['name']}"


def cluster_scoped_rules(rules: Iterable[Mapping[str, Any]], scopes: Scopes) -> list[dict[str, Any]]:
    """The part of `rules` that a namespace-scoped binding can never grant: rules on cluster-scoped
    resources (per `scopes`, so CRDs of either scope are judged right), and nonResourceURLs.
    A wildcard group or resource expands to the cluster-scoped resources discovery knows; a resource
    discovery does not know is dropped (nothing to grant yet)."""
    derived: list[dict[str, Any]] = []
    for rule in rules:
        verbs = list(rule.get("verbs") or [])
        if rule.get("nonResourceURLs"):
            derived.append({"nonResourceURLs": list(rule["nonResourceURLs"]), "verbs": verbs})
        groups = rule.get("apiGroups") or []
        for group in sorted(scopes) if "*" in groups else groups:
            known = scopes.get(group, {})
            names: list[str] = []
            for resource in rule.get("resources") or []:
                if resource == "*":
                    names += sorted(n for n, namespaced in known.items() if not namespaced)
                elif known.get(resource.split("/", 1)[0]) is False:
                    names.append(resource)
            if names:
                out: dict[str, Any] = {"apiGroups": [group], "resources": names, "verbs": verbs}
                if rule.get("resourceNames"):
                    out["resourceNames"] = list(rule["resourceNames"])
                derived.append(out)
    return derived


def namespaced_rules(rules: Iterable[Mapping[str, Any]], scopes: Scopes) -> list[dict[str, Any]]:
    """The part of `rules` a RoleBinding grants in its namespace: rules that name no resource
    discovery reports as cluster-scoped (wildcards kept: they also match namespaced resources)."""
    kept: list[dict[str, Any]] = []
    for rule in rules:
        if rule.get("nonResourceURLs") or not rule.get("resources"):
            continue
        groups = rule.get("apiGroups") or []
        resources = [
            r
            for r in rule["resources"]
            if r == "*"
            or "*" in groups
            or not any(scopes.get(g, {}).get(r.split("/", 1)[0]) is False for g in groups)
        ]
        if resources:
            kept.append({**rule, "resources": resources})
    return kept


def discover_scopes(
    session: requests.Session, server: str, groups: Iterable[str]
) -> dict[str, dict[str, bool]]:
    """Discovery's namespaced flag of every resource of `groups` ("*": every group served)."""
    wanted = set(groups)
    served = session.get(f"{server}/apis", timeout=10).json().get("groups", [])
    versions: dict[str, list[str]] = {"": ["api/v1"]}
    for group in served:
        versions[group["name"]] = [f"apis/{v['groupVersion']}" for v in group.get("versions", [])]
    if "*" not in wanted:
        versions = {g: v for g, v in versions.items() if g in wanted}
    scopes: dict[str, dict[str, bool]] = {}
    for group, paths in versions.items():
        for path in paths:
            resp = session.get(f"{server}/{path}", timeout=10)
            if resp.status_code != 200:
                continue
            for res in resp.json().get("resources", []):
                scopes.setdefault(group, {}).setdefault(res["name"].split("/", 1)[0], bool(res["namespaced"]))
    return scopes
