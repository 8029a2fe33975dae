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
PLACEHOLDER = "envtest-probe"
"""Stands for a wildcard: any name is allowed by a `*`, and authorization never checks existence."""

Probe = dict[str, Any]
"""A SubjectAccessReview's resourceAttributes or nonResourceAttributes, under its key."""


def probe(rules: Iterable[Mapping[str, Any]], namespace: str | None) -> Probe | None:
    """One request that `rules` allow, in `namespace` (None: cluster-wide); None when they allow
    nothing a probe can name."""
    for rule in rules:
        verbs = list(rule.get("verbs") or [])
        if not verbs:
            continue
        verb = "get" if "*" in verbs else verbs[0]
        for url in rule.get("nonResourceURLs") or []:
            path = url[:-1] + PLACEHOLDER if url.endswith("*") else url
            return {"nonResourceAttributes": {"path": path, "verb": verb}}
        groups, resources = rule.get("apiGroups") or [], rule.get("resources") or []
        if not groups or not resources:
            continue
        resource, _, subresource = str(resources[0]).partition("/")
        attributes: dict[str, Any] = {
            "verb": verb,
            "group": "" if groups[0] == "*" else groups[0],
            "resource": PLACEHOLDER if resource == "*" else resource,
        }
        if subresource:
            attributes["subresource"] = PLACEHOLDER if subresource == "*" else subresource
        if rule.get("resourceNames"):
            attributes["name"] = rule["resourceNames"][0]
        if namespace is not None:
            attributes["namespace"] = namespace
        return {"resourceAttributes": attributes}
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
    An apiserver that will not answer SubjectAccessReviews (an existing cluster's limits) ends the
    wait at once: there is nothing to learn from it."""
    pending = list(probes)
    url = f"{server}/{SAR_PATH}"

    def all_allowed() -> None:
        for item in list(pending):
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview"}
            body["spec"] = {**subject, **item}
            resp = session.post(url, json=body, timeout=10)
            if resp.status_code != 201:
                log.debug("SubjectAccessReview answered %s; not waiting for grants", resp.status_code)
                pending.clear()
                return
            if (resp.json().get("status") or {}).get("allowed"):
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
