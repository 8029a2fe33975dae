"""The admission handlers: validation of what the CRD's schema cannot check, and defaulting at create.

Both see v1 objects only (the configurations' `matchPolicy: Equivalent` makes the apiserver convert).
Validation: the cron expression as the CronJob controller parses it, a real IANA time zone, and at
create a StorageClass that exists. Defaulting, at create: the engine's default version and the cluster's
default StorageClass pinned into the spec (`default`).
"""

from __future__ import annotations

import logging
import zoneinfo
from collections.abc import Callable
from typing import Any, Protocol

import pykube

from ..api.schedule import valid_schedule
from ..database.engines import ENGINES
from ..runtime.reviews import allow

log = logging.getLogger(__name__)

DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"

Obj = dict[str, Any]


class StorageClasses(Protocol):
    """The cross-object facts the webhooks need; None means "could not find out"."""

    def exists(self, name: str) -> bool | None: ...

    def default(self) -> str | None: ...


class ApiStorageClasses:
    """StorageClasses read from the apiserver on every call: admission is rare, staleness is not ok."""

    def __init__(self, api_factory: Callable[[], pykube.HTTPClient]) -> None:
        self._client = api_factory()

    def _get(self, path: str) -> Any:
        return self._client.session.get(f"{self._client.url}/apis/storage.k8s.io/v1/{path}", timeout=5)

    def exists(self, name: str) -> bool | None:
        resp = self._get(f"storageclasses/{name}")
        if resp.status_code in (200, 404):
            return resp.status_code == 200
        log.warning("StorageClass %s: %s %s", name, resp.status_code, resp.text[:200])
        return None

    def default(self) -> str | None:
        resp = self._get("storageclasses")
        if resp.status_code != 200:
            return None
        defaults = [
            sc["metadata"]["name"]
            for sc in resp.json().get("items") or []
            if (sc["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"
        ]
        # Several defaults: the apiserver picks the newest at PVC creation; not ours to guess.
        return defaults[0] if len(defaults) == 1 else None


def invalid(field: str, value: Any, why: str) -> Obj:
    """A denial shaped like the apiserver's own 422, so clients show it the same way."""
    message = f"{field}: Invalid value: {value!r}: {why}"
    return {
        "allowed": False,
        "status": {
            "code": 422,
            "reason": "Invalid",
            "message": message,
            "details": {"causes": [{"reason": "FieldValueInvalid", "field": field, "message": why}]},
        },
    }


def validate(request: Obj, classes: StorageClasses | None) -> Obj:
    obj = request.get("object") or {}
    spec = obj.get("spec") or {}
    schedule = (spec.get("backup") or {}).get("schedule") or {}
    cron, zone = schedule.get("cron"), schedule.get("timeZone")
    if isinstance(cron, str) and not valid_schedule(cron):
        return invalid("spec.backup.schedule.cron", cron, "not a cron schedule (five fields, or a macro)")
    if isinstance(zone, str) and not _known_zone(zone):
        return invalid("spec.backup.schedule.timeZone", zone, "not an IANA time zone")
    name = (spec.get("storage") or {}).get("storageClassName")
    # storage is immutable (CEL): checked at CREATE only, so a class deleted later never blocks an
    # edit of anything else.
    if request.get("operation") == "CREATE" and name and classes is not None:
        found = classes.exists(name)
        if found is False:
            return invalid("spec.storage.storageClassName", name, "no such StorageClass")
        if found is None:
            return invalid("spec.storage.storageClassName", name, "cannot look the StorageClass up now")
    return allow()


def default(request: Obj, classes: StorageClasses | None) -> Obj:
    """At create, pin what would otherwise follow a default that may change later:

    * `spec.version`: the engine's default now. Unset, it would be whatever default the operator has
      when the cluster is next created over its kept data (an operator upgrade raising 8.0 to 8.4 would
      then upgrade that data in place); pinned, the data's release is stated. For every served version:
      the apiserver converts v1alpha1 and v1beta1 requests to v1 for this webhook and back.
    * the StorageClass: the backup volume is made later than the data volumes, and a default that
      changed in between would put them on different classes.
    """
    spec = (request.get("object") or {}).get("spec")
    if request.get("operation") != "CREATE" or not isinstance(spec, dict):
        return allow()
    patch = []
    server = ENGINES.get(str(spec.get("engine") or "mysql"))
    if not spec.get("version") and server is not None:
        patch.append({"op": "add", "path": "/spec/version", "value": server.default_version})
    storage = spec.get("storage")
    if isinstance(storage, dict) and not storage.get("storageClassName") and classes is not None:
        name = classes.default()
        if name:
            patch.append({"op": "add", "path": "/spec/storage/storageClassName", "value": name})
    return allow(patch=patch) if patch else allow()


def _known_zone(zone: str) -> bool:
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return True
