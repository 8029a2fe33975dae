"""The operator's kopf handlers, as production runs them (`kopf run -m widgets.handlers`)."""

from __future__ import annotations

from typing import Any

import kopf

WIDGETS = ("examples.envtest.io", "v1", "widgets")


@kopf.on.create(*WIDGETS)
@kopf.on.update(*WIDGETS, field="spec.size")
def reconcile(spec: kopf.Spec, patch: kopf.Patch, logger: kopf.Logger, **_: Any) -> None:
    size = spec.get("size", 1)
    patch.status["phase"] = "Ready"
    patch.status["size"] = size
    logger.info("widget sized %d", size)


@kopf.on.delete(*WIDGETS)
def goodbye(name: str, logger: kopf.Logger, **_: Any) -> None:
    # A delete handler makes kopf put its finalizer on every Widget: deletion waits for this.
    logger.info("widget %s released", name)
