"""Fields the apiserver fixes when a child is created: sent on create only, never in an apply.

A StatefulSet's `selector`, `serviceName`, `volumeClaimTemplates` and `podManagementPolicy` (and a
Service's `clusterIP`) cannot change once created: an update that changes one is a 422, forever,
since retrying sends the same change. So an apply after creation leaves them out (`mutable_part`),
and so does the hash that decides whether to apply (`ssa.config_hash`): a change there would
otherwise mean an apply on every pass, each one refused.

Leaving a field out of an apply normally tells the apiserver to remove it, if the applier owned it
(`ssa`). These stay because they are owned by our *Update* entry (what the create POST left, and
where `ssa.upgrade_managed_fields` moves them from an Apply entry written before this rule), not by
our Apply entry.

What the user can change here is `spec.storage` (the volumeClaimTemplates' request and class). The
CRD refuses that change (a CEL rule: storage is immutable), but a cluster re-created under the name
of an orphaned StatefulSet (`propagationPolicy: Orphan`) with other storage gets past it: the
StatefulSet is adopted as it is, and `storage_refused` says why its volumes stay as they were.
"""

from __future__ import annotations

import copy
from typing import Any

from .projection import matches

Obj = dict[str, Any]

FIXED_AT_CREATION: dict[str, tuple[str, ...]] = {
    "StatefulSet": (
        "spec.selector",
        "spec.serviceName",
        "spec.volumeClaimTemplates",
        "spec.podManagementPolicy",
    ),
    "Service": ("spec.clusterIP",),
}
"""Per kind, the dotted paths an apply never carries (the apiserver refuses to change them)."""

STORAGE_IMMUTABLE = "StorageImmutable"


def fixed_paths(kind: str | None) -> tuple[str, ...]:
    return FIXED_AT_CREATION.get(kind or "", ())


def mutable_part(desired: Obj) -> Obj:
    """`desired` without the fields fixed at its creation: what an apply sends."""
    body = copy.deepcopy(desired)
    for path in fixed_paths(desired.get("kind")):
        *parents, leaf = path.split(".")
        node: Any = body
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return body


def _data_claim(sts: Obj) -> Obj:
    templates = (sts.get("spec") or {}).get("volumeClaimTemplates") or [{}]
    return templates[0].get("spec") or {}


def storage_refused(desired: Obj, live: Obj) -> str | None:
    """Why the live StatefulSet's volumes differ from what the spec asks, or None when they agree.

    Only the request and the class are compared: those come from `spec.storage`; the rest of a
    template is ours (a label added by a newer operator is no change the user asked for)."""
    want, have = _data_claim(desired), _data_claim(live)
    size = ((want.get("resources") or {}).get("requests") or {}).get("storage")
    had = ((have.get("resources") or {}).get("requests") or {}).get("storage")
    wanted_class, had_class = want.get("storageClassName"), have.get("storageClassName")
    same_size = matches({"requests": {"storage": size}}, {"requests": {"storage": had}}, "")
    if same_size and (wanted_class is None or wanted_class == had_class):
        return None
    name = live["metadata"]["name"]
    was = f"size {had}" + (f", class {had_class}" if had_class else "")
    return (
        f"spec.storage cannot take effect: StatefulSet {name} was created with volumes of {was}, and "
        "a StatefulSet's volumeClaimTemplates are immutable; set spec.storage back to match (to grow "
        "the volumes, expand their PersistentVolumeClaims where the StorageClass allows it)"
    )
