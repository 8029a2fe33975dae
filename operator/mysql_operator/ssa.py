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
"""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from .api import FIELD_MANAGER, GROUP

Obj = dict[str, Any]

APPLIED_ANNOTATION = f"{GROUP}/applied-config"
"""Hash of the apply configuration last sent (the annotation itself left out of the hash)."""
LEGACY_MANAGERS = frozenset({"pykube-ng", FIELD_MANAGER})
"""Update-operation managers whose fields are ours: the pre-apply operator and our own creates."""


def config_hash(desired: Obj) -> str:
    body = copy.deepcopy(desired)
    annotations = body["metadata"].get("annotations")
    if annotations is not None:
        annotations.pop(APPLIED_ANNOTATION, None)
        if not annotations:
            del body["metadata"]["annotations"]
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def with_config_hash(desired: Obj) -> Obj:
    """`desired` with the annotation naming its own hash: what we create and apply."""
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


def upgrade_managed_fields(live: Obj, manager: str = FIELD_MANAGER) -> list[Obj] | None:
    """The managedFields with every legacy Update entry of the main resource folded into our
    Apply entry; None when there is nothing to upgrade."""
    entries: list[Obj] = live["metadata"].get("managedFields") or []
    legacy = [
        e
        for e in entries
        if e.get("operation") == "Update" and e.get("manager") in LEGACY_MANAGERS and not e.get("subresource")
    ]
    if not legacy:
        return None
    ours = next(
        (e for e in entries if e.get("operation") == "Apply" and e.get("manager") == manager),
        None,
    )
    fields: Obj = copy.deepcopy((ours or {}).get("fieldsV1") or {})
    for entry in legacy:
        fields = _union(fields, entry.get("fieldsV1") or {})
    upgraded = {
        "manager": manager,
        "operation": "Apply",
        "apiVersion": (ours or {}).get("apiVersion") or live.get("apiVersion"),
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    kept = [e for e in entries if e is not ours and not any(e is x for x in legacy)]
    return [*kept, upgraded]


def upgrade_patch(live: Obj, manager: str = FIELD_MANAGER) -> list[Obj] | None:
    """The JSON patch that performs `upgrade_managed_fields`, or None."""
    fields = upgrade_managed_fields(live, manager)
    if fields is None:
        return None
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": live["metadata"]["resourceVersion"]},
        {"op": "replace", "path": "/metadata/managedFields", "value": fields},
    ]
