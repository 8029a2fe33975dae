"""RBAC's rule matching in Python, as kube-apiserver's RBAC authorizer does it (`RuleAllows` in
k8s.io/kubernetes/pkg/apis/rbac/v1/evaluation_helpers.go): which PolicyRule allows which request.

A rule's strings are matched literally except `*`: a verb, group or resource `*` matches every one;
`*/status` matches the status subresource of any resource, while `pods/*` matches only the literal
`pods/*`; resourceNames, when set, must contain the request's name (a create names nothing, so no
rule with resourceNames allows one); a nonResourceURL matches itself, or every path it is a prefix
of when it ends in `*`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Rule = Mapping[str, Any]


@dataclass(frozen=True)
class Attributes:
    """What the authorizer decides on: a resource request (`resource` set) or a non-resource one
    (`path` set)."""

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)


def _has(values: Any, wanted: str) -> bool:
    return isinstance(values, list | tuple) and ("*" in values or wanted in values)


def _resource_matches(resources: Any, resource: str, subresource: str) -> bool:
    combined = f"{resource}/{subresource}" if subresource else resource
    for item in resources if isinstance(resources, list | tuple) else ():
        if item in ("*", combined):
            return True
        if subresource and item == f"*/{subresource}":
            return True
    return False


def _url_matches(urls: Any, path: str) -> bool:
    for url in urls if isinstance(urls, list | tuple) else ():
        if url in ("*", path) or (url.endswith("*") and path.startswith(url[:-1])):
            return True
    return False


def allows(rule: Rule, request: Attributes) -> bool:
    """Whether `rule` allows `request`."""
    if not _has(rule.get("verbs"), request.verb):
        return False
    if not request.is_resource:
        return _url_matches(rule.get("nonResourceURLs"), request.path)
    if not _has(rule.get("apiGroups"), request.group):
        return False
    if not _resource_matches(rule.get("resources"), request.resource, request.subresource):
        return False
    names = rule.get("resourceNames") or []
    return not names or request.name in names


def grants_used(rule: Rule, request: Attributes) -> list[tuple[str, str]]:
    """The (resource or URL entry, verb entry) pairs of `rule` that allow `request`; empty when the
    rule does not allow it. A least-privilege report marks exactly these as used."""
    if not allows(rule, request):
        return []
    verbs = [v for v in rule.get("verbs") or [] if v in ("*", request.verb)]
    if request.is_resource:
        combined = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
        entries = [
            e
            for e in rule.get("resources") or []
            if e in ("*", combined) or (request.subresource and e == f"*/{request.subresource}")
        ]
    else:
        entries = [u for u in rule.get("nonResourceURLs") or [] if _url_matches([u], request.path)]
    return [(e, v) for e in entries for v in verbs]
