"""The mirror operator on pykube-ng."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pykube

from mirror import MIRROR_OF, SOURCE_LABEL, WATCH_SECONDS, data_patch

log = logging.getLogger(__name__)


def run(stop: threading.Event, *, api_factory: Callable[[], pykube.HTTPClient], namespace: str) -> None:
    """List, then watch from the list's resourceVersion; list again when it expired (pykube-ng hands
    the 410 over as an ERROR event, not an exception)."""
    api = api_factory()  # a client of its own: a long watch holds a connection
    sources = pykube.ConfigMap.objects(api, namespace=namespace).filter(selector={SOURCE_LABEL: "true"})
    while not stop.is_set():
        listing = sources.execute().json()  # one request: the items and the version they are at
        for source in listing["items"]:
            reconcile(api, source)
        version: str | None = listing["metadata"]["resourceVersion"]
        while version is not None and not stop.is_set():
            for event in sources.watch(since=version, params={"timeoutSeconds": WATCH_SECONDS}):
                if event.type == "ERROR":  # expired: list again
                    version = None
                    break
                version = event.object.obj["metadata"]["resourceVersion"]
                if event.type in ("ADDED", "MODIFIED"):
                    reconcile(api, event.object.obj)


def reconcile(api: pykube.HTTPClient, source: dict[str, Any]) -> None:
    meta = source["metadata"]
    name, namespace = f"{meta['name']}-mirror", meta["namespace"]
    current = pykube.ConfigMap.objects(api, namespace=namespace).get_or_none(name=name)
    if current is None:
        owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": meta["name"], "uid": meta["uid"]}
        mirror = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {MIRROR_OF: meta["name"]},
                "ownerReferences": [{**owner, "controller": True}],
            },
            "data": source.get("data") or {},
        }
        pykube.ConfigMap(api, mirror).create()
        log.info("created %s/%s", namespace, name)
        return
    if (current.obj.get("data") or {}) != (source.get("data") or {}):
        current.patch({"data": data_patch(current.obj.get("data"), source.get("data"))})
        log.info("updated %s/%s", namespace, name)
