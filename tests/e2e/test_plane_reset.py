"""A reset puts a running plane back to its reset point in place, and the plane goes on working:
its controllers, scheduler and kwok never restarted and see the reset as ordinary events."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
import requests

from envtest import ControlPlane, eventually
from envtest.clusters import LocalCluster
from envtest.timeouts import Timeouts

if TYPE_CHECKING:  # the suite's conftest is not importable as a module in every collection
    from conftest import Api

pytestmark = pytest.mark.envtest_local
timeouts = Timeouts("local")  # not the fixture: that one starts the session's plane, unused here
# A new CRD's resource answers 429 until apiextensions serves it: "not yet", as a 404 is.
NOT_YET = (requests.HTTPError,)

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


def _names(api: Api, path: str) -> set[str]:
    return {i["metadata"]["name"] for i in api.items(path)}


def _present(api: Api, path: str) -> None:
    assert api.get(path) is not None, f"{path}: not yet"


def _absent(api: Api, path: str) -> None:
    assert api.get(path) is None, f"{path}: still there"


def _running(api: Api, namespace: str, count: int) -> None:
    pods = api.items(f"api/v1/namespaces/{namespace}/pods")
    assert sum(p.get("status", {}).get("phase") == "Running" for p in pods) == count, pods


def _workload(api: Api, replicas: int) -> None:
    """A namespace with a Deployment whose pods run: controller-manager, scheduler and kwok at work."""
    api.create("api/v1/namespaces", {"metadata": {"name": "scratch"}})
    eventually(
        lambda: _present(api, "api/v1/namespaces/scratch/serviceaccounts/default"), timeout=timeouts(30)
    )
    api.create("apis/apps/v1/namespaces/scratch/deployments", _deployment(replicas))
    eventually(lambda: _running(api, "scratch", replicas), timeout=timeouts(60))


@pytest.fixture(scope="module")
def own() -> Iterator[LocalCluster]:
    """A plane of this module's own (a reset wipes what others' tests make), its reset point marked."""
    with ControlPlane("all", crds=["api/crd"], progress=lambda _m: None) as cp:
        cluster = LocalCluster.from_plane(cp)
        cluster.mark_reset_point()
        try:
            yield cluster
        finally:
            cluster.close()


def test_a_reset_deletes_what_was_made_and_writes_back_what_was_changed(
    own: LocalCluster, make_api: Callable[[Any], Api]
) -> None:
    api = make_api(own)
    namespaces, crds = _names(api, "api/v1/namespaces"), _names(api, CRDS)
    default_sa = api.get("api/v1/namespaces/default/serviceaccounts/default")
    assert default_sa is not None
    labels = api.get("api/v1/namespaces/default")["metadata"]["labels"]  # type: ignore[index]

    _workload(api, replicas=3)
    api.create(CRDS, WIDGETS)
    eventually(lambda: api.items(WIDGET_PATH), timeout=timeouts(30), retry_on=NOT_YET)
    api.create(
        WIDGET_PATH, {"apiVersion": "reset.example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    )
    api.create("apis/rbac.authorization.k8s.io/v1/clusterroles", {"metadata": {"name": "reset-made"}})
    api.patch("api/v1/namespaces/default", {"metadata": {"labels": {"changed": "yes"}}})
    assert api.delete("api/v1/namespaces/default/serviceaccounts/default") == 200

    report = own.reset()

    assert report.kinds.get("pods") == 3 and report.kinds.get("deployments") == 1, report.kinds
    assert report.restored >= 2, report  # the namespace's labels and the ServiceAccount
    assert _names(api, "api/v1/namespaces") == namespaces
    assert _names(api, CRDS) == crds
    assert _names(api, "api/v1/pods") == set()
    assert api.get("apis/rbac.authorization.k8s.io/v1/clusterroles/reset-made") is None
    assert api.get("api/v1/namespaces/default")["metadata"]["labels"] == labels  # type: ignore[index]
    restored_sa = api.get("api/v1/namespaces/default/serviceaccounts/default")
    assert restored_sa is not None and restored_sa["metadata"]["uid"] == default_sa["metadata"]["uid"]
    # The CRD's API went with it (apiextensions saw the CRD's deletion as an event).
    eventually(lambda: _absent(api, WIDGET_PATH), timeout=timeouts(30), retry_on=NOT_YET)
    assert own.reset().deleted == 0, "a second reset found something left"


def test_the_plane_works_after_a_reset_and_resets_again(
    own: LocalCluster, make_api: Callable[[Any], Api]
) -> None:
    api = make_api(own)
    _workload(api, replicas=2)  # the same names as before the first reset: nothing of them lingers
    assert own.reset().kinds.get("pods") == 2
    assert "scratch" not in _names(api, "api/v1/namespaces")


def test_a_reset_point_marked_later_keeps_what_was_made_before_it(
    own: LocalCluster, make_api: Callable[[Any], Api]
) -> None:
    api, plane = make_api(own), own.plane
    assert plane is not None
    first = plane.reset_point
    try:
        api.create("api/v1/namespaces", {"metadata": {"name": "kept"}})
        own.mark_reset_point()
        api.create("api/v1/namespaces", {"metadata": {"name": "dropped"}})
        own.reset()
        names = _names(api, "api/v1/namespaces")
        assert "kept" in names and "dropped" not in names
    finally:
        plane.reset_point = first
        own.reset()
    assert "kept" not in _names(api, "api/v1/namespaces")
