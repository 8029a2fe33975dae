"""What a session end may delete (only its own process's objects), and the operator's RBAC as the
harness derives it — both without a cluster."""

from __future__ import annotations

from typing import Any

from envtest import objects, runs
from envtest.plugin import rbac, sweep

SERVER = "https://apiserver"


class _Resp:
    def __init__(self, body: dict[str, Any], status: int = 200) -> None:
        self.status_code, self._body = status, body

    @property
    def ok(self) -> bool:
        return self.status_code < 400

    def json(self) -> dict[str, Any]:
        return self._body


def _matches(labels: dict[str, str], selector: str) -> bool:
    return all(labels.get(k) == v for k, v in (term.split("=", 1) for term in selector.split(",")))


class FakeCluster:
    """Namespaces and cluster RBAC objects with labels; list and delete-collection honour selectors."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, dict[str, str]]] = {
            "namespaces": {},
            "clusterrolebindings": {},
            "clusterroles": {},
        }

    def add(self, plural: str, name: str, labels: dict[str, str]) -> None:
        self.objects[plural][name] = labels

    def get(self, url: str, params: dict[str, str] | None = None, **_: Any) -> _Resp:
        plural = url.rsplit("/", 1)[1]
        sel = (params or {}).get("labelSelector", "")
        if plural not in self.objects:
            return _Resp({}, 404)
        items = [
            {"metadata": {"name": n}} for n, lab in self.objects.get(plural, {}).items() if _matches(lab, sel)
        ]
        return _Resp({"items": items}) if plural in self.objects else _Resp({}, 404)

    def delete(self, url: str, params: dict[str, str] | None = None, **_: Any) -> _Resp:
        if params and "labelSelector" in params:  # delete collection
            plural = url.rsplit("/", 1)[1]
            for name in [
                n for n, lab in self.objects[plural].items() if _matches(lab, params["labelSelector"])
            ]:
                del self.objects[plural][name]
        else:
            plural, name = url.rsplit("/", 2)[1:]
            self.objects.get(plural, {}).pop(name, None)
        return _Resp({})

    def patch(self, *_: Any, **__: Any) -> _Resp:
        return _Resp({})


def test_sweep_deletes_only_what_this_worker_created_in_this_run() -> None:
    fake = FakeCluster()
    for worker in ("gw0", "gw1"):
        fake.add("namespaces", f"test-{worker}", sweep.labels("run1", worker))
        fake.add("clusterrolebindings", f"envtest-operator-test-{worker}", sweep.labels("run1", worker))
        fake.add("clusterroles", f"envtest-operator-test-{worker}", sweep.labels("run1", worker))
    fake.add("namespaces", "test-earlier-run", sweep.labels("run0", "gw0"))
    fake.add("namespaces", "kube-system", {})

    deleted = runs.remove(fake, SERVER, sweep.selector("run1", "gw0"), cr_paths=[])  # type: ignore[arg-type]

    assert deleted == [
        "Namespace/test-gw0",
        "ClusterRoleBinding/envtest-operator-test-gw0",
        "ClusterRole/envtest-operator-test-gw0",
    ]
    assert set(fake.objects["namespaces"]) == {"test-gw1", "test-earlier-run", "kube-system"}
    assert set(fake.objects["clusterrolebindings"]) == {"envtest-operator-test-gw1"}
    assert set(fake.objects["clusterroles"]) == {"envtest-operator-test-gw1"}


def test_selector_names_both_run_and_worker() -> None:
    assert sweep.selector("abc", "gw3") == "envtest.io/run=abc,envtest.io/worker=gw3"


SCOPES = {
    "": {"namespaces": False, "nodes": False, "configmaps": True, "pods": True},
    "apiextensions.k8s.io": {"customresourcedefinitions": False},
    "db.example.com": {"mysqlclusters": True},
}


def test_derived_cluster_role_keeps_only_cluster_scoped_resources_and_non_resource_urls() -> None:
    rules = [
        {"apiGroups": [""], "resources": ["namespaces", "configmaps", "nodes/status"], "verbs": ["list"]},
        {"apiGroups": ["db.example.com"], "resources": ["mysqlclusters"], "verbs": ["get"]},
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "verbs": ["get"],
            "resourceNames": ["mysqlclusters.db.example.com"],
        },
        {"nonResourceURLs": ["/healthz"], "verbs": ["get"]},
        {"apiGroups": ["unknown.example.com"], "resources": ["things"], "verbs": ["get"]},
    ]
    assert rbac.cluster_scoped_rules(rules, SCOPES) == [
        {"apiGroups": [""], "resources": ["namespaces", "nodes/status"], "verbs": ["list"]},
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "verbs": ["get"],
            "resourceNames": ["mysqlclusters.db.example.com"],
        },
        {"nonResourceURLs": ["/healthz"], "verbs": ["get"]},
    ]


def test_wildcards_expand_to_cluster_scoped_resources_only() -> None:
    derived = rbac.cluster_scoped_rules([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}], SCOPES)
    granted = {(r["apiGroups"][0], res) for r in derived for res in r["resources"]}
    assert granted == {
        ("", "namespaces"),
        ("", "nodes"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
    }


def test_role_is_renamespaced_without_server_fields_and_bound_to_the_service_account() -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "leader", "namespace": "op-system", "uid": "x", "resourceVersion": "9"},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]}],
    }
    copy = rbac.role_in(role, "test-ns")
    assert copy["metadata"] == {"name": "leader", "namespace": "test-ns"}
    assert copy["rules"] == role["rules"]
    binding = rbac.binding(
        "RoleBinding",
        "envtest-operator-leader",
        role_kind="Role",
        role_name="leader",
        service_account="envtest-operator",
        namespace="test-ns",
    )
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leader"}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "envtest-operator", "namespace": "test-ns"}
    ]
    assert (
        rbac.url_of(SERVER, copy)
        == f"{SERVER}/apis/rbac.authorization.k8s.io/v1/namespaces/test-ns/roles/leader"
    )
    assert rbac.url_of(SERVER, {"kind": "ClusterRoleBinding", "metadata": {"name": "b"}}) == (
        f"{SERVER}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/b"
    )


def test_custom_resource_urls_put_the_namespace_before_the_plural() -> None:
    # `apis/<g>/<v>/<plural>/namespaces/<ns>` is a 404 the teardown read as "nothing left": it deleted
    # no custom resource, so a stuck finalizer could never show.
    url = objects.namespaced_url(SERVER, "apis/db.example.com/v1alpha1/mysqlclusters", "ns")
    assert url == f"{SERVER}/apis/db.example.com/v1alpha1/namespaces/ns/mysqlclusters"
