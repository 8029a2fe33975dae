"""Desired-vs-live comparison that ignores what the apiserver adds.

A live object carries defaults (protocol: TCP, imagePullPolicy, probe thresholds, ...), status and
bookkeeping, so comparing whole objects would write on every pass. Instead each kind declares the
fields we own and may change (`OWNED_FIELDS`); the desired object is cut down to those (`project`)
and compared with `matches`:

* maps: every desired key must match; extra live keys are defaults and are ignored - except that an
  empty desired map matches only an empty live one, and the `requests`/`limits` maps of a resources
  block must have the same keys (removing `spec.resources.cpu` must reach the pod);
* lists: same length, item by item (our lists are replaced whole by a merge patch);
* quantities in `requests`/`limits` compare by value ("0.5" equals the canonical "500m").

The projection is also the merge patch body, so what we compare is exactly what we write.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes.utils.quantity import parse_quantity

Obj = dict[str, Any]

OWNED_FIELDS: dict[str, tuple[str, ...]] = {
    # selector, serviceName and volumeClaimTemplates are immutable: set at create, never patched.
    "StatefulSet": (
        "metadata.labels",
        "spec.replicas",
        "spec.persistentVolumeClaimRetentionPolicy",
        "spec.template",
    ),
    # clusterIP is immutable too.
    "Service": ("metadata.labels", "spec.selector", "spec.ports", "spec.publishNotReadyAddresses"),
    # Never rewritten: a new password would lock the running database out.
    "Secret": (),
    "CronJob": (
        "metadata.labels",
        "spec.schedule",
        "spec.concurrencyPolicy",
        "spec.successfulJobsHistoryLimit",
        "spec.failedJobsHistoryLimit",
        "spec.jobTemplate",
    ),
}

_QUANTITY_MAPS = frozenset({"requests", "limits"})
_MISSING = object()


def project(obj: Obj, paths: tuple[str, ...]) -> Obj:
    """The part of `obj` at the dotted `paths` (absent paths are left out)."""
    out: Obj = {}
    for path in paths:
        *parents, leaf = path.split(".")
        source: Any = obj
        for part in parents:
            source = source.get(part, _MISSING) if isinstance(source, dict) else _MISSING
        if not isinstance(source, dict) or leaf not in source:
            continue
        target = out
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = source[leaf]
    return out


def matches(desired: Any, live: Any, key: str = "") -> bool:
    """True when `live` already has everything `desired` asks for (see the module docstring)."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return (live is None or live is _MISSING) and not desired
        if not desired:
            return not live
        if key in _QUANTITY_MAPS:
            return desired.keys() == live.keys() and all(
                _same_quantity(v, live[k]) for k, v in desired.items()
            )
        return all(matches(v, live.get(k, _MISSING), k) for k, v in desired.items())
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(desired) == len(live)
            and all(matches(d, v, key) for d, v in zip(desired, live, strict=True))
        )
    return desired == live and type(desired) is type(live)


def _same_quantity(a: Any, b: Any) -> bool:
    if a == b:
        return True
    try:
        return Decimal(parse_quantity(a)) == Decimal(parse_quantity(b))
    except (ValueError, TypeError, InvalidOperation):
        return False


def owned_patch(kind: str, desired: Obj, live: Obj) -> Obj | None:
    """The merge patch that brings `live` to `desired` in our fields, or None when it already is.

    Kinds without an entry (PVCs, Jobs) are create-only.
    """
    wanted = project(desired, OWNED_FIELDS.get(kind, ()))
    return None if not wanted or matches(wanted, live) else wanted
