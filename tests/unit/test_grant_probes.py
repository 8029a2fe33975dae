"""Waiting until the authorizer allows what was granted (envtest.plugin.grant_probes): one request per
role, wildcards made concrete, asked until allowed; a silent apiserver or a timeout never fails."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import requests

from envtest.plugin import grant_probes, rbac
from envtest.plugin.grant_probes import probe, wait_in_effect

SUBJECT = grant_probes.service_account("ns1", "op")


def test_a_resource_rule_becomes_the_request_it_allows_in_the_namespace() -> None:
    rules = [{"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["update", "get"]}]
    assert probe(rules, "ns1") == {
        "resourceAttributes": {
            "verb": "update",
            "group": "apps",
            "resource": "deployments",
            "subresource": "scale",
            "namespace": "ns1",
        }
    }


def _rule_allows(rule: dict[str, Any], probe: grant_probes.Probe) -> bool:
    """Kubernetes' RBAC rule matching (pkg/apis/rbac/v1/evaluation_helpers.go), for one rule."""
    if "nonResourceAttributes" in probe:
        asked = probe["nonResourceAttributes"]
        urls = rule.get("nonResourceURLs") or []
        path_ok = any(
            u in ("*", asked["path"]) or (u.endswith("*") and asked["path"].startswith(u[:-1])) for u in urls
        )
        return path_ok and bool({"*", asked["verb"]} & set(rule["verbs"]))
    asked = probe["resourceAttributes"]
    combined = asked["resource"] + (f"/{asked['subresource']}" if asked.get("subresource") else "")
    resource_ok = any(
        r in ("*", combined) or (asked.get("subresource") and r == f"*/{asked['subresource']}")
        for r in rule.get("resources") or []
    )
    names = rule.get("resourceNames") or []
    return (
        bool({"*", asked["verb"]} & set(rule["verbs"]))
        and bool({"*", asked["group"]} & set(rule.get("apiGroups") or []))
        and resource_ok
        and (not names or asked.get("name") in names)
    )


@pytest.mark.parametrize(
    "rule",
    [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["pods/*"], "verbs": ["get"]},
        {"apiGroups": ["*"], "resources": ["*/*"], "verbs": ["list"]},
        {"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["update"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["lock"],
            "verbs": ["get"],
        },
        {"nonResourceURLs": ["*"], "verbs": ["get"]},
        {"nonResourceURLs": ["/healthz/*"], "verbs": ["*"]},
    ],
    ids=["all", "pods-any-sub", "any-any-sub", "any-scale", "named", "any-url", "url-prefix"],
)
def test_the_probe_of_a_rule_is_a_request_that_rule_allows(rule: dict[str, Any]) -> None:
    asked = probe([rule], "ns1")
    assert asked is not None and _rule_allows(rule, asked), asked


def test_a_wildcard_rule_is_asked_literally_so_no_narrower_grant_answers_for_it() -> None:
    wide = {"apiGroups": ["*"], "resources": ["nodes"], "verbs": ["list"]}
    narrow = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}  # what the derived role holds
    asked = probe([wide], "ns1")
    assert asked is not None and _rule_allows(wide, asked) and not _rule_allows(narrow, asked)


def test_resource_rules_are_probed_before_urls_any_user_may_get() -> None:
    rules = [
        {"nonResourceURLs": ["/healthz"], "verbs": ["get"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get"]},
    ]
    assert probe(rules, None) == {
        "resourceAttributes": {"verb": "get", "group": "storage.k8s.io", "resource": "storageclasses"}
    }
    assert probe(rules[:1], None) == {"nonResourceAttributes": {"path": "/healthz", "verb": "get"}}


def test_rules_that_allow_nothing_nameable_give_no_probe() -> None:
    assert probe([], "ns1") is None
    assert probe([{"apiGroups": [""], "resources": ["pods"], "verbs": []}], "ns1") is None
    assert probe([{"apiGroups": [""], "resources": [], "verbs": ["get"]}], "ns1") is None


def test_namespaced_rules_drop_what_only_a_cluster_binding_grants() -> None:
    scopes = {"": {"pods": True, "nodes": False}, "storage.k8s.io": {"storageclasses": False}}
    rules = [
        {"apiGroups": [""], "resources": ["pods", "nodes", "pods/log"], "verbs": ["get"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get"]},
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
        {"apiGroups": ["*"], "resources": ["nodes"], "verbs": ["list"]},
    ]
    assert rbac.namespaced_rules(rules, scopes) == [
        {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get"]},
        {
            "apiGroups": ["*"],
            "resources": ["nodes"],
            "verbs": ["list"],
        },  # another group's nodes may be namespaced
    ]


class Reply:
    def __init__(self, status: int, allowed: bool = False, body: Any = None) -> None:
        self.status_code = status
        self._body = {"status": {"allowed": allowed}} if body is None else body
        self.text = body if isinstance(body, str) else "{}"

    def json(self) -> Any:
        if isinstance(self._body, str):
            raise ValueError(f"not JSON: {self._body!r}")
        return self._body


class Authorizer:
    """Answers SubjectAccessReviews: denied until `lag` answers have gone out, then allowed."""

    def __init__(
        self, lag: int = 0, status: int = 201, troubles: list[int | Exception] | None = None
    ) -> None:
        self.lag, self.status = lag, status
        self.troubles = list(troubles or [])
        """Answered first, one per request: a status code, a reply, or an exception raised."""
        self.asked: list[dict[str, Any]] = []

    def post(self, url: str, json: dict[str, Any], timeout: float) -> Reply:
        assert url == f"https://api/{grant_probes.SAR_PATH}"
        self.asked.append(json["spec"])
        if self.troubles:
            trouble = self.troubles.pop(0)
            if isinstance(trouble, Exception):
                raise trouble
            return trouble if isinstance(trouble, Reply) else Reply(trouble)
        self.lag -= 1
        return Reply(self.status, allowed=self.lag < 0)


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


PROBES = [
    {"resourceAttributes": {"verb": "get", "group": "", "resource": "pods", "namespace": "ns1"}},
    {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}},
]


def wait(authorizer: Authorizer, time: FakeTime, timeout: float = 10.0) -> list[grant_probes.Probe]:
    return wait_in_effect(
        authorizer,  # type: ignore[arg-type]
        "https://api",
        SUBJECT,
        PROBES,
        timeout=timeout,
        clock=time.clock,
        sleep=time.sleep,
    )


def test_each_probe_is_asked_until_allowed_and_not_again() -> None:
    authorizer, time = Authorizer(lag=3), FakeTime()
    assert wait(authorizer, time) == []
    # Round 1: both denied; round 2: the first denied, the second allowed; round 3: the first allowed.
    assert [("resourceAttributes" in a) for a in authorizer.asked] == [True, False, True, False, True]
    assert all(a["user"] == "system:serviceaccount:ns1:op" for a in authorizer.asked)
    assert "system:serviceaccounts:ns1" in authorizer.asked[0]["groups"]
    assert time.now > 0


def test_nothing_granted_asks_nothing() -> None:
    authorizer = Authorizer()
    assert wait_in_effect(authorizer, "https://api", SUBJECT, []) == []  # type: ignore[arg-type]
    assert authorizer.asked == []


@pytest.mark.parametrize("status", [401, 403, 404, 405])
def test_an_apiserver_that_refuses_reviews_ends_the_wait_at_once(status: int) -> None:
    authorizer, time = Authorizer(lag=100, status=status), FakeTime()
    assert wait(authorizer, time) == []
    assert len(authorizer.asked) == 1 and time.now == 0


def test_a_busy_apiserver_is_asked_again() -> None:
    troubles: list[int | Reply | Exception] = [
        429,
        503,
        requests.ReadTimeout("read timed out"),
        requests.ConnectionError("reset"),
        Reply(201, body="<html>gateway</html>"),
        Reply(200, body=["not", "a", "review"]),
        Reply(201, body={"status": "allowed"}),
    ]
    authorizer, time = Authorizer(troubles=troubles), FakeTime()
    assert wait(authorizer, time) == []
    assert len(authorizer.asked) == 7 + len(PROBES), "each trouble cost one more question, nothing more"


def test_a_busy_apiserver_is_asked_less_and_less_often() -> None:
    authorizer, time = Authorizer(troubles=[503] * 10**4), FakeTime()
    assert wait(authorizer, time, timeout=10.0) == PROBES
    busy_pauses = [s for s in time.slept if s != 0.02][:6]
    assert busy_pauses == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    # 20 ms polls without the pause: about 500 reviews in 10 s.
    assert len(authorizer.asked) <= 16, len(authorizer.asked)
    assert time.now == pytest.approx(10.0)


@pytest.mark.parametrize("status", [400, 422])
def test_a_review_the_apiserver_rejects_ends_the_wait_with_a_warning(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    authorizer = Authorizer(troubles=[Reply(status, body="spec.resourceAttributes: Invalid value")])
    time = FakeTime()
    with caplog.at_level(logging.WARNING, logger=grant_probes.__name__):
        assert wait(authorizer, time) == PROBES
    assert len(authorizer.asked) == 1 and time.now == 0
    assert f"answered {status}" in caplog.text and "Invalid value" in caplog.text


def test_a_refusal_after_an_allowed_probe_ends_the_wait() -> None:
    authorizer = Authorizer(troubles=[Reply(201, allowed=True), 403])
    time = FakeTime()
    assert wait(authorizer, time) == []
    assert len(authorizer.asked) == 2 and time.now == 0


def test_a_grant_never_in_effect_is_a_warning_naming_it_not_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    authorizer, time = Authorizer(lag=10**6), FakeTime()
    with caplog.at_level(logging.WARNING, logger=grant_probes.__name__):
        denied = wait(authorizer, time, timeout=1.0)
    assert denied == PROBES
    assert time.now == pytest.approx(1.0)
    assert "system:serviceaccount:ns1:op" in caplog.text and "/metrics" in caplog.text
