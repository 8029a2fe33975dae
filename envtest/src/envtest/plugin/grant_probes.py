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

Probe = dict[str, Any]
"""A SubjectAccessReview's resourceAttributes or nonResourceAttributes, under its key."""


def probe(rules: Iterable[Mapping[str, Any]], namespace: str | None) -> Probe | None:
    """One request that `rules` allow, in `namespace` (None: cluster-wide); None when they allow
    nothing a probe can name.

    The rule's own strings are asked literally (`*` included): RBAC matches a rule's verb, group,
    resource and URL against itself in every case (`pods/*` only matches `pods/*`, a group `*`
    matches `*`), and a literal `*` is allowed by no rule but a wildcard one, so another binding of
    the subject cannot answer for this one. Resource rules come first: a few URLs (`/healthz`,
    `/version`) every authenticated user may get already."""
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
    """Ask until the authorizer allows `subject` every probe; returns those still denied at `timeout`
    (logged as a warning: the operator then starts anyway, as it would have without this wait).
    An apiserver that will not answer SubjectAccessReviews (401/403/404/405: an existing cluster's
    limits) ends the wait at once, there is nothing to learn from it; a busy one (429, 5xx, a request
    that timed out) is asked again."""
    pending = list(probes)
    url = f"{server}/{SAR_PATH}"
    refused: list[int] = []

    def all_allowed() -> None:
        for item in list(pending):
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview"}
            body["spec"] = {**subject, **item}
            try:
                resp = session.post(url, json=body, timeout=REQUEST_SECONDS)
                allowed = resp.status_code in (200, 201) and (resp.json().get("status") or {}).get("allowed")
            except (requests.RequestException, ValueError) as exc:  # a busy apiserver: ask again
                raise AssertionError(f"SubjectAccessReview: {exc}") from exc
            if resp.status_code in GIVE_UP:
                refused.append(resp.status_code)
                return
            if allowed:
                pending.remove(item)
        assert not pending, f"not yet allowed: {pending}"

    if not pending:
        return []
    try:
        eventually(
            all_allowed,
            timeout=timeout,
            interval=0.02,
            description="grants in effect",
            clock=clock,
            sleep=sleep,
        )
    except AssertionError:
        log.warning("grants of %s not in effect after %.0fs: %s", subject.get("user"), timeout, pending)
        return pending
    if refused:
        log.info("SubjectAccessReviews answered %s: not waiting for grants to take effect", refused[0])
        return []
    return pending
