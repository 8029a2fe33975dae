"""The kopf operator against a real apiserver: fixtures come from the envtest plugin, configured in
pytest.ini; `operator` runs widgets.handlers in-process, in the test's namespace, as its own
ServiceAccount. Each test checks what one of its handlers did; together they need every handler of
both modules, in every test of the worker, not only the first."""

from __future__ import annotations

from typing import Any

import prometheus_client
from kubernetes import client

from envtest import assert_matches, eventually

API = "apis/examples.envtest.io/v1"
FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"  # kopf's, for the delete handler


def widgets(kube: Any, namespace: str) -> str:
    return f"{kube.url}/{API}/namespaces/{namespace}/widgets"


def create_widget(
    kube: Any, namespace: str, name: str, size: int, labels: dict[str, str] | None = None
) -> None:
    body = {"apiVersion": "examples.envtest.io/v1", "kind": "Widget", "metadata": {"name": name}}
    body["metadata"]["labels"] = labels or {}
    body["spec"] = {"size": size}
    kube.session.post(widgets(kube, namespace), json=body, timeout=10).raise_for_status()


def patch_widget(kube: Any, namespace: str, name: str, patch: dict[str, Any]) -> None:
    kube.session.patch(
        f"{widgets(kube, namespace)}/{name}",
        json=patch,
        headers={"Content-Type": "application/merge-patch+json"},
        timeout=10,
    ).raise_for_status()


def created_total() -> float:
    return prometheus_client.REGISTRY.get_sample_value("widgets_configmaps_created_total") or 0.0


def test_a_new_widget_gets_a_configmap_it_owns(operator: Any, namespace: str, kube: Any, k8s: Any) -> None:
    before = created_total()
    create_widget(kube, namespace, "small", size=2)
    made = eventually(lambda: configmap(k8s, namespace, "small"), timeout=30)
    assert made.data == {"size": "2"}
    (owner,) = made.metadata.owner_references
    assert (owner.kind, owner.name, owner.controller) == ("Widget", "small", True)

    def counted() -> None:  # the handler counts after its create call returned: a moment later
        assert created_total() == before + 1, "the counter registered at import counts in every test"

    eventually(counted, timeout=10)


def configmap(k8s: Any, namespace: str, name: str) -> Any:
    return client.CoreV1Api(k8s).read_namespaced_config_map(name, namespace)


def test_resizing_a_widget_updates_its_configmap(operator: Any, namespace: str, kube: Any, k8s: Any) -> None:
    create_widget(kube, namespace, "grows", size=1)
    eventually(lambda: assert_matches(configmap(k8s, namespace, "grows").data, {"size": "1"}))
    patch_widget(kube, namespace, "grows", {"spec": {"size": 5}})
    eventually(lambda: assert_matches(configmap(k8s, namespace, "grows").data, {"size": "5"}))


def test_labels_follow_from_the_widget_to_its_configmap(
    operator: Any, namespace: str, kube: Any, k8s: Any
) -> None:
    # The handler of the second module, widgets.labels: present in every test, not only the first.
    create_widget(kube, namespace, "tagged", size=1, labels={"team": "a"})
    eventually(lambda: assert_matches(configmap(k8s, namespace, "tagged").metadata.labels, {"team": "a"}))
    patch_widget(kube, namespace, "tagged", {"metadata": {"labels": {"team": "b", "tier": "gold"}}})
    wanted = {"team": "b", "tier": "gold"}
    eventually(lambda: assert_matches(configmap(k8s, namespace, "tagged").metadata.labels, wanted))


def test_deleting_a_widget_waits_for_its_delete_handler(operator: Any, namespace: str, kube: Any) -> None:
    create_widget(kube, namespace, "doomed", size=1)

    def finalized() -> None:
        got = kube.session.get(f"{widgets(kube, namespace)}/doomed", timeout=10)
        got.raise_for_status()  # a 404 is "not yet" for eventually()
        assert_matches(got.json(), {"metadata": {"finalizers": [FINALIZER]}})

    eventually(finalized)
    kube.session.delete(f"{widgets(kube, namespace)}/doomed", timeout=10).raise_for_status()

    def gone() -> None:
        assert kube.session.get(f"{widgets(kube, namespace)}/doomed", timeout=10).status_code == 404

    eventually(gone)  # kopf ran `delete_fn`, then removed its finalizer
