"""The kopf operator against a real apiserver: fixtures come from the envtest plugin, configured in
pytest.ini; `operator` runs widgets.handlers in-process, in the test's namespace, as its own
ServiceAccount."""

from __future__ import annotations

from typing import Any

from envtest import assert_matches, eventually

API = "apis/examples.envtest.io/v1"
FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"  # kopf's, for the delete handler


def widgets(kube: Any, namespace: str) -> str:
    return f"{kube.url}/{API}/namespaces/{namespace}/widgets"


def create_widget(kube: Any, namespace: str, name: str, size: int) -> None:
    body = {"apiVersion": "examples.envtest.io/v1", "kind": "Widget", "metadata": {"name": name}}
    body["spec"] = {"size": size}
    kube.session.post(widgets(kube, namespace), json=body, timeout=10).raise_for_status()


def get_widget(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    resp = kube.session.get(f"{widgets(kube, namespace)}/{name}", timeout=10)
    resp.raise_for_status()  # a 404 is "not yet" for eventually()
    return resp.json()  # type: ignore[no-any-return]


def test_a_new_widget_is_reported_ready_with_its_size(operator: Any, namespace: str, kube: Any) -> None:
    create_widget(kube, namespace, "small", size=2)
    eventually(
        lambda: assert_matches(
            get_widget(kube, namespace, "small"),
            {"status": {"phase": "Ready", "size": 2}},
        ),
        timeout=30,
    )


def test_resizing_a_widget_updates_its_status(operator: Any, namespace: str, kube: Any) -> None:
    create_widget(kube, namespace, "grows", size=1)
    eventually(lambda: assert_matches(get_widget(kube, namespace, "grows"), {"status": {"size": 1}}))
    kube.session.patch(
        f"{widgets(kube, namespace)}/grows",
        json={"spec": {"size": 5}},
        headers={"Content-Type": "application/merge-patch+json"},
        timeout=10,
    ).raise_for_status()
    eventually(lambda: assert_matches(get_widget(kube, namespace, "grows"), {"status": {"size": 5}}))


def test_deleting_a_widget_waits_for_its_delete_handler(operator: Any, namespace: str, kube: Any) -> None:
    create_widget(kube, namespace, "doomed", size=1)
    eventually(
        lambda: assert_matches(
            get_widget(kube, namespace, "doomed"), {"metadata": {"finalizers": [FINALIZER]}}
        )
    )
    kube.session.delete(f"{widgets(kube, namespace)}/doomed", timeout=10).raise_for_status()

    def gone() -> None:
        assert kube.session.get(f"{widgets(kube, namespace)}/doomed", timeout=10).status_code == 404

    eventually(gone)  # kopf ran `goodbye`, then removed its finalizer
