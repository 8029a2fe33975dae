"""What the fault proxy decides per request: which request it is, which rule matches, what to answer.

Pure data and functions (no sockets) so the matching and the Status bodies are unit-tested alone.
A request is described the way kube-apiserver's RequestInfo describes it (verb, resource,
subresource, namespace, name), so rules read like RBAC rules:

    Rule(conflict(), verb="patch", resource="widgets", subresource="status", times=3)
    Rule(DropReply(), verb="create", resource="statefulsets", times=1)
    Rule(ExpireWatch(), verb="watch", resource="widgets", latency=2.0, times=1)
    Rule(stale_precondition(), verb="patch", resource="widgets", times=3)  # the apiserver says 409
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

__all__ = [
    "FORWARD",
    "Action",
    "CutWatch",
    "DropReply",
    "ExpireWatch",
    "Forward",
    "Precondition",
    "RequestInfo",
    "Respond",
    "Rule",
    "already_exists",
    "conflict",
    "expired_event",
    "internal_error",
    "invalid",
    "no_precondition",
    "not_found",
    "stale_precondition",
    "status_body",
    "too_many_requests",
    "unavailable",
    "with_precondition",
]

VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"})
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
PRECONDITION_VERBS = frozenset({"update", "patch"})
"""Writes whose body may carry a resourceVersion precondition (a create must not, a delete has none)."""
STALE_RESOURCE_VERSION = "1"
"""Older than any object a test writes (etcd's first revision went to the plane's bootstrap); not
"0", which the apiserver reads as "no precondition"."""
# kube-apiserver's namespaceSubresources: /namespaces/<ns>/status is the Namespace's own subresource.
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


# -- requests -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestInfo:
    """A request as RBAC sees it. Non-resource paths (/version, discovery) have resource ""."""

    method: str
    path: str
    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def is_write(self) -> bool:
        return self.verb in WRITE_VERBS

    @property
    def full_resource(self) -> str:
        """ "statefulsets" or "widgets/status", as counters and logs name it."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    @property
    def qualified_resource(self) -> str:
        """ "statefulsets.apps", as the apiserver's error messages name it."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @classmethod
    def parse(cls, method: str, path: str, query: str = "", body: bytes = b"") -> RequestInfo:
        method = method.upper()
        params = parse_qs(query)
        watch = params.get("watch", [""])[0] in ("true", "1")
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, rest = "", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, rest = parts[1], parts[3:]
        else:
            return cls(method, path, verb=method.lower())
        if rest[:1] == ["watch"]:  # the deprecated /watch/ prefix
            rest, watch = rest[1:], True
        namespace = ""
        if rest[:1] == ["namespaces"] and len(rest) > 1:
            namespace = rest[1]
            if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
                rest = rest[2:]
        if not rest:
            return cls(method, path, verb=method.lower(), group=group)
        resource = rest[0]
        name = rest[1] if len(rest) > 1 else ""
        subresource = rest[2] if len(rest) > 2 else ""
        if method == "GET":
            verb = "watch" if watch else ("get" if name else "list")
        elif method == "DELETE":
            verb = "delete" if name else "deletecollection"
        else:
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
        if verb == "create" and not name:
            name = _body_name(body)  # a create names its object in the body, not the path
        return cls(method, path, verb, group, resource, subresource, namespace, name)


def _body_name(body: bytes) -> str:
    try:
        meta = json.loads(body or b"{}").get("metadata") or {}
    except (ValueError, AttributeError):
        return ""
    return str(meta.get("name") or "")


# -- actions ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Forward:
    """Pass the request through (with the rule's latency, if any)."""


@dataclass(frozen=True)
class Respond:
    """Answer with a metav1 Status of `code`/`reason` without forwarding: nothing reaches etcd."""

    code: int
    reason: str
    message: str | None = None
    """None: the apiserver's own wording for `reason`, naming the request's resource and name."""
    retry_after: int | None = None
    """Seconds, sent as Retry-After and details.retryAfterSeconds (429, 503)."""


@dataclass(frozen=True)
class DropReply:
    """Forward, let the apiserver do it, then close the connection: the client never hears back."""


@dataclass(frozen=True)
class CutWatch:
    """Forward a watch, then close the connection mid-stream after some events or some seconds."""

    after_events: int | None = None
    after_seconds: float | None = None


@dataclass(frozen=True)
class ExpireWatch:
    """End a watch the way an expired resourceVersion does: HTTP 200, then an ERROR event with a
    410 Expired Status. With `after_events` > 0 the real stream is forwarded that far first."""

    after_events: int = 0


@dataclass(frozen=True)
class Precondition:
    """Forward an update or patch with the resourceVersion precondition in its body replaced, so the
    apiserver itself decides. A stale one (`stale_precondition()`) gets a real 409 Conflict from the
    apiserver, counted in its metrics and with no watch event (nothing changed), so the client's retry
    is paced by its backoff alone. None (`no_precondition()`) removes it: the write can no longer
    conflict, as if the client had never sent one. A body without a precondition is forwarded as it
    is, so a 409 under `stale_precondition()` proves the client sent one."""

    resource_version: str | None


Action = Forward | Respond | DropReply | CutWatch | ExpireWatch | Precondition
FORWARD = Forward()


def conflict(message: str | None = None) -> Respond:
    return Respond(409, "Conflict", message)


def already_exists(message: str | None = None) -> Respond:
    return Respond(409, "AlreadyExists", message)


def not_found(message: str | None = None) -> Respond:
    """A stale read: the object looks absent though it may exist."""
    return Respond(404, "NotFound", message)


def invalid(message: str | None = None) -> Respond:
    return Respond(422, "Invalid", message)


def too_many_requests(retry_after: int = 1) -> Respond:
    return Respond(429, "TooManyRequests", retry_after=retry_after)


def internal_error(message: str | None = None) -> Respond:
    return Respond(500, "InternalError", message)


def unavailable(retry_after: int | None = None) -> Respond:
    return Respond(503, "ServiceUnavailable", retry_after=retry_after)


def stale_precondition() -> Precondition:
    """The write's resourceVersion made stale: the apiserver answers 409 Conflict itself."""
    return Precondition(STALE_RESOURCE_VERSION)


def no_precondition() -> Precondition:
    """The write's resourceVersion removed: what a client that forgot its preconditions sends."""
    return Precondition(None)


def with_precondition(body: bytes, resource_version: str | None) -> bytes | None:
    """`body` with its resourceVersion precondition set to `resource_version` (None: removed); None
    when it carries none. Preconditions live in `metadata.resourceVersion` (update, merge and apply
    patches) or in a JSON patch's `test` of `/metadata/resourceVersion`. Bodies that are not JSON
    (a YAML apply) are never touched."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if isinstance(doc, dict):
        meta = doc.get("metadata")
        if not isinstance(meta, dict) or meta.get("resourceVersion") in (None, ""):
            return None
        if resource_version is None:
            del meta["resourceVersion"]
        else:
            meta["resourceVersion"] = resource_version
        return json.dumps(doc).encode()
    if isinstance(doc, list):
        tests = [
            op
            for op in doc
            if isinstance(op, dict)
            and op.get("op") == "test"
            and op.get("path") == "/metadata/resourceVersion"
        ]
        if not tests:
            return None
        if resource_version is None:
            doc = [op for op in doc if not any(op is t for t in tests)]
        else:
            for op in tests:
                op["value"] = resource_version
        return json.dumps(doc).encode()
    return None


# -- rules --------------------------------------------------------------------------------------------


def _names(value: str | Iterable[str] | None) -> frozenset[str] | None:
    if value is None:
        return None
    return frozenset({value} if isinstance(value, str) else value)


@dataclass(eq=False)
class Rule:
    """Requests matching every filter given get `action`. Filters left None match anything;
    `subresource=""` matches the main resource only. The first active matching rule wins."""

    action: Action = FORWARD
    verb: str | Iterable[str] | None = None
    resource: str | Iterable[str] | None = None
    """Plural names ("statefulsets"); "widgets/status" sets the subresource too."""
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None
    client: str | None = None
    """The client label of the proxy kubeconfig (see FaultProxy.kubeconfig_for)."""
    times: int | None = None
    """Act on the first `times` matches, then stand aside; None = for as long as the rule is added."""
    probability: float = 1.0
    """Chance that a match is acted on; a match not acted on is forwarded and does not use up `times`."""
    latency: float = 0.0
    """Seconds to hold the request before the action (a Forward with latency is a slow apiserver)."""
    hold: threading.Event | None = field(default=None, repr=False)
    """Hold each request acted on (after `latency`) until this event is set: the test acts while the
    request is in flight - say, writes the object a held write read - then lets it go. Removing the
    rule (or `FaultProxy.clear()`) sets it, so nothing stays held past the test."""
    rng: random.Random = field(default_factory=random.Random, repr=False)
    matched: int = field(default=0, init=False)
    """Requests that passed the filters while the rule was active."""
    fired: int = field(default=0, init=False)
    """Requests the action was applied to."""

    def __post_init__(self) -> None:
        resources = _names(self.resource)
        if resources is not None and len(resources) == 1:
            (only,) = resources
            if "/" in only:
                if self.subresource is not None:
                    raise ValueError(f"Rule: resource {only!r} names a subresource and so does subresource=")
                only, self.subresource = only.split("/", 1)
                resources = frozenset({only})
        self._resources = resources
        self._verbs = _names(self.verb)
        unknown = (self._verbs or frozenset()) - VERBS
        if unknown:
            raise ValueError(f"Rule: unknown verb(s) {sorted(unknown)}; valid: {sorted(VERBS)}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"Rule: probability must be within 0..1, got {self.probability}")
        if self.times is not None and self.times < 0:
            raise ValueError(f"Rule: times must be >= 0, got {self.times}")
        if isinstance(self.action, (CutWatch, ExpireWatch)) and self._verbs not in (None, {"watch"}):
            raise ValueError(f"Rule: {type(self.action).__name__} applies to watches only (verb='watch')")
        if isinstance(self.action, Precondition) and not (self._verbs or set()) <= PRECONDITION_VERBS:
            verbs = sorted(self._verbs or ())
            raise ValueError(f"Rule: Precondition applies to update and patch only, got verb={verbs}")

    @property
    def active(self) -> bool:
        return self.times is None or self.fired < self.times

    def matches(self, info: RequestInfo, client: str = "") -> bool:
        """Whether the filters select `info`; does not count (see `take`)."""
        if isinstance(self.action, (CutWatch, ExpireWatch)) and info.verb != "watch":
            return False
        if isinstance(self.action, Precondition) and info.verb not in PRECONDITION_VERBS:
            return False
        return (
            (self._verbs is None or info.verb in self._verbs)
            and (self._resources is None or info.resource in self._resources)
            and (self.subresource is None or info.subresource == self.subresource)
            and (self.namespace is None or info.namespace == self.namespace)
            and (self.name is None or info.name == self.name)
            and (self.client is None or client == self.client)
        )

    def take(self, info: RequestInfo, client: str = "") -> bool:
        """Match and count: True when this request gets the action. Callers hold the proxy's lock."""
        if not self.active or not self.matches(info, client):
            return False
        self.matched += 1
        if self.probability < 1.0 and self.rng.random() >= self.probability:
            return False
        self.fired += 1
        return True

    def describe(self) -> str:
        filters = {
            "verb": self._verbs and ",".join(sorted(self._verbs)),
            "resource": self._resources and ",".join(sorted(self._resources)),
            "subresource": self.subresource,
            "namespace": self.namespace,
            "name": self.name,
            "client": self.client,
        }
        where = " ".join(f"{k}={v}" for k, v in filters.items() if v is not None) or "any request"
        delay = f" after {self.latency:g}s" if self.latency else ""
        held = " (held)" if self.hold is not None else ""
        return f"{type(self.action).__name__}{delay}{held} on {where}"


# -- Status bodies ------------------------------------------------------------------------------------

_MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


def _default_message(reason: str, info: RequestInfo) -> str:
    # The wording of k8s.io/apimachinery/pkg/api/errors, so clients that parse messages see the real thing.
    what = f'{info.qualified_resource} "{info.name}"'
    return {
        "Conflict": f"Operation cannot be fulfilled on {what}: {_MODIFIED}",
        "AlreadyExists": f"{what} already exists",
        "NotFound": f"{what} not found",
        "Invalid": f"{what} is invalid: metadata.name: Invalid value: {info.name!r}: injected by envtest",
        "TooManyRequests": "Too many requests, please try again later.",
        "InternalError": "Internal error occurred: injected by envtest",
        "ServiceUnavailable": "the server is currently unable to handle the request",
        "Expired": "too old resource version: 1 (2)",
    }.get(reason, f"injected by envtest: {reason}")


def status_body(respond: Respond, info: RequestInfo) -> dict[str, Any]:
    """The metav1 Status the apiserver would send for `respond` on this request."""
    message = respond.message or _default_message(respond.reason, info)
    details: dict[str, Any] = {}
    if info.resource and respond.reason in ("Conflict", "AlreadyExists", "NotFound", "Invalid"):
        details = {"name": info.name, "group": info.group, "kind": info.resource}
    if respond.reason == "Invalid":
        details["causes"] = [{"reason": "FieldValueInvalid", "message": message, "field": "metadata.name"}]
    elif respond.reason == "InternalError":
        details["causes"] = [{"message": message.removeprefix("Internal error occurred: ")}]
    if respond.retry_after is not None:
        details["retryAfterSeconds"] = respond.retry_after
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": respond.reason,
        "code": respond.code,
    }
    if details:
        body["details"] = details
    return body


def expired_event() -> dict[str, Any]:
    """The watch event an expired resourceVersion produces (after an HTTP 200)."""
    info = RequestInfo("GET", "", "watch")
    return {"type": "ERROR", "object": status_body(Respond(410, "Expired"), info)}
