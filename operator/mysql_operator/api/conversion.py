"""Hub-and-spoke conversion of MySQLCluster objects: every version converts to and from the hub
(`v1.VERSION`, v1) only, so a new version adds one pair of functions, not one per other version.

It works on the raw dicts the apiserver sends, never through the pydantic models: a conversion must
not add defaults, drop unknown fields or reorder anything the client did not ask for, and it must
accept objects that an older schema let in. Round trips are lossless in both directions:

- v1beta1 ⇄ v1 is the identity with `apiVersion` rewritten: v1 kept v1beta1's shape (`v1beta1.py`).
- v1alpha1 → v1 → v1alpha1 is the identity: v1 holds everything v1alpha1 can say. v1alpha1 knows one
  engine, so its objects arrive at the hub with `engine: mysql` stated.
- v1 → v1alpha1 → v1 is the identity: what v1alpha1 has no place for (an `engine` other than mysql,
  `storage` beyond its size, `backup.schedule` beyond its cron, and any spec field it does not have
  at all, such as `restore`) is kept, as JSON, in the
  `FIELDS_ANNOTATION` of the v1alpha1 object, and merged back when it returns. A v1alpha1 client that
  reads, edits and writes back keeps the annotation (it is metadata) and therefore the fields.
- An unset hub `version` (the engine's default, decided by the operator) is shown to v1alpha1 as that
  default, explicitly, and the annotation records `"version": null`. Were it left out, the apiserver
  would default it with v1alpha1's own default (8.0) on the client's next write: a silent downgrade
  for mysql, and for mariadb a version the hub refuses. On the way back, a version still equal to the
  default shown is unset again; any other is the client's edit and is kept.

The hub's `engine` is always there on the wire (the apiserver defaults it), which is why v1 →
v1alpha1 → v1 gives it back stated even where a hand-built object left it out. The one thing not
preserved is a `FIELDS_ANNOTATION` set by hand on a hub object: it means nothing there and is
replaced (or dropped) on the way to v1alpha1.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from typing import Any

from ..database.engines import ENGINES
from . import v1, v1alpha1, v1beta1

log = logging.getLogger(__name__)

Obj = dict[str, Any]

HUB = v1.API_VERSION
FIELDS_ANNOTATION = v1alpha1.FIELDS_ANNOTATION
V1ALPHA1_ENGINE = "mysql"
"""The only engine v1alpha1 can stand for: its objects are this, its annotation keeps any other."""


class ConversionError(ValueError):
    """The object cannot be converted to the requested version; the apiserver shows the message."""


def convert(obj: Obj, desired_api_version: str) -> Obj:
    """`obj` (any served version) at `desired_api_version`, as a new dict: via the hub."""
    if desired_api_version not in SPOKES and desired_api_version != HUB:
        raise ConversionError(f"cannot convert to {desired_api_version}: served are {served()}")
    hub = to_hub(obj)
    return hub if desired_api_version == HUB else SPOKES[desired_api_version][1](hub)


def to_hub(obj: Obj) -> Obj:
    version = obj.get("apiVersion")
    if version == HUB:
        return copy.deepcopy(obj)
    if version not in SPOKES:
        raise ConversionError(f"cannot convert from {version}: served are {served()}")
    return SPOKES[version][0](obj)


def served() -> list[str]:
    return [HUB, *SPOKES]


# -- v1beta1 ⇄ v1: one shape ----------------------------------------------------------------------------


def v1beta1_to_hub(obj: Obj) -> Obj:
    return {**copy.deepcopy(obj), "apiVersion": HUB}


def hub_to_v1beta1(obj: Obj) -> Obj:
    return {**copy.deepcopy(obj), "apiVersion": v1beta1.API_VERSION}


# -- v1alpha1 ⇄ v1 ------------------------------------------------------------------------------------


def v1alpha1_to_hub(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    out["apiVersion"] = HUB
    kept = _pop_kept(out)
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return out
    if "storageSize" in spec:
        spec["storage"] = {"size": spec.pop("storageSize")}
    backup = spec.get("backup")
    if isinstance(backup, dict) and "schedule" in backup:
        backup["schedule"] = {"cron": backup["schedule"]}
    engine = kept.pop("engine", V1ALPHA1_ENGINE)
    if "version" in kept and kept.pop("version") is None and spec.get("version") == _default_version(engine):
        del spec["version"]  # still the default shown: unset again, so the engine's default applies
    spec["engine"] = engine
    _merge(spec, kept)
    return out


def hub_to_v1alpha1(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    out["apiVersion"] = v1alpha1.API_VERSION
    spec = out.get("spec")
    kept: Obj = {}
    if isinstance(spec, dict):
        engine = spec.pop("engine", V1ALPHA1_ENGINE)
        if engine != V1ALPHA1_ENGINE:
            kept["engine"] = engine
        if "version" not in spec and (default := _default_version(engine)) is not None:
            spec["version"] = default
            kept["version"] = None
        if "storage" in spec:
            storage = spec.pop("storage")
            rest = _split(storage, "size", lambda size: spec.__setitem__("storageSize", size))
            if rest is not None:
                kept["storage"] = rest
        backup = spec.get("backup")
        if isinstance(backup, dict) and "schedule" in backup:
            schedule = backup.pop("schedule")
            rest = _split(schedule, "cron", lambda cron: backup.__setitem__("schedule", cron))
            if rest is not None:
                kept["backup"] = {"schedule": rest}
        # Any other hub field v1alpha1 has no place for (e.g. `restore`) rides in the annotation
        # whole: left in the spec, the apiserver would prune it from the v1alpha1 object.
        for key in [k for k in spec if k not in _V1ALPHA1_SPEC_FIELDS]:
            kept[key] = spec.pop(key)
    _set_kept(out, kept)
    return out


_V1ALPHA1_SPEC_FIELDS = frozenset(
    field.alias or name for name, field in v1alpha1.MySQLClusterSpec.model_fields.items()
)


SPOKES: dict[str, tuple[Callable[[Obj], Obj], Callable[[Obj], Obj]]] = {
    v1alpha1.API_VERSION: (v1alpha1_to_hub, hub_to_v1alpha1),
    v1beta1.API_VERSION: (v1beta1_to_hub, hub_to_v1beta1),
}
"""apiVersion → (to hub, from hub)."""


# -- helpers ----------------------------------------------------------------------------------------


def _default_version(engine: Any) -> str | None:
    """The image tag an unset version means for `engine`; None for an engine we do not know (the
    schema lets none in, and failing would make the object unreadable, so it is passed on as is)."""
    known = ENGINES.get(engine) if isinstance(engine, str) else None
    return known.default_version if known else None


def _split(value: Any, key: str, place: Callable[[Any], None]) -> Any:
    """Hand `value[key]` to `place` (the spoke's flat field); return what is left for the annotation,
    or None when nothing is. A missing `key` keeps even an empty rest: the spoke could not tell
    "present but empty" (`storage: {}`) from "absent" otherwise."""
    if not isinstance(value, dict):
        return value  # not what the schema allows; keep it whole rather than guess
    if key in value:
        place(value[key])
    rest = {k: v for k, v in value.items() if k != key}
    return rest if rest or key not in value else None


def _merge(target: Obj, patch: Obj) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _pop_kept(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict) or FIELDS_ANNOTATION not in annotations:
        return {}
    raw = annotations.pop(FIELDS_ANNOTATION)
    if not annotations:
        del meta["annotations"]  # the apiserver never sends an empty map (omitempty): neither do we
    try:
        kept = json.loads(raw)
    except (TypeError, ValueError):
        kept = None
    if not isinstance(kept, dict):
        # Failing here would make the object unreadable at every version but the stored one — the
        # operator included. A hand-broken annotation costs only the fields it carried.
        log.warning("ignoring annotation %s: not a JSON object: %.100r", FIELDS_ANNOTATION, raw)
        return {}
    return kept


def _set_kept(obj: Obj, kept: Obj) -> None:
    meta = obj.setdefault("metadata", {}) if kept else obj.get("metadata")
    if not isinstance(meta, dict):
        return
    annotations = meta.get("annotations")
    if kept:
        if not isinstance(annotations, dict):
            annotations = meta["annotations"] = {}
        # Sorted and compact: the same fields always give the same string, so a round trip through
        # the hub does not look like a metadata change (and bump resourceVersion) on update.
        annotations[FIELDS_ANNOTATION] = json.dumps(kept, sort_keys=True, separators=(",", ":"))
    elif isinstance(annotations, dict) and FIELDS_ANNOTATION in annotations:
        del annotations[FIELDS_ANNOTATION]
        if not annotations:
            del meta["annotations"]
