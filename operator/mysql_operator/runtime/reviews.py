"""AdmissionReview v1 and ConversionReview v1: what a handler returns, and the review built around it.

Kept apart from the server (`webhook.py`) so handlers and their tests need no sockets: a handler maps
the review's ``request`` to a verdict (`allow`, `deny`), or one object to another version.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

Obj = dict[str, Any]

AdmissionHandler = Callable[[Obj], Obj]
"""AdmissionReview ``request`` → response fields (`allow()`/`deny()`); the server adds ``uid``."""
ConversionHandler = Callable[[Obj, str], Obj]
"""(object, desired apiVersion) → the object at that version; an exception fails the whole review."""

ADMISSION = ("admission.k8s.io/v1", "AdmissionReview")
CONVERSION = ("apiextensions.k8s.io/v1", "ConversionReview")


class BadReview(ValueError):
    """The body is not the review this path serves; the message says what was expected."""


def allow(patch: list[Obj] | None = None, warnings: list[str] | None = None) -> Obj:
    """An admitting response; ``patch`` is a JSON Patch (mutating webhooks only)."""
    resp: Obj = {"allowed": True}
    if patch:
        resp["patchType"] = "JSONPatch"
        resp["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    if warnings:
        resp["warnings"] = warnings
    return resp


def deny(message: str, code: int = 403) -> Obj:
    """A denial; the apiserver shows ``message`` to the client verbatim."""
    return {"allowed": False, "status": {"code": code, "message": message}}


def parse(body: bytes, expected: tuple[str, str]) -> Obj:
    """The review in ``body``; BadReview unless it is a JSON object of the ``expected`` (apiVersion,
    kind) with a ``request`` object (the apiserver sends only the versions a configuration lists)."""
    try:
        review = json.loads(body)
    except ValueError as exc:
        raise BadReview(f"body is not JSON: {exc}") from None
    if not isinstance(review, dict):
        raise BadReview(f"body is a JSON {type(review).__name__}, not a {expected[1]}")
    got = (review.get("apiVersion"), review.get("kind"))
    if got != expected:
        raise BadReview(f"expected {expected[1]} {expected[0]}, got kind {got[1]!r} apiVersion {got[0]!r}")
    if not isinstance(review.get("request"), dict):
        raise BadReview(f"{expected[1]} without a request object")
    return review


def admit(review: Obj, handler: AdmissionHandler, path: str) -> Obj:
    request = review["request"]
    try:
        verdict = handler(request)
    except Exception as exc:  # a handler bug: tell the apiserver why, keep the connection
        log.exception("admission handler %s failed", path)
        verdict = deny(f"webhook {path} failed: {type(exc).__name__}: {exc}", code=500)
    response = {**verdict, "uid": request.get("uid", "")}
    return {"apiVersion": ADMISSION[0], "kind": ADMISSION[1], "response": response}


def convert(review: Obj, handler: ConversionHandler) -> Obj:
    request = review["request"]
    desired = request.get("desiredAPIVersion", "")
    response: Obj = {"uid": request.get("uid", "")}
    try:
        converted = [handler(obj, desired) for obj in request.get("objects") or []]
    except Exception as exc:
        log.exception("conversion to %s failed", desired)
        response["result"] = {"status": "Failure", "message": f"converting to {desired}: {exc}"}
    else:
        # The apiserver rejects a response whose objects lack the desired apiVersion: a handler that
        # forgets it fails loudly there rather than subtly here.
        response["convertedObjects"] = converted
        response["result"] = {"status": "Success"}
    return {"apiVersion": CONVERSION[0], "kind": CONVERSION[1], "response": response}
