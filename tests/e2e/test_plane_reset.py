"""A reset puts a running plane back to its reset point in place, and the plane goes on working:
its controllers, scheduler and kwok never restarted and see the reset as ordinary events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from envtest import ControlPlane, eventually
from envtest.timeouts import Timeouts

pytestmark = pytest.mark.envtest_local
timeouts = Timeouts("local")  # not the fixture: that one starts the session's plane, unused here

WIDGETS = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.reset.example.com"},
    "spec": {
        "group": "reset.example.com",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}
CRDS = "apis/apiextensions.k8s.io/v1/customresourcedefinitions"
WIDGET_PATH = "apis/reset.example.com/v1/namespaces/scratch/widgets"


class _Rest:
    def __init__(self, plane: ControlPlane) -> None:
        self.session, self.server = plane.admin_session(), plane.server

    def get(self, path: str) -> dict[str, Any] | None:
        resp = self.session.get(f"{self.server}/{path}", timeout=timeouts(10))
        if resp.status_code == 404:
            return None
        # A new CRD's resource answers 429 until apiextensions serves it: not yet, as for 404.
        assert resp.status_code != 429, f"{path}: 429 {resp.text[:200]}"
        resp.raise_for_status()
        return resp.json()  # type: ignore[no-any-return]

    def present(self, path: str) -> dict[str, Any]:
        found = self.get(path)
        assert found is not None, f"{path}: not found"
        return found

    def absent(self, path: str) -> None:
        assert self.get(path) is None, f"{path}: still there"

    def names(self, path: str) -> set[str]:
        found = self.get(path)
        assert found is not None, path
        return {i["metadata"]["name"] for i in found["items"]}

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        resp = self.session.post(f"{self.server}/{path}", json=body, timeout=timeouts(10))
        assert resp.status_code == 201, f"POST {path}: {resp.status_code} {resp.text[:300]}"
        return resp.json()  # type: ignore[no-any-return]

    def send(self, method: str, path: str, body: dict[str, Any] | None = None) -> None:
        headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else None
        resp = self.session.request(
            method, f"{self.server}/{path}", json=body, headers=headers, timeout=timeouts(10)
        )
        assert resp.ok, f"{method} {path}: {resp.status_code} {resp.text[:300]}"


def _deployment(replicas: int) -> dict[str, Any]:
    labels = {"app": "reset"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        },
    }


def _running(rest: _Rest, namespace: str, count: int) -> None:
    pods = (rest.get(f"api/v1/namespaces/{namespace}/pods") or {}).get("items", [])
    assert sum(p.get("status", {}).get("phase") == "Running" for p in pods) == count, pods


def _workload(rest: _Rest, replicas: int) -> None:
    """A namespace with a Deployment whose pods run: controller-manager, scheduler and kwok at work."""
    rest.post("api/v1/namespaces", {"metadata": {"name": "scratch"}})
    eventually(
        lambda: rest.present("api/v1/namespaces/scratch/serviceaccounts/default"), timeout=timeouts(30)
    )
    rest.post("apis/apps/v1/namespaces/scratch/deployments", _deployment(replicas))
    eventually(lambda: _running(rest, "scratch", replicas), timeout=timeouts(60))


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    with ControlPlane("all", crds=["api/crd"], progress=lambda _m: None) as cp:
        cp.mark_reset_point()
        yield cp


def test_a_reset_deletes_what_was_made_and_writes_back_what_was_changed(plane: ControlPlane) -> None:
    rest = _Rest(plane)
    namespaces, crds = rest.names("api/v1/namespaces"), rest.names(CRDS)
    default_sa = rest.get("api/v1/namespaces/default/serviceaccounts/default")
    assert default_sa is not None
    labels = rest.get("api/v1/namespaces/default")["metadata"]["labels"]  # type: ignore[index]

    _workload(rest, replicas=3)
    rest.post(CRDS, WIDGETS)
    eventually(lambda: rest.present(WIDGET_PATH), timeout=timeouts(30))
    rest.post(
        WIDGET_PATH, {"apiVersion": "reset.example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    )
    rest.post("apis/rbac.authorization.k8s.io/v1/clusterroles", {"metadata": {"name": "reset-made"}})
    rest.send("PATCH", "api/v1/namespaces/default", {"metadata": {"labels": {"changed": "yes"}}})
    rest.send("DELETE", "api/v1/namespaces/default/serviceaccounts/default")

    report = plane.reset()

    assert report.kinds.get("pods") == 3 and report.kinds.get("deployments") == 1, report.kinds
    assert report.restored >= 2, report  # the namespace's labels and the ServiceAccount
    assert rest.names("api/v1/namespaces") == namespaces
    assert rest.names(CRDS) == crds
    assert rest.names("api/v1/pods") == set()
    assert rest.get("apis/rbac.authorization.k8s.io/v1/clusterroles/reset-made") is None
    assert rest.get("api/v1/namespaces/default")["metadata"]["labels"] == labels  # type: ignore[index]
    restored_sa = rest.get("api/v1/namespaces/default/serviceaccounts/default")
    assert restored_sa is not None and restored_sa["metadata"]["uid"] == default_sa["metadata"]["uid"]
    # The CRD's API went with it (apiextensions saw the CRD's deletion as an event).
    eventually(lambda: rest.absent(WIDGET_PATH), timeout=timeouts(30))
    assert plane.reset().deleted == 0, "a second reset found something left"


def test_the_plane_works_after_a_reset_and_resets_again(plane: ControlPlane) -> None:
    rest = _Rest(plane)
    _workload(rest, replicas=2)  # the same names as before the first reset: nothing of them lingers
    assert plane.reset().kinds.get("pods") == 2
    assert "scratch" not in rest.names("api/v1/namespaces")


def test_a_reset_point_marked_later_keeps_what_was_made_before_it(plane: ControlPlane) -> None:
    rest = _Rest(plane)
    first = plane.reset_point
    try:
        rest.post("api/v1/namespaces", {"metadata": {"name": "kept"}})
        plane.mark_reset_point()
        rest.post("api/v1/namespaces", {"metadata": {"name": "dropped"}})
        plane.reset()
        names = rest.names("api/v1/namespaces")
        assert "kept" in names and "dropped" not in names
    finally:
        plane.reset_point = first
        plane.reset()
    assert "kept" not in rest.names("api/v1/namespaces")
