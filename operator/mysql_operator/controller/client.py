"""The few API calls the reconciler makes, on plain dicts, each one HTTP request.

Every call is a fresh read or a single write: no caching, no retries. Errors are raised as
`pykube.exceptions.HTTPError` with `.code`, `.reason` (the Status reason: "AlreadyExists",
"Conflict", "Invalid", ...) and `.response`, so the runtime's backoff sees a 409 as a 409.
Tests substitute an in-memory object with the same methods (the `ApiClient` protocol).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

import pykube
from pykube.exceptions import HTTPError

from ..api.v1 import FIELD_MANAGER
from ..runtime.client import raise_for_status
from .kinds import Event, Kind

log = logging.getLogger(__name__)

Obj = dict[str, Any]

NOT_FOUND = 404
CONFLICT = 409
INVALID = 422

_MERGE = "application/merge-patch+json"
_JSON_PATCH = "application/json-patch+json"
_APPLY = "application/apply-patch+yaml"  # JSON is YAML


class ApiClient(Protocol):
    def get(self, kind: Kind, namespace: str | None, name: str, *, fresh: bool = False) -> Obj | None:
        """The object or None. `fresh=True` insists on a GET from the apiserver; otherwise a cache
        that has seen our own writes may answer."""
        ...

    def list(self, kind: Kind, namespace: str, label_selector: str, *, fresh: bool = False) -> list[Obj]:
        """Objects matching `label_selector`; `fresh=True` insists on a LIST from the apiserver."""
        ...

    def events(self, namespace: str, kind: str, name: str) -> list[Obj]:
        """The Events about object `kind`/`name` of `namespace` (a fresh LIST by field selector)."""
        ...

    def create(self, kind: Kind, obj: Obj) -> Obj: ...

    def patch_merge(
        self, kind: Kind, namespace: str | None, name: str, patch: Obj, *, subresource: str | None = None
    ) -> Obj: ...

    def patch_json(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        ops: list[Obj],
        *,
        subresource: str | None = None,
    ) -> Obj: ...

    def delete(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        *,
        propagation_policy: str | None = None,
        uid: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> bool:
        """Delete; False when already gone. `uid`: only that very object (409 when replaced).
        `grace_period_seconds`: overrides the object's own grace (0: remove the pod object now)."""
        ...

    def apply(self, kind: Kind, obj: Obj, *, force: bool = True) -> Obj: ...


FORBIDDEN = 403


def error_code(exc: BaseException) -> int | None:
    return int(exc.code) if isinstance(exc, HTTPError) and exc.code is not None else None


def namespace_terminating(exc: BaseException) -> bool:
    """A create refused by the NamespaceLifecycle admission plugin: the namespace is being deleted.

    It answers 403 with a StatusCause of type NamespaceTerminating (and says so in the message,
    which is all a proxy-mangled reply may keep).
    """
    if error_code(exc) != FORBIDDEN:
        return False
    response = getattr(exc, "response", None)
    try:
        causes = (response.json().get("details") or {}).get("causes") or [] if response is not None else []
    except ValueError:
        causes = []
    if any(c.get("type") == "NamespaceTerminating" for c in causes):
        return True
    return "because it is being terminated" in str(exc)


def delete_exactly(
    client: ApiClient,
    kind: Kind,
    obj: Obj,
    *,
    propagation_policy: str | None = None,
    grace_period_seconds: int | None = None,
) -> bool:
    """Delete the very object `obj` we looked at, never a namesake created since (uid precondition).

    True when deleted; False when it was gone already or has been replaced: a failed precondition
    (409) means the name now holds someone else's object, which this caller has not looked at -
    the next pass reads it and decides afresh, so the 409 is an answer, not an error to retry.
    """
    meta = obj["metadata"]
    try:
        return client.delete(
            kind,
            meta.get("namespace"),
            meta["name"],
            propagation_policy=propagation_policy,
            uid=meta["uid"],
            grace_period_seconds=grace_period_seconds,
        )
    except HTTPError as exc:
        if error_code(exc) != CONFLICT:
            raise
        log.info(
            "not deleted: replaced since read",
            extra={"kind": kind.kind, "object": meta["name"], "namespace": meta.get("namespace")},
        )
        return False


class KubeClient:
    """`ApiClient` over a pykube `HTTPClient` (which may be the manager's instrumented one)."""

    def __init__(self, api: pykube.HTTPClient) -> None:
        self.api = api

    def get(self, kind: Kind, namespace: str | None, name: str, *, fresh: bool = False) -> Obj | None:
        """The live object, or None when it does not exist (always a GET: this client has no cache)."""
        response = self.api.get(**self._where(kind, namespace, name))
        if response.status_code == NOT_FOUND:
            return None
        raise_for_status(response)
        return response.json()

    def list(self, kind: Kind, namespace: str, label_selector: str, *, fresh: bool = False) -> list[Obj]:
        response = self.api.get(
            **self._where(kind, namespace, None), params={"labelSelector": label_selector}
        )
        raise_for_status(response)
        return list(response.json().get("items") or [])

    def events(self, namespace: str, kind: str, name: str) -> list[Obj]:
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        response = self.api.get(**self._where(Event, namespace, None), params={"fieldSelector": selector})
        raise_for_status(response)
        return list(response.json().get("items") or [])

    def create(self, kind: Kind, obj: Obj) -> Obj:
        namespace = obj["metadata"].get("namespace")
        response = self.api.post(
            **self._where(kind, namespace, None), data=json.dumps(obj), params={"fieldManager": FIELD_MANAGER}
        )
        raise_for_status(response)
        return response.json()

    def apply(self, kind: Kind, obj: Obj, *, force: bool = True) -> Obj:
        """Server-side apply under our field manager (see children/ssa.py). Put metadata.uid in `obj` to make
        it apply to that very object only (a replaced or deleted one fails, never gets created)."""
        meta = obj["metadata"]
        params = {"fieldManager": FIELD_MANAGER, "force": "true" if force else "false"}
        response = self.api.patch(
            **self._where(kind, meta.get("namespace"), meta["name"]),
            data=json.dumps(obj),
            headers={"Content-Type": _APPLY},
            params=params,
        )
        raise_for_status(response)
        return response.json()

    def patch_merge(
        self, kind: Kind, namespace: str | None, name: str, patch: Obj, *, subresource: str | None = None
    ) -> Obj:
        """RFC 7386 merge patch; lists are replaced whole, `None` deletes a key.

        Put `metadata.resourceVersion` in the patch to make it conditional (409 when stale).
        """
        return self._patch(kind, namespace, name, patch, _MERGE, subresource)

    def patch_json(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        ops: list[Obj],
        *,
        subresource: str | None = None,
    ) -> Obj:
        """RFC 6902 JSON patch, for edits a merge patch cannot express (a `test` op, one list item)."""
        return self._patch(kind, namespace, name, ops, _JSON_PATCH, subresource)

    def delete(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        *,
        propagation_policy: str | None = None,
        uid: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> bool:
        """Delete; False when it was already gone. With `uid`, DeleteOptions carry it as a
        precondition: an object of the same name created since we looked answers 409, not deleted.
        `grace_period_seconds` goes into DeleteOptions as it is (0 on a pod: `kubectl delete --force`)."""
        body: Obj = {"propagationPolicy": propagation_policy} if propagation_policy else {}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        response = self.api.delete(
            **self._where(kind, namespace, name),
            data=json.dumps(body),
            headers={"Content-Type": "application/json"},
        )
        if response.status_code == NOT_FOUND:
            return False
        raise_for_status(response)
        return True

    def _patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        body: Any,
        content_type: str,
        subresource: str | None,
    ) -> Obj:
        response = self.api.patch(
            **self._where(kind, namespace, name, subresource),
            data=json.dumps(body),
            headers={"Content-Type": content_type},
        )
        raise_for_status(response)
        return response.json()

    @staticmethod
    def _where(kind: Kind, namespace: str | None, name: str | None, subresource: str | None = None) -> Obj:
        url = "/".join(part for part in (kind.endpoint, name, subresource) if part)
        kwargs: Obj = {"version": kind.version, "url": url}
        if namespace:
            kwargs["namespace"] = namespace
        return kwargs
