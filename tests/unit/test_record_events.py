"""Reading one audit event into the record, and showing a test's requests to a person."""

from __future__ import annotations

import json

import pytest
from record_fakes import NS, OPERATOR, event, request

from envtest.record import events as ev


def test_operator_identity_names_its_test_namespace() -> None:
    assert ev.operator_namespace(OPERATOR) == NS
    assert ev.operator_namespace(f"system:serviceaccount:{NS}:default") is None
    assert ev.operator_namespace("envtest-admin") is None
    assert ev.operator_namespace("system:serviceaccount::envtest-operator") is None


def test_event_becomes_a_request_with_its_latency() -> None:
    r = ev.from_event(event("patch", subresource="status", code=409, at=1.0, took=0.25))
    assert r is not None
    assert (r.verb, r.resource_path, r.namespace, r.name, r.code) == (
        "patch",
        "widgets/status.example.com",
        NS,
        "w",
        409,
    )
    assert r.latency == pytest.approx(0.25)
    assert r.object_key == ("example.com", "widgets", NS, "w")


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "Status"},
        {**event(), "stage": "RequestReceived"},
        {**event(), "user": "not-a-mapping"},
        {**event(), "stageTimestamp": "yesterday"},
        {**event(), "objectRef": ["nonsense"], "responseStatus": "x"},
        "a string",
    ],
)
def test_what_is_no_usable_event_is_none_never_an_exception(bad: object) -> None:
    parsed = ev.from_event(bad)  # type: ignore[arg-type]
    if parsed is not None:  # a broken objectRef/responseStatus still gives a request, without them
        assert parsed.resource == "" and parsed.code == 0


def test_authorizer_sees_no_name_on_create_list_watch_unless_a_field_selector_names_one() -> None:
    assert request("get").authorized_name == "w"
    assert request("create").authorized_name == ""
    assert request("create", resource="serviceaccounts", subresource="token").authorized_name == "w"
    assert request("list", name="", uri=f"/api/v1/namespaces/{NS}/leases").authorized_name == ""
    one = request("watch", name="", uri="/api/v1/leases?fieldSelector=metadata.name%3Dleader&watch=true")
    assert one.authorized_name == "leader"


def test_json_line_round_trips() -> None:
    r = request("update", at=2.0)
    line = json.loads(json.dumps(r.to_json()))
    assert line["latency_ms"] == 2.0
    assert ev.Request.from_json(line) == r
    assert ev.Request.from_json({"verb": "get"}) is None


def test_timeline_is_in_the_order_made_with_watch_open_and_close_and_others_marked() -> None:
    items = [
        request("patch", at=3.0, subresource="status"),
        request("watch", name="", at=0.0, took=5.0, stage="ResponseComplete"),
        request("watch", name="", at=0.0, took=0.001, stage="ResponseStarted"),
        request("patch", at=2.0, user="envtest-admin"),
    ]
    text = ev.timeline(items, {OPERATOR})
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert [line.split()[1] for line in lines] == ["watch", "«envtest-admin»", "patch", "watch"]
    assert "watch open" in lines[0] and "watch close" in lines[3] and "(open 5.0s)" in lines[3]
    assert lines[2].startswith("   +3.000s")
    assert ev.timeline([], {OPERATOR}) == "(no requests recorded)\n"
