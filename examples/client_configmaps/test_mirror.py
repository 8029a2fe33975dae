"""The mirror operator on the official client against a real apiserver: `operator` runs
mirror.k8s_client.run in-process, in the test's namespace, as its own ServiceAccount; `k8s` is the
admin's client."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from mirror import SOURCE_LABEL

from envtest import assert_matches, eventually


def make_source(
    core: client.CoreV1Api, namespace: str, name: str, data: dict[str, str]
) -> client.V1ConfigMap:
    meta = client.V1ObjectMeta(name=name, labels={SOURCE_LABEL: "true"})
    return core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=meta, data=data))


def test_a_labelled_configmap_gets_a_mirror_it_owns(operator: Any, namespace: str, k8s: Any) -> None:
    core = client.CoreV1Api(k8s)
    source = make_source(core, namespace, "settings", {"level": "debug"})
    expected = {
        "data": {"level": "debug"},
        "metadata": {
            "ownerReferences": [{"kind": "ConfigMap", "uid": source.metadata.uid, "controller": True}]
        },
    }
    # A 404 means "not yet" to eventually(): it waits for the mirror to appear.
    eventually(
        lambda: assert_matches(core.read_namespaced_config_map("settings-mirror", namespace), expected)
    )


def test_the_mirror_follows_edits_of_its_source(operator: Any, namespace: str, k8s: Any) -> None:
    core = client.CoreV1Api(k8s)
    make_source(core, namespace, "flags", {"a": "1", "b": "2"})
    eventually(lambda: core.read_namespaced_config_map("flags-mirror", namespace))
    core.replace_namespaced_config_map(
        "flags",
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="flags", labels={SOURCE_LABEL: "true"}),
            data={"b": "3", "c": "4"},
        ),
    )
    eventually(
        lambda: assert_matches(
            core.read_namespaced_config_map("flags-mirror", namespace).data, {"b": "3", "c": "4"}
        )
    )
    assert "a" not in core.read_namespaced_config_map("flags-mirror", namespace).data


def test_unlabelled_configmaps_are_left_alone(operator: Any, namespace: str, k8s: Any) -> None:
    core = client.CoreV1Api(k8s)
    meta = client.V1ObjectMeta(name="plain")
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=meta, data={"x": "y"}))
    make_source(core, namespace, "marker", {})
    eventually(lambda: core.read_namespaced_config_map("marker-mirror", namespace))
    # Events come in order: had the operator taken `plain` (created first), its mirror would exist now.
    names = {cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items}
    assert "plain-mirror" not in names
