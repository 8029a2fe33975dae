"""Waiting until the authorizer allows what was granted (envtest.plugin.grant_probes): one request per
role, wildcards made concrete, asked until allowed; a silent apiserver or a timeout never fails."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from envtest.plugin import grant_probes, rbac
from envtest.plugin.grant_probes import PLACEHOLDER, probe, wait_in_effect

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


def test_wildcards_become_a_placeholder_any_wildcard_allows() -> None:
    rules = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    assert probe(rules, None) == {"resourceAttributes": {"verb": "get", "group": "", "resource": PLACEHOLDER}}


def test_resource_names_are_named_and_non_resource_urls_asked_by_path() -> None:
    named = [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["lock"],
            "verbs": ["get"],
        }
    ]
    assert probe(named, "ns1")["resourceAttributes"]["name"] == "lock"  # type: ignore[index]
    urls = [{"nonResourceURLs": ["/metrics", "/healthz/*"], "verbs": ["get"]}]
    assert probe(urls, None) == {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}}
    assert probe([{"nonResourceURLs": ["/healthz/*"], "verbs": ["get"]}], None) == {
        "nonResourceAttributes": {"path": f"/healthz/{PLACEHOLDER}", "verb": "get"}
    }


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
    def __init__(self, status: int, allowed: bool = False) -> None:
        self.status_code = status
        self._body = {"status": {"allowed": allowed}}

    def json(self) -> dict[str, Any]:
        return self._body


class Authorizer:
    """Answers SubjectAccessReviews: denied until `lag` answers have gone out, then allowed."""

    def __init__(self, lag: int = 0, status: int = 201) -> None:
        self.lag, self.status = lag, status
        self.asked: list[dict[str, Any]] = []

    def post(self, url: str, json: dict[str, Any], timeout: float) -> Reply:
        assert url == f"https://api/{grant_probes.SAR_PATH}"
        self.asked.append(json["spec"])
        self.lag -= 1
        return Reply(self.status, allowed=self.lag < 0)


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
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


def test_an_apiserver_that_refuses_reviews_ends_the_wait_at_once() -> None:
    authorizer, time = Authorizer(lag=100, status=403), FakeTime()
    assert wait(authorizer, time) == []
    assert len(authorizer.asked) == 1 and time.now == 0


def test_a_grant_never_in_effect_is_a_warning_naming_it_not_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    authorizer, time = Authorizer(lag=10**6), FakeTime()
    with caplog.at_level(logging.WARNING, logger=grant_probes.__name__):
        denied = wait(authorizer, time, timeout=1.0)
    assert denied == PROBES
    assert time.now == pytest.approx(1.0)
    assert "system:serviceaccount:ns1:op" in caplog.text and "/metrics" in caplog.text
