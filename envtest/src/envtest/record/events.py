"""One request as the record keeps it, read from an audit.k8s.io/v1 Event, and how it is shown: a
JSON line per request and a timeline a person reads.

An operator's identity in a test is `system:serviceaccount:<test namespace>:<OPERATOR_ACCOUNT>`, so
the user name alone says which test a request belongs to (`operator_namespace`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any
from urllib.parse import parse_qs, urlsplit

OPERATOR_ACCOUNT = "envtest-operator"
SA_PREFIX = "system:serviceaccount:"
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
UNNAMED = frozenset({"create", "list", "watch", "deletecollection"})
"""Verbs whose URL names no object: the authorizer sees no name (resourceNames cannot apply)."""


def operator_user(namespace: str, account: str = OPERATOR_ACCOUNT) -> str:
    return f"{SA_PREFIX}{namespace}:{account}"


def operator_namespace(user: str, account: str = OPERATOR_ACCOUNT) -> str | None:
    """The test namespace of an operator identity; None for any other user."""
    if not user.startswith(SA_PREFIX):
        return None
    namespace, _, name = user[len(SA_PREFIX) :].partition(":")
    return namespace if name == account and namespace else None


def _time(value: Any) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(value)).timestamp()
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Request:
    """One audited request (a watch has two: `stage` ResponseStarted when it opens, ResponseComplete
    when it ends). Times are Unix seconds; `latency` runs from requestReceived to the stage."""

    user: str
    verb: str
    received: float
    at: float
    """The stage's time: when the response was complete (or, for a watch opening, started)."""
    stage: str
    code: int
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    uri: str = ""
    audit_id: str = ""
    body: Mapping[str, Any] | None = None
    """The request body, at RequestResponse level only (never a Secret's: see envtest.record.policy)."""

    @property
    def latency(self) -> float:
        return max(0.0, self.at - self.received)

    @property
    def is_write(self) -> bool:
        return self.verb in WRITES

    @property
    def is_watch_open(self) -> bool:
        return self.verb == "watch" and self.stage == "ResponseStarted"

    @property
    def resource_path(self) -> str:
        """`resource[/subresource][.group]`, as RBAC and kubectl name it."""
        res = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{res}.{self.group}" if self.group else res

    @property
    def object_key(self) -> tuple[str, str, str, str] | None:
        """(group, resource, namespace, name) of the one object the request touches; None for a
        collection or a non-resource URL. A subresource is the same object (status is its status)."""
        if not self.resource or not self.name or self.verb in ("list", "watch", "deletecollection"):
            return None
        return (self.group, self.resource, self.namespace, self.name)

    @property
    def authorized_name(self) -> str:
        """The name the authorizer saw (what a rule's resourceNames is matched against): none for a
        create, list, watch or deletecollection, unless a field selector names one object."""
        if self.verb not in UNNAMED or (self.verb == "create" and self.subresource):
            return self.name
        selector = parse_qs(urlsplit(self.uri).query).get("fieldSelector", [""])[0]
        for term in selector.split(","):
            key, _, value = term.partition("=")
            if key == "metadata.name" and value and not value.startswith("="):
                return value
        return ""

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if v not in ("", None)}
        out["latency_ms"] = round(self.latency * 1000, 1)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Request | None:
        """A `to_json()` line read back; None when it is not one."""
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in known})
        except TypeError:
            return None


def from_event(event: Mapping[str, Any]) -> Request | None:
    """The Request of one audit Event; None for anything else (a stray line, another kind, a stage
    the record does not use). Every field is read defensively: a malformed event is no reason to
    fail a test, only to be skipped."""
    if not isinstance(event, Mapping) or event.get("kind") != "Event":
        return None
    stage = event.get("stage")
    if stage not in ("ResponseStarted", "ResponseComplete", "Panic"):
        return None
    user = (event.get("user") or {}).get("username") if isinstance(event.get("user"), Mapping) else None
    received, at = _time(event.get("requestReceivedTimestamp")), _time(event.get("stageTimestamp"))
    if not isinstance(user, str) or received is None or at is None:
        return None
    ref = event.get("objectRef") if isinstance(event.get("objectRef"), Mapping) else {}
    status = event.get("responseStatus") if isinstance(event.get("responseStatus"), Mapping) else {}
    code = status.get("code") if isinstance(status.get("code"), int) else (500 if stage == "Panic" else 0)
    body = event.get("requestObject")
    return Request(
        user=user,
        verb=str(event.get("verb") or ""),
        received=received,
        at=at,
        stage=str(stage),
        code=code,
        group=str(ref.get("apiGroup") or ""),
        version=str(ref.get("apiVersion") or ""),
        resource=str(ref.get("resource") or ""),
        subresource=str(ref.get("subresource") or ""),
        namespace=str(ref.get("namespace") or ""),
        name=str(ref.get("name") or ""),
        uri=str(event.get("requestURI") or ""),
        audit_id=str(event.get("auditID") or ""),
        body=body if isinstance(body, Mapping) else None,
    )


def _target(r: Request) -> str:
    if not r.resource:
        return r.uri
    where = "/".join(p for p in (r.namespace, r.name) if p) or "(all namespaces)"
    return f"{r.resource_path} {where}"


def _moment(r: Request) -> float:
    """When the timeline shows a request: as it was made, except a watch's end."""
    return r.at if (r.verb == "watch" and r.stage == "ResponseComplete") else r.received


def timeline(requests: Iterable[Request], operators: Collection[str] = ()) -> str:
    """A readable timeline: one line per request in the order made, seconds from the first; other
    users' writes to the test's objects (why the operator acted) marked with their user."""
    items = sorted(requests, key=_moment)
    if not items:
        return "(no requests recorded)\n"
    start = _moment(items[0])
    first = dt.datetime.fromtimestamp(start, dt.UTC).isoformat(timespec="milliseconds")
    lines = [f"# t=0 is {first}; latency = requestReceived to the stage's timestamp"]
    if operators:
        names = ", ".join(sorted(operators))
        lines.append(f"# operator: {names}; lines marked « » are other users' writes")
    for r in items:
        offset = f"{_moment(r) - start:+9.3f}s"
        if r.verb == "watch":
            what = "watch open " if r.stage == "ResponseStarted" else "watch close"
        else:
            what = f"{r.verb:<11}"
        line = f"{offset}  {what}  {_target(r)}  {r.code}"
        if r.verb == "watch" and r.stage == "ResponseComplete":
            line += f"  (open {r.latency:.1f}s)"
        elif r.verb != "watch":
            line += f"  {r.latency * 1000:.1f}ms"
        if operators and r.user not in operators:
            line = f"{offset}  «{r.user}» {what.strip()} {_target(r)}  {r.code}"
        lines.append(line)
    return "\n".join(lines) + "\n"
