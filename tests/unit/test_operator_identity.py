"""The operator's per-test identity (envtest.plugin.context): every binding, the ServiceAccount and its
token stay per test; only the ClusterRole of the cluster-scoped rules is shared, once per process and
cluster; release deletes exactly the test's cluster-scoped grants."""

from __future__ import annotations

import json
import threading
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from envtest.errors import EnvtestError
from envtest.plugin import context
from envtest.plugin.context import TestContext
from envtest.plugin.recording import RecordSettings, SessionRecord
from envtest.plugin.releases import Releases

SERVER = "https://127.0.0.1:6443"
RBAC = f"{SERVER}/apis/rbac.authorization.k8s.io/v1"
STORAGECLASSES = [{"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get"]}]
CONFIGMAPS = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]}]
LEADER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "Role",
    "metadata": {"name": "leader", "namespace": "operator-system"},
    "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]}],
}


class Reply:
    def __init__(self, status: int = 200, body: dict[str, Any] | None = None) -> None:
        self.status_code, self._body, self.text = status, body or {}, ""

    def json(self) -> dict[str, Any]:
        return self._body


class Api:
    """Records every request; PATCH (server-side apply) and DELETE succeed unless told otherwise."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.lock = threading.Lock()
        self.fail_apply_of: str | None = None
        self.barrier: threading.Barrier | None = None
        """When set, each request waits there: only requests in flight together get through."""
        self.post_status: dict[str, int] = {}
        """Status of a POST by the last segment of its URL (default 201)."""
        self.denials = 0
        """How many SubjectAccessReviews are answered "not allowed" before all are allowed."""
        self.reviews: list[dict[str, Any]] = []

    def _record(self, method: str, url: str, body: Any) -> None:
        with self.lock:
            self.calls.append((method, url, body))
        if self.barrier is not None:
            self.barrier.wait()

    def patch(self, url: str, data: str = "", **kwargs: Any) -> Reply:
        self._record("PATCH", url, data)
        if self.fail_apply_of and url.endswith(self.fail_apply_of):
            return Reply(422)
        return Reply(200)

    def delete(self, url: str, **kwargs: Any) -> Reply:
        self._record("DELETE", url, kwargs.get("json"))
        return Reply(200)

    def get(self, url: str, **kwargs: Any) -> Reply:
        self._record("GET", url, kwargs.get("params"))
        return Reply(200, {"metadata": {"resourceVersion": "1"}, "items": []})

    def post(self, url: str, json: Any = None, **kwargs: Any) -> Reply:
        if url.endswith("/subjectaccessreviews"):  # asked after the writes, one at a time
            with self.lock:
                self.reviews.append(json["spec"])
                allowed, self.denials = self.denials == 0, max(self.denials - 1, 0)
            return Reply(201, {"status": {"allowed": allowed}})
        self._record("POST", url, json)
        return Reply(self.post_status.get(url.rsplit("/", 1)[-1], 201))

    def urls(self, method: str, part: str = "") -> list[str]:
        return [u.removeprefix(SERVER) for m, u, _ in self.calls if m == method and part in u]


class Cluster:
    backend = "local"

    def __init__(self, tmp_path: Path) -> None:
        self.session = Api()
        self.server = SERVER
        self.identities: list[str] = []
        self._tmp = tmp_path
        self.has_controllers = True
        self.pods_dir = None

    def identity_kubeconfig(self, namespace: str, service_account: str, path: Path) -> Path:
        self.session._record("POST", f"{SERVER}/api/v1/namespaces/{namespace}/serviceaccounts", None)
        self.identities.append(f"{namespace}/{service_account}")
        user = {"name": "u", "user": {"token": "t0ken"}}
        config = {
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": SERVER}}],
            "users": [user],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": namespace}}],
            "current-context": "x",
        }
        path.write_text(json.dumps(config))
        return path


@pytest.fixture
def session(tmp_path: Path) -> Any:
    tmp_factory = SimpleNamespace(getbasetemp=lambda: tmp_path)
    return SimpleNamespace(
        config=SimpleNamespace(_tmp_path_factory=tmp_factory),
        labels={"envtest.io/run": "run1", "envtest.io/worker": "gw0"},
        run_id="run1",
        worker="gw0",
        operator_roles=[LEADER_ROLE],
        cr_paths=[],
        operator_clusterrole=lambda: "mysql-operator",
        cluster_scoped_rules=lambda cluster, role: STORAGECLASSES,
        namespaced_rules=lambda cluster, role: CONFIGMAPS,
        releases=Releases(),
        settings=SimpleNamespace(operator_loggers=()),
        recording=SessionRecord(RecordSettings(mode="off")),  # these fakes keep no audit log
    )


SHARED = f"{RBAC}/clusterroles/envtest-operator-mysql-operator-run1-gw0".removeprefix(SERVER)


def test_the_cluster_scoped_role_is_shared_and_everything_else_is_per_test(
    session: Any, tmp_path: Path
) -> None:
    cluster = Cluster(tmp_path)
    for i in (1, 2):
        TestContext(session, f"t{i}").operator_kubeconfig(cluster, f"ns{i}")  # type: ignore[arg-type]
    api = cluster.session
    # One role per process and cluster (one name), applied again with each grant: a role swept away
    # in between must not leave the next test's binding pointing at nothing.
    assert api.urls("PATCH", "/clusterroles/") == [SHARED, SHARED]
    assert api.urls("PATCH", "/clusterrolebindings/") == [
        f"{RBAC}/clusterrolebindings/envtest-operator-ns1".removeprefix(SERVER),
        f"{RBAC}/clusterrolebindings/envtest-operator-ns2".removeprefix(SERVER),
    ]
    bindings = [b for m, u, b in api.calls if m == "PATCH" and "/clusterrolebindings/" in u]
    assert all('"name": "envtest-operator-mysql-operator-run1-gw0"' in b for b in bindings)
    assert all('"envtest.io/namespace": "ns' in b for b in bindings), "release and the sweep find them"
    for ns in ("ns1", "ns2"):
        assert f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles/leader" in api.urls("PATCH")
    assert cluster.identities == ["ns1/envtest-operator", "ns2/envtest-operator"]


def test_another_cluster_gets_its_own_copy(session: Any, tmp_path: Path) -> None:
    first, private = Cluster(tmp_path), Cluster(tmp_path)
    TestContext(session, "t1").operator_kubeconfig(first, "ns1")  # type: ignore[arg-type]
    TestContext(session, "t1").operator_kubeconfig(private, "ns2")  # type: ignore[arg-type]
    assert private.session.urls("PATCH", "/clusterroles/") == [SHARED]


def test_identity_writes_go_out_together(session: Any, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    # RoleBinding, ClusterRole, ClusterRoleBinding, Role, its RoleBinding, and the identity: one
    # after the other, the first would wait at the barrier forever (here: until its timeout).
    cluster.session.barrier = threading.Barrier(6, timeout=10)
    TestContext(session, "t1").operator_kubeconfig(cluster, "ns1")  # type: ignore[arg-type]


def test_the_kubeconfig_is_handed_out_once_the_authorizer_allows_every_grant(
    session: Any, tmp_path: Path
) -> None:
    cluster = Cluster(tmp_path)
    cluster.session.denials = 2  # the authorizer's caches lag the bindings for two answers
    TestContext(session, "t1").operator_kubeconfig(cluster, "ns1")  # type: ignore[arg-type]
    reviews = cluster.session.reviews
    assert len(reviews) == 3 + 2, "each grant asked until allowed, none again once allowed"
    assert {r["user"] for r in reviews} == {"system:serviceaccount:ns1:envtest-operator"}
    asked = {json.dumps(r["resourceAttributes"], sort_keys=True) for r in reviews}
    assert asked == {
        json.dumps(a, sort_keys=True)
        for a in (
            {"verb": "list", "group": "", "resource": "configmaps", "namespace": "ns1"},
            {"verb": "get", "group": "storage.k8s.io", "resource": "storageclasses"},
            {"verb": "get", "group": "coordination.k8s.io", "resource": "leases", "namespace": "ns1"},
        )
    }


def test_a_failed_apply_fails_with_its_message_and_the_shared_role_is_tried_again(
    session: Any, tmp_path: Path
) -> None:
    cluster = Cluster(tmp_path)
    cluster.session.fail_apply_of = "/clusterroles/envtest-operator-mysql-operator-run1-gw0"
    with pytest.raises(EnvtestError, match="applying ClusterRole/envtest-operator-mysql-operator-run1-gw0"):
        TestContext(session, "t1").operator_kubeconfig(cluster, "ns1")  # type: ignore[arg-type]
    cluster.session.fail_apply_of = None
    TestContext(session, "t2").operator_kubeconfig(cluster, "ns2")  # type: ignore[arg-type]
    assert cluster.session.urls("PATCH", "/clusterroles/") == [SHARED, SHARED]


def test_release_deletes_the_tests_own_grants_by_name_and_the_namespace(session: Any, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    ctx = TestContext(session, "t1")
    ctx.operator_kubeconfig(cluster, "ns1")  # type: ignore[arg-type]
    ctx.release_namespace(cluster, "ns1")  # type: ignore[arg-type]
    assert session.releases.drain() == []
    assert sorted(cluster.session.urls("DELETE")) == [
        "/api/v1/namespaces/ns1",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/envtest-operator-ns1",
    ], "no shared ClusterRole, no label-selected collection delete"


def test_release_of_a_namespace_without_operator_deletes_only_the_namespace(
    session: Any, tmp_path: Path
) -> None:
    cluster = Cluster(tmp_path)
    TestContext(session, "t1").release_namespace(cluster, "ns1")  # type: ignore[arg-type]
    assert session.releases.drain() == []
    assert cluster.session.urls("DELETE") == ["/api/v1/namespaces/ns1"]


def test_a_failed_release_is_reported_under_its_own_test_never_inside_the_next(
    session: Any, tmp_path: Path
) -> None:
    cluster = Cluster(tmp_path)
    gate = threading.Event()
    real_delete = cluster.session.delete

    def blocked_delete(url: str, **kwargs: Any) -> Reply:
        gate.wait(10)
        if url.endswith("/ns1"):
            raise ConnectionError("apiserver gone")
        return real_delete(url, **kwargs)

    cluster.session.delete = blocked_delete  # type: ignore[method-assign]
    TestContext(session, "t1").release_namespace(cluster, "ns1")  # type: ignore[arg-type]
    assert cluster.session.urls("DELETE") == [], "release_namespace returned before deleting"
    gate.set()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the next test is not told: it did nothing wrong
        TestContext(session, "t2").release_namespace(cluster, "ns2")  # type: ignore[arg-type]
    assert session.releases.drain() == ["t1: releasing namespace ns1 failed: ConnectionError: apiserver gone"]
    assert "/api/v1/namespaces/ns2" in cluster.session.urls("DELETE")


def test_release_on_a_private_plane_happens_at_once(session: Any, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    ctx = TestContext(session, "t1")
    ctx.private = cluster  # type: ignore[assignment]
    ctx.release_namespace(cluster, "ns1")  # type: ignore[arg-type]
    assert cluster.session.urls("DELETE") == ["/api/v1/namespaces/ns1"]


def test_concurrently_keeps_order_waits_for_all_and_raises_the_first_failure() -> None:
    finished: list[str] = []

    def slow_ok() -> str:
        time.sleep(0.05)
        finished.append("slow")
        return "slow"

    def fails() -> str:
        raise EnvtestError("first")

    assert context._concurrently([slow_ok, lambda: "fast"]) == ["slow", "fast"]
    finished.clear()
    with pytest.raises(EnvtestError, match="first"):
        context._concurrently([fails, slow_ok])
    assert finished == ["slow"], "every call finished before the failure was raised"


def test_a_default_service_account_already_there_costs_one_read(session: Any, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    name = TestContext(session, "tests/x.py::test_one").create_namespace(cluster)  # type: ignore[arg-type]
    assert name.startswith("test-one-")
    assert cluster.session.urls("GET") == [f"/api/v1/namespaces/{name}/serviceaccounts/default"]
