"""What the operator's grants allowed against what the run exercised: every rule (and every verb of
it) never used by any test, every request denied (403) with the test that made it.

Each process adds its tests' records to a `Usage` (small: one counter per distinct request shape);
an xdist worker hands its `to_json()` to the controller, which `merge`s them and writes the
`report` once for the run.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from envtest.record import rules
from envtest.record.events import Request

MAX_NAMES = 5
"""Distinct object names kept per request shape: one name is a candidate for resourceNames."""
MAX_EXAMPLES = 3
"""Tests named per request shape in the report."""
AUTHORIZATION_ONLY = frozenset({"bind", "escalate", "impersonate", "use", "approve", "sign", "attest"})
"""Verbs the apiserver only ever asks the authorizer about: no request carries them."""


CREATE_CHECKED_ON_UPGRADE = frozenset({"exec", "attach", "portforward"})
"""Pod subresources whose WebSocket `get` the apiserver also authorizes as `create` (Kubernetes 1.35
and later: the AuthorizePodWebsocketUpgradeCreatePermission gate, on by default). The audit log
records only the `get`; a role without `create` is refused all the same."""


def checked_verbs(shape: Shape) -> tuple[str, ...]:
    """The verbs the authorizer asks about for a request of this shape: its own, and `create` too for
    a WebSocket `get` of pods/exec, pods/attach or pods/portforward (`CREATE_CHECKED_ON_UPGRADE`)."""
    pod_stream = shape.group == "" and shape.resource == "pods"
    if pod_stream and shape.subresource in CREATE_CHECKED_ON_UPGRADE and shape.verb == "get":
        return (shape.verb, "create")
    return (shape.verb,)


def implicit(resource: str, verb: str) -> bool:
    """A grant no request uses by itself, checked by the apiserver on the operator's behalf: update
    of `<owner>/finalizers` (OwnerReferencesPermissionEnforcement, when an ownerReference sets
    blockOwnerDeletion), and the authorization-only verbs."""
    return verb in AUTHORIZATION_ONLY or (verb in ("update", "*") and resource.endswith("/finalizers"))


@dataclass(frozen=True)
class Shape:
    """A request with what RBAC decides on, less the namespace's name: whether it named one."""

    verb: str
    group: str
    resource: str
    subresource: str
    namespaced: bool
    path: str = ""
    """Non-resource requests only."""

    @classmethod
    def of(cls, r: Request) -> Shape:
        if not r.resource:
            return cls(r.verb, "", "", "", False, r.uri.split("?", 1)[0])
        return cls(r.verb, r.group, r.resource, r.subresource, bool(r.namespace))

    def attributes(self, name: str) -> rules.Attributes:
        return rules.Attributes(
            self.verb,
            self.group,
            self.resource,
            self.subresource,
            name,
            "ns" if self.namespaced else "",
            self.path,
        )

    def label(self) -> str:
        if not self.resource:
            return f"{self.verb} {self.path}"
        res = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        res = f"{res}.{self.group}" if self.group else res
        return f"{self.verb} {res}" + ("" if self.namespaced else " (cluster-wide)")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"verb": self.verb}
        if self.resource:
            out |= {"group": self.group, "resource": self.resource}
            if self.subresource:
                out["subresource"] = self.subresource
            out["scope"] = "namespace" if self.namespaced else "cluster"
        else:
            out["path"] = self.path
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Shape:
        return cls(
            str(d["verb"]),
            str(d.get("group", "")),
            str(d.get("resource", "")),
            str(d.get("subresource", "")),
            d.get("scope") == "namespace",
            str(d.get("path", "")),
        )


def counted(r: Request) -> bool:
    """One count per request: a watch that opened counts once, at its opening."""
    return not (r.verb == "watch" and r.stage == "ResponseComplete" and r.code < 300)


class Usage:
    def __init__(self) -> None:
        self.counts: Counter[tuple[Shape, str, int]] = Counter()
        """(shape, name the authorizer saw or "", response code) → requests."""
        self.names: dict[Shape, set[str]] = defaultdict(set)  # at most MAX_NAMES + 1 each
        self.examples: dict[Shape, list[str]] = defaultdict(list)
        self.denied: Counter[tuple[str, str, str]] = Counter()
        """(test, request label, namespace/name) → 403 answers."""
        self.tests = 0

    def add(self, test: str, requests: Iterable[Request], operators: Collection[str]) -> None:
        seen = False
        for r in requests:
            if r.user not in operators or not counted(r):
                continue
            seen = True
            shape, name = Shape.of(r), r.authorized_name
            self.counts[(shape, name, r.code)] += 1
            names = self.names[shape]
            if len(names) <= MAX_NAMES:
                names.add(name)
            if test not in self.examples[shape] and len(self.examples[shape]) < MAX_EXAMPLES:
                self.examples[shape].append(test)
            if r.code == 403:
                where = "/".join(p for p in (r.namespace, r.name) if p)
                self.denied[(test, shape.label(), where)] += 1
        self.tests += seen

    def to_json(self) -> dict[str, Any]:
        return {
            "tests": self.tests,
            "counts": [[s.to_json(), n, c, k] for (s, n, c), k in self.counts.items()],
            "names": [[s.to_json(), sorted(v)] for s, v in self.names.items()],
            "examples": [[s.to_json(), v] for s, v in self.examples.items()],
            "denied": [[t, label, where, k] for (t, label, where), k in self.denied.items()],
        }

    def merge(self, data: Mapping[str, Any]) -> None:
        """Add another process's `to_json()` (anything malformed in it is skipped, not raised)."""
        try:
            self.tests += int(data.get("tests", 0))
            for shape, name, code, k in data.get("counts", []):
                self.counts[(Shape.from_json(shape), str(name), int(code))] += int(k)
            for shape, names in data.get("names", []):
                merged = self.names[Shape.from_json(shape)]
                merged.update(list(names)[: MAX_NAMES + 1 - len(merged)])
            for shape, tests in data.get("examples", []):
                kept = self.examples[Shape.from_json(shape)]
                kept += [t for t in tests if t not in kept][: MAX_EXAMPLES - len(kept)]
            for test, label, where, k in data.get("denied", []):
                self.denied[(str(test), str(label), str(where))] += int(k)
        except (TypeError, ValueError, KeyError, AttributeError):
            pass

    @property
    def requests(self) -> int:
        return sum(self.counts.values())


def _grant_applies(kind: str, shape: Shape) -> bool:
    # A Role (and the harness binds the operator's ClusterRole per namespace too) grants only in
    # its namespace; only a ClusterRole's rules can allow a cluster-wide or non-resource request.
    return kind != "Role" or shape.namespaced


def report(usage: Usage, grants: Mapping[str, list[rules.Rule]]) -> dict[str, Any]:
    """The run's least-privilege report: `grants` maps "Kind/name" to the role's rules. A rule's
    grant is each (resource or URL, verb) pair it lists; one no allowed request matched is unused."""
    used: dict[tuple[str, int], Counter[tuple[str, str]]] = defaultdict(Counter)
    exercised: dict[Shape, dict[str, Any]] = {}
    for (shape, name, code), count in sorted(usage.counts.items(), key=lambda i: i[0][0].label()):
        entry = exercised.setdefault(
            shape, {**shape.to_json(), "count": 0, "codes": Counter(), "allowed_by": []}
        )
        entry["count"] += count
        entry["codes"][str(code)] += count
        if code == 403:
            continue
        for role, role_rules in grants.items():
            if not _grant_applies(role.split("/", 1)[0], shape):
                continue
            for i, rule in enumerate(role_rules):
                pairs = [
                    pair
                    for verb in checked_verbs(shape)
                    for pair in rules.grants_used(rule, replace(shape, verb=verb).attributes(name))
                ]
                used[(role, i)].update(dict.fromkeys(pairs, count))
                if pairs and f"{role}#{i}" not in entry["allowed_by"]:
                    entry["allowed_by"].append(f"{role}#{i}")
    granted, unused = [], []
    for role, role_rules in grants.items():
        for i, rule in enumerate(role_rules):
            hits = used.get((role, i), Counter())
            listed = rule.get("resources") or rule.get("nonResourceURLs") or []
            pairs = [
                (res, verb) for res in listed for verb in rule.get("verbs") or [] if not hits[(res, verb)]
            ]
            item = {
                "role": role,
                "rule": i,
                "grants": dict(rule),
                "requests": sum(hits.values()),
                "unused": [f"{verb} {res}" for res, verb in pairs if not implicit(res, verb)],
                "implicit": [f"{verb} {res}" for res, verb in pairs if implicit(res, verb)],
            }
            granted.append(item)
            if item["unused"]:
                unused.append({k: item[k] for k in ("role", "rule", "grants", "unused")})
    for shape, entry in exercised.items():
        entry["codes"] = dict(entry["codes"])
        names = usage.names.get(shape, set())
        entry["names"] = sorted(names) if len(names) <= MAX_NAMES else None
        entry["tests"] = usage.examples.get(shape, [])
    denied = [
        {"test": t, "request": label, "object": where, "count": k}
        for (t, label, where), k in sorted(usage.denied.items())
    ]
    return {
        "tests": usage.tests,
        "requests": usage.requests,
        "grants": granted,
        "unused": unused,
        "denied": denied,
        "exercised": list(exercised.values()),
    }


def summary(data: Mapping[str, Any], path: str, limit: int = 4) -> list[str]:
    """A few terminal lines of a `report`."""
    unused, denied = data["unused"], data["denied"]
    if not data["requests"]:
        # Every grant would read as unused: say what happened instead (an operator deployed by
        # other means than the harness is not recorded, nor is a run whose tests never start one).
        return [f"envtest: record: no operator request recorded; its grants not compared; report: {path}"]
    lines = [
        f"envtest: record: {data['requests']} operator requests in {data['tests']} tests; "
        f"{len(unused)} rule(s) with unused grants; {len(denied)} denied request(s); report: {path}"
    ]
    for item in unused[:limit]:
        grants = item["grants"]
        groups = ",".join(g or "core" for g in grants.get("apiGroups") or []) or "non-resource"
        lines.append(f"  unused: {item['role']} rule {item['rule']} ({groups}): {', '.join(item['unused'])}")
    for item in denied[:limit]:
        lines.append(f"  denied: {item['test']}: {item['request']} {item['object']} x{item['count']}")
    hidden = max(0, len(unused) - limit) + max(0, len(denied) - limit)
    if hidden:
        lines.append(f"  … {hidden} more in the report")
    return lines
