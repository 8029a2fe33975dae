"""The operator's handlers, as production runs them: `kopf run -m widgets.handlers`."""

from __future__ import annotations

from typing import Any

import kopf
import kubernetes
import prometheus_client

from widgets import labels  # noqa: F401  the label handlers register when this module loads

WIDGETS = ("examples.envtest.io", "v1", "widgets")

CONFIGMAPS_CREATED = prometheus_client.Counter(
    "widgets_configmaps_created", "ConfigMaps created for Widgets"
)  # registered once per process, at import, as in production


@kopf.on.create(*WIDGETS)
def create_fn(spec: kopf.Spec, name: str, namespace: str, logger: kopf.Logger, **_: Any) -> dict[str, Any]:
    size = spec.get("size", 1)
    data = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"size": str(size)}}
    kopf.adopt(data)  # owner reference, namespace and the Widget's labels
    api = kubernetes.client.CoreV1Api()  # kopf's login configured the client, as under `kopf run`
    obj = api.create_namespaced_config_map(namespace=namespace, body=data)
    CONFIGMAPS_CREATED.inc()
    logger.info("ConfigMap %s created for size %d", obj.metadata.name, size)
    return {"configmap": obj.metadata.name, "size": size}


@kopf.on.update(*WIDGETS, field="spec.size")
def update_fn(new: int, status: kopf.Status, namespace: str, **_: Any) -> dict[str, Any]:
    name = status["create_fn"]["configmap"]
    api = kubernetes.client.CoreV1Api()
    api.patch_namespaced_config_map(name=name, namespace=namespace, body={"data": {"size": str(new)}})
    return {"size": new}


@kopf.on.delete(*WIDGETS)
def delete_fn(name: str, logger: kopf.Logger, **_: Any) -> None:
    # A delete handler makes kopf put its finalizer on every Widget: deletion waits for this.
    logger.info("widget %s released", name)
