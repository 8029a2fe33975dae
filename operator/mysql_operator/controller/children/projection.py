"""Desired-vs-live comparison that ignores what the apiserver adds.

A live object carries defaults (protocol: TCP, imagePullPolicy, probe thresholds, ...), status and
bookkeeping, so comparing whole objects would write on every pass. Instead each kind declares the
fields we own and may change (`OWNED_FIELDS`); the desired object is cut down to those (`project`)
and compared with `matches`:

* maps: every desired key must match; extra live keys are defaults and are ignored - except that an
  empty desired map matches only an empty live one, and the `requests`/`limits` maps of a resources
  block must have the same keys (removing `spec.resources.cpu` must reach the pod);
* lists of named items (containers, env, ports, volumes, mounts): each desired item must match the
  live item of its name; live items of other names are someone else's (a sidecar, an injected env
  var) and, like server-side apply, we leave them be. Other lists: same length, item by item;
* quantities in `requests`/`limits` compare by value ("0.5" equals the canonical "500m").

A field we stopped setting is not a difference here (the live object still has it, and nothing in
desired says otherwise): `ssa` notices it by the hash of the applied config instead.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from .quantity import parse_quantity

Obj = dict[str, Any]

OWNED_FIELDS: dict[str, tuple[str, ...]] = {
    # selector, serviceName and volumeClaimTemplates are immutable: applied as created, never compared.
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
        "spec.timeZone",
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
        if not isinstance(live, list):
            return False
        if desired and all(isinstance(d, dict) and "name" in d for d in desired):
            by_name = {item.get("name"): item for item in live if isinstance(item, dict)}
            return all(matches(d, by_name.get(d["name"], _MISSING), key) for d in desired)
        return len(desired) == len(live) and all(
            matches(d, v, key) for d, v in zip(desired, live, strict=True)
        )
    return desired == live and type(desired) is type(live)


def _same_quantity(a: Any, b: Any) -> bool:
    if a == b:
        return True
    try:
        return Decimal(parse_quantity(a)) == Decimal(parse_quantity(b))
    except (ValueError, TypeError, InvalidOperation):
        return False


def drifted(kind: str, desired: Obj, live: Obj) -> bool:
    """Whether `live` lacks something `desired` sets in our mutable fields (see the docstring).

    Kinds without an entry (Secret, PVCs, Jobs) are create-only: never drifted.
    """
    wanted = project(desired, OWNED_FIELDS.get(kind, ()))
    return bool(wanted) and not matches(wanted, live)


def applies(kind: str) -> bool:
    """Whether children of `kind` are kept converged by server-side apply (else create-only)."""
    return bool(OWNED_FIELDS.get(kind))
