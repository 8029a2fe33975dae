"""The operator's handlers, as production runs them: `kopf run -A -m tenants.handlers`."""

from __future__ import annotations

from typing import Any

import kopf
import kubernetes

TENANTS = ("examples.envtest.io", "v1", "tenants")
TENANT_LABEL = "examples.envtest.io/tenant"


@kopf.on.create(*TENANTS)
def create_fn(name: str, spec: kopf.Spec, logger: kopf.Logger, **_: Any) -> dict[str, Any]:
    core = kubernetes.client.CoreV1Api()
    namespace = f"tenant-{name}"
    core.create_namespace({"metadata": {"name": namespace, "labels": {TENANT_LABEL: name}}})
    welcome = {"metadata": {"name": "welcome"}, "data": {"owner": spec.get("owner", "")}}
    core.create_namespaced_config_map(namespace, welcome)
    # Across the whole cluster: what only a cluster-wide operator may list.
    tenants = core.list_namespace(label_selector=TENANT_LABEL).items
    live = [ns.metadata.name for ns in tenants if ns.metadata.deletion_timestamp is None]
    logger.info("namespace %s made; tenant namespaces now: %s", namespace, live)
    return {"namespace": namespace, "tenantNamespaces": sorted(live)}


@kopf.on.delete(*TENANTS)
def delete_fn(name: str, logger: kopf.Logger, **_: Any) -> None:
    core = kubernetes.client.CoreV1Api()
    try:
        core.delete_namespace(f"tenant-{name}")
    except kubernetes.client.ApiException as exc:
        if exc.status != 404:
            raise
    logger.info("namespace of tenant %s deleted", name)
