"""HTTP plumbing around pykube: error classification, Retry-After, request counting.

pykube-ng's `HTTPClient.raise_for_status` raises `pykube.exceptions.HTTPError(code, message)` and drops
the response, so a 429's Retry-After is lost; it also raises KeyError when a reply has no
content-type (as a proxy's plain-text 503 may). `instrument` replaces it on the client instance with
`raise_for_status` below, whose HTTPError additionally carries `.response`, `.reason` (the Status
reason, e.g. "Conflict", "AlreadyExists") and `.retry_after` (seconds or None).
"""

from __future__ import annotations

import email.utils
import os
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pykube
import requests
from pykube.exceptions import HTTPError

from .fence import Fence

CONFLICT = 409
"""Conflict (stale resourceVersion) and AlreadyExists both arrive as 409."""
GONE = 410
TOO_MANY_REQUESTS = 429

_WRITE_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def status_code(exc: BaseException) -> int | None:
    """The HTTP status an exception stands for: pykube's HTTPError or requests' HTTPError."""
    if isinstance(exc, HTTPError):
        return int(exc.code) if exc.code is not None else None
    response = getattr(exc, "response", None)
    if isinstance(exc, requests.HTTPError) and response is not None:
        return int(response.status_code)
    return None


def is_conflict(exc: BaseException) -> bool:
    return status_code(exc) == CONFLICT


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (Retry-After), if the exception still knows them."""
    value = getattr(exc, "retry_after", None)
    if value is not None:
        return float(value)
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    return parse_retry_after(headers.get("Retry-After") if headers is not None else None)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:  # the HTTP-date form
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(when - (time.time() if now is None else now), 0.0)


def raise_for_status(response: requests.Response) -> None:
    """Raise pykube's HTTPError for a non-2xx reply, keeping the response, reason and Retry-After."""
    if response.status_code < 400:
        return
    message, reason = response.reason or "", None
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if isinstance(payload, dict) and payload.get("kind") == "Status":
        message = payload.get("message") or message
        reason = payload.get("reason")
    exc = HTTPError(response.status_code, message)
    exc.response = response  # type: ignore[attr-defined]
    exc.reason = reason  # type: ignore[attr-defined]
    exc.retry_after = parse_retry_after(response.headers.get("Retry-After"))  # type: ignore[attr-defined]
    raise exc


def request_labels(method: str, url: str, base_path: str = "") -> tuple[str, str]:
    """(verb, resource) of a request, as Kubernetes audit logs name them.

    resource includes the subresource ("mysqlclusters/status"); non-resource paths (/version,
    discovery) give resource "". `base_path` is the path of the kubeconfig's server URL (e.g. behind
    a proxy or a Rancher-style gateway), which precedes /api and /apis.
    """
    parts = urlsplit(url)
    path = parts.path
    base_path = base_path.rstrip("/")
    if base_path and path.startswith(base_path + "/"):
        path = path[len(base_path) :]
    segments = [s for s in path.split("/") if s]
    query = parse_qs(parts.query)
    watch = query.get("watch", [""])[0] in ("true", "1")
    if segments[:1] == ["api"]:
        rest = segments[2:]
    elif segments[:1] == ["apis"]:
        rest = segments[3:]
    else:
        rest = []
    if rest[:1] == ["watch"]:  # the legacy /watch/ path prefix
        rest, watch = rest[1:], True
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return method.lower(), ""
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    named = len(rest) > 1
    method = method.upper()
    if method == "GET":
        verb = "watch" if watch else ("get" if named else "list")
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = _WRITE_VERBS.get(method, method.lower())
    return verb, resource


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_CA_BUNDLE_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


def pin_environment(client: pykube.HTTPClient) -> pykube.HTTPClient:
    """Read the proxy and CA-bundle variables once, for the client's server, as client-go does.

    requests reads them again on every request of a session that trusts the environment (the
    proxies, NO_PROXY against the URL, the CA bundle): 5 % of the operator's samples holding the GIL
    at 300 clusters (benchmarks/results/profile_reference_300.txt). Every request of a pykube client
    goes to one server, so the answer is the same each time; a variable changed later is not seen,
    as in client-go, which reads them once per process. ~/.netrc is no longer read either (client-go
    has none; a matching entry would have replaced pykube's bearer token).
    """
    session = client.session
    if not session.trust_env:
        return client
    session.proxies.update(requests.utils.get_environ_proxies(str(client.url)))
    if session.verify is True:
        # What requests would put in a request's `verify` (pykube's adapter still overrides it
        # with the kubeconfig's CA or insecure-skip-tls-verify).
        bundle = next((os.environ[v] for v in _CA_BUNDLE_VARIABLES if os.environ.get(v)), None)
        session.verify = bundle or True
    session.trust_env = False
    return client


def instrument(
    client: pykube.HTTPClient,
    count: Callable[[str, str, str, str, str], Any],
    *,
    fence: Fence | None = None,
) -> pykube.HTTPClient:
    """Count every request of `client` with `count(method, host, verb, resource, code)` and keep
    error details.

    With a `fence`, every write is checked just before it is sent (see fence.py).
    """

    base_path = urlsplit(str(client.url)).path
    if fence is not None:
        send = client.session.request

        def fenced_request(method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:
            if method.upper() not in _SAFE_METHODS:
                fence.check()
            return send(method, url, *args, **kwargs)

        # pykube's get/post/patch/... all go through Session.request.
        client.session.request = fenced_request  # type: ignore[method-assign]

    def hook(response: requests.Response, *args: Any, **kwargs: Any) -> None:
        request = response.request
        method, url = (request.method or "GET").upper(), request.url or ""
        verb, resource = request_labels(method, url, base_path)
        count(method, urlsplit(url).netloc, verb, resource, str(response.status_code))

    client.session.hooks["response"].append(hook)
    client.raise_for_status = raise_for_status  # type: ignore[method-assign]
    return client
