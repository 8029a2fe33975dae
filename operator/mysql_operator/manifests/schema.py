"""pydantic JSON Schema -> Kubernetes structural OpenAPI v3 schema.

The apiserver rejects what pydantic emits by default: `$ref`/`$defs`, `anyOf` for Optional,
`additionalProperties: false`, JSON-Schema-2020 numeric `exclusiveMinimum`. This converts the
subset our models use and refuses anything else loudly (a keyword we do not understand must not be
dropped silently: it may have been a validation). `title`s are dropped; defaults, bounds,
patterns, enums, formats, descriptions and `x-kubernetes-*` extensions are kept.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

Schema = dict[str, Any]

KEPT = frozenset(
    {
        "type",
        "format",
        "description",
        "default",
        "enum",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "required",
        "nullable",
    }
)
DROPPED = frozenset({"title", "$defs"})


class SchemaError(ValueError):
    """The model uses a JSON Schema construct with no structural equivalent here."""


def structural_schema(model: type[BaseModel]) -> Schema:
    """The model's validation schema, by alias, as a structural schema."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    return _convert(schema, schema.get("$defs", {}), "")


def _convert(node: Schema, defs: dict[str, Schema], path: str) -> Schema:
    node = dict(node)
    if "$ref" in node:
        target = node.pop("$ref").rsplit("/", 1)[-1]
        if target not in defs:
            raise SchemaError(f"{path or '<root>'}: unresolvable $ref to {target!r}")
        # Keys beside the $ref (the field's description and default) win over the target's.
        node = {**defs[target], **node}
    if "anyOf" in node:
        options = node.pop("anyOf")
        concrete = [o for o in options if o != {"type": "null"}]
        if len(concrete) != 1 or len(options) != 2:
            raise SchemaError(f"{path}: only Optional[X] unions are supported, got anyOf {options}")
        # Optional means "may be absent", not "may be null": absent is how we leave fields unset.
        if node.get("default", ...) is None:
            del node["default"]
        return _convert({**concrete[0], **node}, defs, path)
    out: Schema = {}
    for key, value in node.items():
        where = f"{path}.{key}" if path else key
        if key in DROPPED:
            continue
        if key == "properties":
            out[key] = {
                name: _convert(sub, defs, f"{path}.{name}" if path else name) for name, sub in value.items()
            }
        elif key == "items":
            out[key] = _convert(value, defs, f"{path}[]")
        elif key == "additionalProperties":
            if value is not False:
                raise SchemaError(f"{where}: free-form maps are not supported")
            # `false` is the apiserver's default behaviour (pruning) and is not allowed beside properties.
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True  # OpenAPI v3.0: a flag on minimum/maximum
        elif key in KEPT or key.startswith("x-kubernetes-"):
            out[key] = value
        else:
            raise SchemaError(f"{where}: JSON Schema keyword {key!r} has no structural equivalent here")
    if "properties" in out:
        out.setdefault("type", "object")
    if "type" not in out:
        raise SchemaError(f"{path or '<root>'}: every node of a structural schema needs a type")
    # Keywords sorted for a stable, reviewable file; properties keep the models' order.
    return dict(sorted(out.items()))


def walk(schema: Schema, path: str = "") -> list[tuple[str, Schema]]:
    """Every (path, node) of a schema, for tests and checks."""
    nodes = [(path, schema)]
    for name, sub in (schema.get("properties") or {}).items():
        nodes += walk(sub, f"{path}.{name}" if path else name)
    if isinstance(schema.get("items"), dict):
        nodes += walk(schema["items"], f"{path}[]")
    return nodes
