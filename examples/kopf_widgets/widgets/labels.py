"""Label propagation, in a module of its own (imported by `widgets.handlers`): the Widget's labels
follow onto its ConfigMap. It talks through pykube-ng configured from the environment, as kopf's
pykube examples do."""

from __future__ import annotations

from typing import Any

import kopf
import pykube


@kopf.on.field("examples.envtest.io", "v1", "widgets", field="metadata.labels")
def relabel(diff: kopf.Diff, name: str, namespace: str, **_: Any) -> None:
    patch: dict[str, Any] = {}
    for _op, field, _old, new in diff:
        if field:  # one label changed
            patch[field[0]] = new
        else:  # the labels appeared (or went) as a whole
            patch.update(new or {})
    api = pykube.HTTPClient(pykube.KubeConfig.from_env())
    try:
        configmap = pykube.ConfigMap.objects(api, namespace=namespace).get_by_name(name)
    except pykube.exceptions.ObjectDoesNotExist:  # this module's handlers run before create_fn
        raise kopf.TemporaryError("its ConfigMap is not created yet", delay=1) from None
    configmap.patch({"metadata": {"labels": patch}})
