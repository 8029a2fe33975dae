"""The fault proxy's decisions without a cluster: request parsing, rule matching and counting, the
Status bodies it answers with, and the kubeconfigs it writes."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import pytest
import yaml

from envtest.errors import ConfigError
from envtest.faults import FaultProxy
from envtest.faults.relay import _token_subject
from envtest.faults.rules import (
    CutWatch,
    DropReply,
    ExpireWatch,
    RequestInfo,
    Respond,
    Rule,
    already_exists,
    conflict,
    expired_event,
    internal_error,
    invalid,
    not_found,
    status_body,
    too_many_requests,
    unavailable,
)
from envtest.kubeconfig import write_kubeconfig


def parse(method: str, url: str, body: bytes = b"") -> RequestInfo:
    path, _, query = url.partition("?")
    return RequestInfo.parse(method, path, query, body)


@pytest.mark.parametrize(
    ("method", "url", "expected"),
    [
        ("GET", "/api/v1/namespaces/ns/secrets?limit=500", ("list", "", "secrets", "", "ns", "")),
        ("GET", "/api/v1/namespaces/ns/secrets?watch=true", ("watch", "", "secrets", "", "ns", "")),
        ("GET", "/api/v1/watch/namespaces/ns/secrets", ("watch", "", "secrets", "", "ns", "")),
        (
            "GET",
            "/apis/apps/v1/namespaces/ns/statefulsets/db",
            ("get", "apps", "statefulsets", "", "ns", "db"),
        ),
        (
            "PATCH",
            "/apis/db.example.com/v1alpha1/namespaces/ns/mysqlclusters/db/status",
            ("patch", "db.example.com", "mysqlclusters", "status", "ns", "db"),
        ),
        (
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
            ("update", "coordination.k8s.io", "leases", "", "ns", "l"),
        ),
        ("DELETE", "/api/v1/namespaces/ns/pods", ("deletecollection", "", "pods", "", "ns", "")),
        ("DELETE", "/api/v1/namespaces/ns/pods/p", ("delete", "", "pods", "", "ns", "p")),
        ("GET", "/api/v1/namespaces/ns", ("get", "", "namespaces", "", "ns", "ns")),
        ("PUT", "/api/v1/namespaces/ns/finalize", ("update", "", "namespaces", "finalize", "ns", "ns")),
        ("GET", "/api/v1/nodes/n1", ("get", "", "nodes", "", "", "n1")),
        ("GET", "/version", ("get", "", "", "", "", "")),
        ("GET", "/apis/apps/v1", ("get", "apps", "", "", "", "")),
    ],
)
def test_requests_are_described_as_rbac_sees_them(method: str, url: str, expected: tuple[str, ...]) -> None:
    info = parse(method, url)
    assert (info.verb, info.group, info.resource, info.subresource, info.namespace, info.name) == expected


def test_a_create_takes_its_name_from_the_body() -> None:
    info = parse("POST", "/api/v1/namespaces/ns/secrets", json.dumps({"metadata": {"name": "s"}}).encode())
    assert (info.verb, info.name, info.is_write) == ("create", "s", True)
    assert parse("POST", "/api/v1/namespaces/ns/secrets", b"not json").name == ""


STS_PATCH = parse("PATCH", "/apis/apps/v1/namespaces/ns/statefulsets/db")
STATUS_PATCH = parse("PATCH", "/apis/db.example.com/v1alpha1/namespaces/ns/mysqlclusters/db/status")
CR_PATCH = parse("PATCH", "/apis/db.example.com/v1alpha1/namespaces/ns/mysqlclusters/db")
WATCH = parse("GET", "/apis/apps/v1/namespaces/ns/statefulsets?watch=1")


def test_filters_left_out_match_anything_and_given_ones_must_all_match() -> None:
    assert Rule().matches(STS_PATCH)
    assert Rule(verb="patch", resource="statefulsets", namespace="ns", name="db").matches(STS_PATCH)
    assert not Rule(verb="patch", resource="statefulsets", name="other").matches(STS_PATCH)
    assert Rule(verb=("get", "patch")).matches(STS_PATCH)
    assert Rule(client="a").matches(STS_PATCH, client="a")
    assert not Rule(client="a").matches(STS_PATCH, client="b")


def test_subresource_none_matches_all_empty_matches_the_main_resource_only() -> None:
    assert Rule(resource="mysqlclusters").matches(STATUS_PATCH)
    assert not Rule(resource="mysqlclusters", subresource="").matches(STATUS_PATCH)
    assert Rule(resource="mysqlclusters", subresource="").matches(CR_PATCH)
    assert Rule(resource="mysqlclusters/status").matches(STATUS_PATCH)
    assert not Rule(resource="mysqlclusters/status").matches(CR_PATCH)


def test_times_counts_the_first_n_matches_then_the_rule_stands_aside() -> None:
    rule = Rule(conflict(), verb="patch", times=2)
    assert [rule.take(STS_PATCH) for _ in range(3)] == [True, True, False]
    assert (rule.fired, rule.matched, rule.active) == (2, 2, False)
    assert not rule.take(WATCH) and rule.matched == 2, "a request the filters reject is not a match"


def test_probability_acts_on_some_matches_and_only_those_use_up_times() -> None:
    rule = Rule(unavailable(), probability=0.5, times=10, rng=random.Random(1))
    taken = sum(rule.take(STS_PATCH) for _ in range(100))
    assert taken == 10 and rule.matched > 10
    assert not Rule(probability=0.0).take(STS_PATCH)


def test_watch_actions_apply_to_watches_only() -> None:
    assert Rule(ExpireWatch()).matches(WATCH)
    assert not Rule(CutWatch(after_events=1)).matches(STS_PATCH)
    with pytest.raises(ValueError, match="watches only"):
        Rule(ExpireWatch(), verb="get")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"verb": "frobnicate"}, "unknown verb"),
        ({"probability": 1.5}, "probability"),
        ({"times": -1}, "times"),
        ({"resource": "mysqlclusters/status", "subresource": "status"}, "subresource"),
    ],
)
def test_bad_rules_are_refused_with_the_field_named(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Rule(**kwargs)  # type: ignore[arg-type]


def test_describe_names_the_action_latency_and_filters() -> None:
    rule = Rule(DropReply(), verb="create", resource="statefulsets", latency=2)
    assert rule.describe() == "DropReply after 2s on verb=create resource=statefulsets"


def test_conflict_status_is_the_apiservers_own() -> None:
    body = status_body(conflict(), STS_PATCH)
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Operation cannot be fulfilled on statefulsets.apps "db": the object has been modified; '
        "please apply your changes to the latest version and try again",
        "reason": "Conflict",
        "details": {"name": "db", "group": "apps", "kind": "statefulsets"},
        "code": 409,
    }


@pytest.mark.parametrize(
    ("respond", "code", "reason", "message"),
    [
        (already_exists(), 409, "AlreadyExists", 'statefulsets.apps "db" already exists'),
        (not_found(), 404, "NotFound", 'statefulsets.apps "db" not found'),
        (invalid(), 422, "Invalid", 'statefulsets.apps "db" is invalid: '),
        (internal_error(), 500, "InternalError", "Internal error occurred: "),
        (unavailable(), 503, "ServiceUnavailable", "the server is currently unable"),
        (too_many_requests(3), 429, "TooManyRequests", "Too many requests"),
        (Respond(418, "Teapot", "short and stout"), 418, "Teapot", "short and stout"),
    ],
)
def test_status_bodies(respond: Respond, code: int, reason: str, message: str) -> None:
    body = status_body(respond, STS_PATCH)
    assert (body["code"], body["reason"], body["status"]) == (code, reason, "Failure")
    assert body["message"].startswith(message)


def test_status_details_carry_causes_and_retry_after() -> None:
    assert status_body(invalid(), STS_PATCH)["details"]["causes"][0]["field"] == "metadata.name"
    assert status_body(internal_error("boom"), STS_PATCH)["details"]["causes"] == [{"message": "boom"}]
    assert status_body(too_many_requests(3), STS_PATCH)["details"] == {"retryAfterSeconds": 3}
    assert "details" not in status_body(unavailable(), STS_PATCH)


def test_expired_event_is_an_error_event_with_a_410_status() -> None:
    event = expired_event()
    assert event["type"] == "ERROR"
    assert {k: event["object"][k] for k in ("kind", "apiVersion", "status", "reason", "code")} == {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": "Expired",
        "code": 410,
    }


def _jwt(claims: dict[str, str]) -> str:
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"Bearer eyJhbGciOiJSUzI1NiJ9.{payload}.sig"


def test_clients_without_a_label_are_named_by_their_token_subject() -> None:
    assert _token_subject(_jwt({"sub": "system:serviceaccount:ns:op"})) == "system:serviceaccount:ns:op"
    assert _token_subject("Bearer opaque") == "token"
    assert _token_subject("") == "anonymous"


def _identity_kubeconfig(path: Path, user: dict[str, str]) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": "https://127.0.0.1:1", "certificate-authority": "x"}}
        ],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    return write_kubeconfig(path, config)


def test_proxy_kubeconfig_trusts_the_proxys_ca_and_carries_the_client_label(tmp_path: Path) -> None:
    with FaultProxy("https://127.0.0.1:1") as proxy:
        source = _identity_kubeconfig(tmp_path / "in", {"token": "t"})
        written = yaml.safe_load(proxy.kubeconfig_for(source, tmp_path / "out", client="a").read_text())
        cluster = written["clusters"][0]["cluster"]
        assert cluster["server"] == f"{proxy.url}/envtest-client/a"
        assert base64.b64decode(cluster["certificate-authority-data"]) == proxy.ca.cert_pem
        assert "certificate-authority" not in cluster
        assert written["users"][0]["user"] == {"token": "t"}
        assert (tmp_path / "out").stat().st_mode & 0o777 == 0o600


def test_client_certificate_identities_are_refused_with_the_reason(tmp_path: Path) -> None:
    source = _identity_kubeconfig(tmp_path / "in", {"client-certificate-data": "x", "client-key-data": "y"})
    with FaultProxy("https://127.0.0.1:1") as proxy, pytest.raises(ConfigError, match="client certificate"):
        proxy.kubeconfig_for(source, tmp_path / "out")


def test_counters_filter_by_verb_resource_client_and_code() -> None:
    proxy = FaultProxy("https://127.0.0.1:1")
    for client, info, code in [("a", STS_PATCH, "200"), ("a", STATUS_PATCH, "409"), ("b", WATCH, "")]:
        rule = proxy._decide(client, info)
        proxy._answered(client, info, rule, code)
    assert proxy.requests() == 3
    assert proxy.writes() == 2 and proxy.writes(client="a", resource="statefulsets") == 1
    assert proxy.requests(resource="mysqlclusters/status", code=409) == 1
    assert proxy.requests(verb="watch", code="") == 1
    assert proxy.counts()[("b", "watch", "statefulsets")] == 1


def test_injections_are_recorded_in_order() -> None:
    proxy = FaultProxy("https://127.0.0.1:1")
    proxy.add(Rule(conflict(), verb="patch", times=1))
    proxy.add(Rule(ExpireWatch()))
    assert proxy._decide("a", STS_PATCH) is not None
    assert proxy._decide("a", STS_PATCH) is None
    assert proxy._decide("a", WATCH) is not None
    assert [what for _, _, what, _ in proxy.injected] == ["patch statefulsets ns/db", "watch statefulsets ns"]
    assert proxy.injections(Respond) == 1 and proxy.injections(ExpireWatch) == 1
    proxy.clear()
    assert proxy._decide("a", WATCH) is None
