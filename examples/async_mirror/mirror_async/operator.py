"""The operator's one coroutine, as its own `main` would run it with a stop event."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes.aio import client, watch

SOURCE_LABEL = "mirror.examples.envtest.io/source"


async def run(stop: asyncio.Event, *, namespace: str, async_k8s: client.ApiClient) -> None:
    core = client.CoreV1Api(async_k8s)
    while not stop.is_set():
        # A short server-side timeout: between two watches the stop event is looked at.
        stream = watch.Watch().stream(
            core.list_namespaced_config_map,
            namespace,
            label_selector=f"{SOURCE_LABEL}=true",
            timeout_seconds=2,
        )
        async for event in stream:
            if event["type"] in ("ADDED", "MODIFIED"):
                await mirror(core, namespace, event["object"])


async def mirror(core: client.CoreV1Api, namespace: str, source: Any) -> None:
    name = f"{source.metadata.name}-mirror"
    body = {"metadata": {"name": name}, "data": source.data or {}}
    try:
        await core.create_namespaced_config_map(namespace, body)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
        await core.patch_namespaced_config_map(name, namespace, {"data": source.data or {}})
