"""Server-side apply of our children, and the upgrade of objects written before we used it.

Why apply: a merge patch can set what we want but cannot remove a field we stopped setting (it has
no memory of what we set), and replacing `containers` whole fights anyone who adds a sidecar. An
apply under our field manager says "these fields are ours, exactly so": the apiserver removes the
ones we owned and no longer send, and merges lists by key (containers by name), leaving others'
items alone. `force`: a field someone changed behind our back is taken back.

When: only when our fields differ (`projection.matches`, list items matched by name so a sidecar is
not a difference) or the config we would apply is not the one we applied last (its hash is kept in
an annotation; a field we dropped shows up only there). A converged cluster sends nothing.

Upgrade: objects created or patched by the operator before it applied carry fields owned by
`Update` managers ("pykube-ng", the User-Agent the old code wrote with, and our own name for
creates). Apply never removes a field another manager still owns, so those would stay forever.
Like client-go's csaupgrade, their field sets are folded into our Apply entry, in one JSON patch of
`managedFields` conditional on the resourceVersion, before the first apply.

What is folded must provably be the old operator's: "pykube-ng" names a client library, not us,
and any tool built on it writes under that name. Folding such a tool's fields would make them ours,
and our next apply (which does not send them) would delete them. So from a "pykube-ng" entry only
the fields our builders set on this very object are taken (`split_fields`: maps by key, keyed list
items by their key fields, set items by value); the rest stays that entry's. Our own name is ours
whole. The price: a field the old operator set that today's builders no longer set stays with
"pykube-ng" (it lingers instead of being removed; nothing of anyone else's is lost), and so do the
defaults the apiserver filled in at its create (attributed to the creator; harmless, as nobody else
removes them either).

Fields fixed at creation (`immutable`) are never sent in an apply, so our Apply entry must not
own them (an apply without them would ask the apiserver to remove them): they are kept in, or
moved to, our Update entry, as a create leaves them.
"""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from ...api.v1 import FIELD_MANAGER, GROUP
from .immutable import fixed_paths, mutable_part

Obj = dict[str, Any]

APPLIED_ANNOTATION = f"{GROUP}/applied-config"
"""Hash of the apply configuration last sent (the annotation itself left out of the hash)."""
LEGACY_CLIENT = "pykube-ng"
"""The field manager the pre-apply operator wrote under (pykube-ng's User-Agent): shared with every
other pykube-ng tool, so only the fields our builders set are taken from its entries."""


def config_hash(desired: Obj) -> str:
    """Hash of what an apply of `desired` sends: fields fixed at creation are not in it (a change
    there cannot be applied, so it must not make us try on every pass)."""
    body = mutable_part(desired)
    annotations = body["metadata"].get("annotations")
    if annotations is not None:
        annotations.pop(APPLIED_ANNOTATION, None)
        if not annotations:
            del body["metadata"]["annotations"]
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def with_config_hash(desired: Obj) -> Obj:
    """`desired` with the annotation naming its hash: what we create (whole) and apply (after
    `mutable_part`; the hash is the same)."""
    body = copy.deepcopy(desired)
    body["metadata"].setdefault("annotations", {})[APPLIED_ANNOTATION] = config_hash(desired)
    return body


def applied_hash(live: Obj) -> str | None:
    return (live["metadata"].get("annotations") or {}).get(APPLIED_ANNOTATION)


def _union(a: Obj, b: Obj) -> Obj:
    """Union of two FieldsV1 sets (nested dicts whose leaves are {})."""
    out = copy.deepcopy(a)
    for key, value in b.items():
        out[key] = _union(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


_MISSING = object()


def _child(node: Any, key: str) -> Any:
    """The part of a desired object that FieldsV1 `key` names, or _MISSING when it sets none."""
    kind, _, rest = key.partition(":")
    if kind == "f" and isinstance(node, dict):
        return node.get(rest, _MISSING)
    if not isinstance(node, list):
        return _MISSING
    try:
        value = json.loads(rest) if kind in ("k", "v") else int(rest)
    except ValueError:
        return _MISSING
    if kind == "v":
        return value if value in node else _MISSING
    if kind == "i":
        return node[value] if 0 <= value < len(node) else _MISSING
    if kind == "k" and isinstance(value, dict):
        # An item carries its key fields, except defaulted ones (a port's protocol): the fields it
        # does carry must all match, and there must be one.
        for item in node:
            if not isinstance(item, dict):
                continue
            given = [k for k in value if k in item]
            if given and all(item[k] == value[k] for k in given):
                return item
    return _MISSING


def split_fields(fields: Obj, desired: Any, *, atomic_leaves: bool = True) -> tuple[Obj, Obj]:
    """Split a FieldsV1 set into (the fields `desired` sets, the rest).

    A FieldsV1 leaf where `desired` has a map or list is an atomic value (a selector, a command)
    owned whole: taken. With `atomic_leaves=False` (`desired` a skeleton of paths, not an object)
    such a leaf is a field above the paths, and is left.
    """
    taken: Obj = {}
    left: Obj = {}
    for key, sub in fields.items():
        if key == ".":  # the node itself: the caller only descends where desired sets the node
            taken[key] = sub
            continue
        child = _child(desired, key)
        above = not atomic_leaves and not sub and isinstance(child, dict)
        if child is _MISSING or above:
            left[key] = sub
        elif not sub or not isinstance(child, (dict, list)):
            taken[key] = sub  # a leaf, or an atomic value we set whole
        else:
            mine, theirs = split_fields(sub, child, atomic_leaves=atomic_leaves)
            if mine:
                taken[key] = mine
            if theirs:
                left[key] = theirs
    return taken, left


def _skeleton(paths: tuple[str, ...]) -> Obj:
    """A stand-in object setting exactly `paths` (dotted), each as an atomic leaf."""
    out: Obj = {}
    for path in paths:
        *parents, leaf = path.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = True
    return out


def _entry(manager: str, operation: str, api_version: Any, fields: Obj) -> Obj:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }


def _meaning(entries: list[Obj]) -> list[str]:
    """Entries compared without their times (which every rewrite moves)."""
    keys = ("manager", "operation", "subresource", "fieldsV1")
    return sorted(json.dumps({k: e.get(k) for k in keys}, sort_keys=True) for e in entries)


def upgrade_managed_fields(live: Obj, desired: Obj, manager: str = FIELD_MANAGER) -> list[Obj] | None:
    """The managedFields with what is provably ours folded into our Apply entry, and the fields fixed
    at creation held by our Update entry instead; None when they are that way already.

    Provably ours: our own Update entry (our creates), and from "pykube-ng" Update entries the
    fields `desired` (what our builders make of this object) sets. Main resource only.
    """
    entries: list[Obj] = live["metadata"].get("managedFields") or []

    def main(e: Obj, who: str, operation: str) -> bool:
        return e.get("manager") == who and e.get("operation") == operation and not e.get("subresource")

    applied = next((e for e in entries if main(e, manager, "Apply")), None)
    created = next((e for e in entries if main(e, manager, "Update")), None)
    fields: Obj = {}
    for ours in (applied, created):
        fields = _union(fields, (ours or {}).get("fieldsV1") or {})
    kept: list[Obj] = []
    for e in entries:
        if e is applied or e is created:
            continue
        if main(e, LEGACY_CLIENT, "Update"):
            mine, theirs = split_fields(e.get("fieldsV1") or {}, desired)
            fields = _union(fields, mine)
            if not theirs:
                continue
            e = {**e, "fieldsV1": theirs}
        kept.append(e)
    paths = fixed_paths(live.get("kind") or desired.get("kind"))
    fixed, free = split_fields(fields, _skeleton(paths), atomic_leaves=False)
    version = (applied or created or {}).get("apiVersion") or live.get("apiVersion")
    if fixed:
        kept.append({**(created or {}), **_entry(manager, "Update", version, fixed)})
    if free or applied is not None:
        kept.append({**(applied or {}), **_entry(manager, "Apply", version, free)})
    if _meaning(kept) == _meaning(entries):
        return None
    return kept


def upgrade_patch(live: Obj, desired: Obj, manager: str = FIELD_MANAGER) -> list[Obj] | None:
    """The JSON patch that performs `upgrade_managed_fields`, or None."""
    fields = upgrade_managed_fields(live, desired, manager)
    if fields is None:
        return None
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": live["metadata"]["resourceVersion"]},
        {"op": "replace", "path": "/metadata/managedFields", "value": fields},
    ]
