"""Audit events and recorded requests for the record's unit tests, built as kube-apiserver writes
them (audit.k8s.io/v1 Events, JSON lines)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from envtest.record.events import Request, operator_user

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp()
NS = "test-a-1a2b3c"
OPERATOR = operator_user(NS)


def stamp(seconds: float) -> str:
    return dt.datetime.fromtimestamp(T0 + seconds, dt.UTC).isoformat().replace("+00:00", "Z")


def event(
    verb: str = "get",
    *,
    user: str = OPERATOR,
    resource: str = "widgets",
    group: str = "example.com",
    namespace: str = NS,
    name: str = "w",
    subresource: str = "",
    code: int = 200,
    at: float = 0.0,
    took: float = 0.002,
    stage: str = "ResponseComplete",
    uri: str = "",
    **extra: Any,
) -> dict[str, Any]:
    ref = {"resource": resource, "apiGroup": group, "apiVersion": "v1", "namespace": namespace, "name": name}
    if subresource:
        ref["subresource"] = subresource
    return {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": f"id-{verb}-{at}",
        "stage": stage,
        "requestURI": uri or f"/apis/{group}/v1/namespaces/{namespace}/{resource}/{name}",
        "verb": verb,
        "user": {"username": user, "groups": ["system:authenticated"]},
        "objectRef": {k: v for k, v in ref.items() if v},
        "responseStatus": {"metadata": {}, "code": code},
        "requestReceivedTimestamp": stamp(at),
        "stageTimestamp": stamp(at + took),
        **extra,
    }


def line(**kwargs: Any) -> str:
    return json.dumps(event(**kwargs)) + "\n"


def request(verb: str = "get", **kwargs: Any) -> Request:
    from envtest.record.events import from_event

    parsed = from_event(event(verb, **kwargs))
    assert parsed is not None
    return parsed
