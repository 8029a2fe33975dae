"""Waiting until a grant is in effect: the apiserver authorizes from caches of Roles and bindings,
filled by watches, so a request made just after the binding was created may still get 403.

An operator started at once would meet that 403 on its first list or watch; client libraries do not
retry a 403 (it is not transient anywhere else), so the operator crashes or backs off for seconds.
Kubernetes' own integration tests guard the same race by asking the authorizer until it agrees
(`WaitForNamedAuthorizationUpdate`); so does this module, with SubjectAccessReviews made as admin:
one request each granted role allows, asked until every one is allowed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import requests

from envtest.wait import Clock, Sleep, eventually

log = logging.getLogger(__name__)

SAR_PATH = "apis/authorization.k8s.io/v1/subjectaccessreviews"
GIVE_UP = frozenset({401, 403, 404, 405})
"""Answers to a SubjectAccessReview that waiting cannot change (no such API, not allowed to ask)."""
REQUEST_SECONDS = 2.0
BUSY_PAUSE = (0.1, 1.0)
"""First and longest pause after a busy answer (429, 5xx, a failed request)."""

Probe = dict[str, Any]
"""A SubjectAccessReview's resourceAttributes or nonResourceAttributes, under its key."""


def probe(rules: Iterable[Mapping[str, Any]], namespace: str | None) -> Probe | None:
    """One request that `rules` allow, in `namespace` (None: cluster-wide); None when they allow
    nothing a probe can name.

    The rule's own strings are asked literally (`*` included): RBAC matches a rule's verb, group,
    resource and URL against itself in every case (`pods/*` only matches `pods/*`, a group `*`
    matches `*`), and a literal `*` is allowed by no rule but a wildcard one, so no narrower grant of
    the subject answers for it. A concrete request can still be allowed by another grant (an
    overlapping role); the probe then ends early, with that request allowed either way. Resource
    rules come first: a few URLs (`/healthz`, `/version`) every authenticated user may get already."""
    rules = list(rules)
    for rule in rules:
        verbs, groups, resources = (
            rule.get("verbs") or [],
            rule.get("apiGroups") or [],
            rule.get("resources") or [],
        )
        if not verbs or not groups or not resources or rule.get("nonResourceURLs"):
            continue
        resource, _, subresource = str(resources[0]).partition("/")
        attributes: dict[str, Any] = {"verb": verbs[0], "group": groups[0], "resource": resource}
        if subresource:
            attributes["subresource"] = subresource
        if rule.get("resourceNames"):
            attributes["name"] = rule["resourceNames"][0]
        if namespace is not None:
            attributes["namespace"] = namespace
        return {"resourceAttributes": attributes}
    for rule in rules:
        verbs, urls = rule.get("verbs") or [], rule.get("nonResourceURLs") or []
        if verbs and urls:
            return {"nonResourceAttributes": {"path": urls[0], "verb": verbs[0]}}
    return None


def service_account(namespace: str, name: str) -> dict[str, Any]:
    """A ServiceAccount as the authorizer sees it: its user name and the groups its token carries."""
    return {
        "user": f"system:serviceaccount:{namespace}:{name}",
        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
    }


def _allowed(resp: requests.Response) -> bool | None:
    """A review's verdict; None when the body is no SubjectAccessReview (a proxy's page, say)."""
    try:
        review = resp.json()
    except ValueError:
        return None
    status = (review.get("status") or {}) if isinstance(review, dict) else None
    return status.get("allowed") is True if isinstance(status, dict) else None


def wait_in_effect(
    session: requests.Session,
    server: str,
    subject: Mapping[str, Any],
    probes: Iterable[Probe],
    *,
    timeout: float = 10.0,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
) -> list[Probe]:
    """Ask until the authorizer allows `subject` every probe; returns those not seen allowed.

    At `timeout` the probes still denied are logged as a warning and the operator starts anyway, as
    it would have without this wait. An apiserver that will not answer SubjectAccessReviews
    (401/403/404/405: an existing cluster's limits) ends the wait at once with an info line, there is
    nothing to learn from it; one that rejects the review itself (400, 422, ...) ends it with a
    warning. A busy one (429, 5xx, a failed request, a body that is no review) is asked again after
    a pause that doubles from 0.1 s to 1 s, so the wait adds little to its load."""
    pending = list(probes)
    if not pending:
        return []
    url = f"{server}/{SAR_PATH}"
    deadline = clock() + timeout
    ended: tuple[int, str] | None = None
    """The answer that ended the wait early: (status, body)."""
    busy = 0

    def all_allowed() -> None:
        nonlocal busy, ended
        for item in list(pending):
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview"}
            body["spec"] = {**subject, **item}
            try:
                resp = session.post(url, json=body, timeout=REQUEST_SECONDS)
            except requests.RequestException as exc:
                trouble = f"{type(exc).__name__}: {exc}"
            else:
                status = resp.status_code
                allowed = _allowed(resp) if status in (200, 201) else None
                if allowed is not None:
                    busy = 0
                    if allowed:
                        pending.remove(item)
                    continue
                if status in (200, 201) or status == 429 or status >= 500:
                    trouble = f"HTTP {status}" + (" (not a SubjectAccessReview)" if status < 300 else "")
                else:
                    ended = (status, (resp.text or "")[:200])
                    return
            busy += 1
            sleep(max(0.0, min(BUSY_PAUSE[0] * 2 ** min(busy - 1, 8), BUSY_PAUSE[1], deadline - clock())))
            raise AssertionError(f"SubjectAccessReview: {trouble}")
        assert not pending, f"not yet allowed: {pending}"

    try:
        eventually(
            all_allowed,
            timeout=max(0.0, deadline - clock()),
            interval=0.02,
            description="grants in effect",
            clock=clock,
            sleep=sleep,
        )
    except AssertionError:
        log.warning("grants of %s not in effect after %.0fs: %s", subject.get("user"), timeout, pending)
        return pending
    if ended is None:
        return pending
    status, text = ended
    if status in GIVE_UP:
        log.info("SubjectAccessReviews answered %s: not waiting for grants to take effect", status)
        return []
    log.warning(
        "SubjectAccessReviews answered %s (%s): not waiting for grants of %s to take effect",
        status,
        text.strip() or "no body",
        subject.get("user"),
    )
    return pending
