"""Async tests of the asyncio operator: `async_k8s` is the admin's `kubernetes.aio` client on the
test's own event loop; `eventually_async` waits without blocking it."""

from __future__ import annotations

from typing import Any

from kubernetes.aio import client
from mirror_async.operator import SOURCE_LABEL

from envtest import eventually_async


def source(name: str, data: dict[str, str], *, labelled: bool = True) -> dict[str, Any]:
    labels = {SOURCE_LABEL: "true"} if labelled else {}
    return {"metadata": {"name": name, "labels": labels}, "data": data}


async def test_a_source_configmap_gets_a_mirror(operator: Any, namespace: str, async_k8s: Any) -> None:
    core = client.CoreV1Api(async_k8s)
    await core.create_namespaced_config_map(namespace, source("web", {"greeting": "hello"}))
    mirrored = await eventually_async(lambda: core.read_namespaced_config_map("web-mirror", namespace))
    assert mirrored.data == {"greeting": "hello"}


async def test_a_change_to_the_source_reaches_its_mirror(
    operator: Any, namespace: str, async_k8s: Any
) -> None:
    core = client.CoreV1Api(async_k8s)
    await core.create_namespaced_config_map(namespace, source("app", {"level": "1"}))
    await eventually_async(lambda: core.read_namespaced_config_map("app-mirror", namespace))
    await core.patch_namespaced_config_map("app", namespace, {"data": {"level": "2"}})

    async def updated() -> None:
        assert (await core.read_namespaced_config_map("app-mirror", namespace)).data == {"level": "2"}

    await eventually_async(updated)


async def test_configmaps_without_the_label_are_left_alone(
    operator: Any, namespace: str, async_k8s: Any
) -> None:
    core = client.CoreV1Api(async_k8s)
    await core.create_namespaced_config_map(namespace, source("plain", {"a": "b"}, labelled=False))
    await core.create_namespaced_config_map(namespace, source("marker", {"c": "d"}))
    # The operator has handled the later, labelled one: by then it had seen the plain one, if at all.
    await eventually_async(lambda: core.read_namespaced_config_map("marker-mirror", namespace))
    names = {cm.metadata.name for cm in (await core.list_namespaced_config_map(namespace)).items}
    assert "plain-mirror" not in names
