"""The mirror operator on the official `kubernetes` client."""

from __future__ import annotations

import logging
import threading

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from mirror import MIRROR_OF, SOURCE_LABEL, WATCH_SECONDS, data_patch

log = logging.getLogger(__name__)


def run(stop: threading.Event, *, k8s: client.ApiClient, namespace: str) -> None:
    """List, then watch from the list's resourceVersion; list again when it expired (410)."""
    core = client.CoreV1Api(k8s)
    selector = f"{SOURCE_LABEL}=true"
    while not stop.is_set():
        listing = core.list_namespaced_config_map(namespace, label_selector=selector)
        for source in listing.items:
            reconcile(core, source)
        version = listing.metadata.resource_version
        try:
            while not stop.is_set():
                stream = watch.Watch().stream(
                    core.list_namespaced_config_map,
                    namespace,
                    label_selector=selector,
                    resource_version=version,
                    timeout_seconds=WATCH_SECONDS,
                    allow_watch_bookmarks=True,
                )
                for event in stream:
                    version = event["object"].metadata.resource_version
                    if event["type"] in ("ADDED", "MODIFIED"):
                        reconcile(core, event["object"])
        except ApiException as exc:
            if exc.status != 410:
                raise
            log.info("watch expired at %s: listing again", version)


def reconcile(core: client.CoreV1Api, source: client.V1ConfigMap) -> None:
    namespace, name = source.metadata.namespace, f"{source.metadata.name}-mirror"
    try:
        current = core.read_namespaced_config_map(name, namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise
        mirror = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name=name,
                labels={MIRROR_OF: source.metadata.name},
                owner_references=[
                    client.V1OwnerReference(
                        api_version="v1",
                        kind="ConfigMap",
                        name=source.metadata.name,
                        uid=source.metadata.uid,
                        controller=True,
                    )
                ],
            ),
            data=source.data,
        )
        core.create_namespaced_config_map(namespace, mirror)
        log.info("created %s/%s", namespace, name)
        return
    if (current.data or {}) != (source.data or {}):
        core.patch_namespaced_config_map(name, namespace, {"data": data_patch(current.data, source.data)})
        log.info("updated %s/%s", namespace, name)
