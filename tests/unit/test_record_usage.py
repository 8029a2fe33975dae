"""RBAC rule matching as the apiserver does it, and the run's least-privilege report."""

from __future__ import annotations

import json

import pytest
from record_fakes import NS, OPERATOR, request

from envtest.record import rules
from envtest.record.usage import Usage, report, summary

A = rules.Attributes


@pytest.mark.parametrize(
    ("rule", "attrs", "allowed"),
    [
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, A("get", "", "pods"), True),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, A("list", "", "pods"), False),
        ({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, A("delete", "apps", "deployments"), True),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, A("get", "", "pods", "log"), False),
        ({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}, A("get", "", "pods", "log"), True),
        (
            {"apiGroups": ["x"], "resources": ["*/status"], "verbs": ["patch"]},
            A("patch", "x", "w", "status"),
            True,
        ),
        ({"apiGroups": [""], "resources": ["pods/*"], "verbs": ["get"]}, A("get", "", "pods", "log"), False),
        (
            {"apiGroups": ["c"], "resources": ["l"], "resourceNames": ["me"], "verbs": ["get"]},
            A("get", "c", "l", name="me"),
            True,
        ),
        (
            {"apiGroups": ["c"], "resources": ["l"], "resourceNames": ["me"], "verbs": ["get"]},
            A("get", "c", "l", name="you"),
            False,
        ),
        (
            {"apiGroups": ["c"], "resources": ["l"], "resourceNames": ["me"], "verbs": ["create"]},
            A("create", "c", "l"),
            False,
        ),
        ({"nonResourceURLs": ["/metrics"], "verbs": ["get"]}, A("get", path="/metrics"), True),
        ({"nonResourceURLs": ["/logs*"], "verbs": ["get"]}, A("get", path="/logs/kubelet"), True),
        ({"nonResourceURLs": ["/logs"], "verbs": ["get"]}, A("get", path="/logs/kubelet"), False),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, A("get", path="/api"), False),
    ],
)
def test_rule_matching_follows_the_rbac_authorizer(
    rule: dict, attrs: rules.Attributes, allowed: bool
) -> None:
    assert rules.allows(rule, attrs) is allowed


ROLE = {
    "ClusterRole/op": [
        {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": ["example.com"], "resources": ["widgets/status"], "verbs": ["patch"]},
        {"apiGroups": ["example.com"], "resources": ["widgets/finalizers"], "verbs": ["update"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "create"]},
    ],
    "Role/leader": [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["me"],
            "verbs": ["get"],
        }
    ],
}


def _usage() -> Usage:
    usage = Usage()
    usage.add(
        "t.py::test_one",
        [
            request("get", at=1),
            request("list", name="", at=2),
            request("watch", name="", stage="ResponseStarted", at=3),
            request("watch", name="", stage="ResponseComplete", at=3, took=9),  # the same watch, closed
            request("patch", subresource="status", at=4),
            request("create", resource="secrets", group="", name="s", code=403, at=5),
            request("get", resource="leases", group="coordination.k8s.io", name="me", at=6),
            request("patch", user="envtest-admin", at=7),  # not the operator's
        ],
        {OPERATOR},
    )
    return usage


def test_report_names_unused_grants_and_denied_requests_with_their_test() -> None:
    data = report(_usage(), ROLE)
    assert data["tests"] == 1 and data["requests"] == 6
    unused = {(u["role"], u["rule"]): u["unused"] for u in data["unused"]}
    assert unused == {
        ("ClusterRole/op", 0): ["patch widgets"],
        ("ClusterRole/op", 3): ["list secrets", "create secrets"],
    }
    finalizers = next(g for g in data["grants"] if g["rule"] == 2 and g["role"] == "ClusterRole/op")
    assert finalizers["unused"] == [] and finalizers["implicit"] == ["update widgets/finalizers"]
    assert data["denied"] == [
        {"test": "t.py::test_one", "request": "create secrets", "object": f"{NS}/s", "count": 1}
    ]
    watch = next(e for e in data["exercised"] if e["verb"] == "watch")
    assert watch["count"] == 1 and watch["allowed_by"] == ["ClusterRole/op#0"]
    json.dumps(data)  # the report is plain JSON


def test_a_role_never_grants_a_cluster_wide_request() -> None:
    usage = Usage()
    usage.add(
        "t",
        [request("get", resource="leases", group="coordination.k8s.io", name="me", namespace="")],
        {OPERATOR},
    )
    data = report(usage, ROLE)
    assert data["exercised"][0]["allowed_by"] == []


def test_workers_shares_merge_into_the_same_report() -> None:
    merged = Usage()
    merged.merge(json.loads(json.dumps(_usage().to_json())))
    merged.merge(json.loads(json.dumps(_usage().to_json())))
    merged.merge({"counts": [["not a shape"]]})  # a malformed share is skipped, not raised
    data = report(merged, ROLE)
    assert data["tests"] == 2 and data["requests"] == 12
    assert data["denied"][0]["count"] == 2


def test_summary_is_a_few_lines() -> None:
    lines = summary(report(_usage(), ROLE), "artifacts/rbac-usage.json", limit=1)
    assert lines[0].startswith(
        "envtest: record: 6 operator requests in 1 tests; 2 rule(s) with unused grants"
    )
    assert lines[1] == "  unused: ClusterRole/op rule 0 (example.com): patch widgets"
    assert lines[2].startswith("  denied: t.py::test_one: create secrets")
    assert lines[3] == "  … 1 more in the report"


def test_a_websocket_exec_uses_the_create_grant_the_apiserver_also_checks() -> None:
    usage = Usage()
    exec_get = request("get", resource="pods", group="", name="db-0", subresource="exec", at=1)
    log_get = request("get", resource="pods", group="", name="db-0", subresource="log", at=2)
    usage.add("t", [exec_get, log_get], {OPERATOR})
    role = {
        "ClusterRole/op": [
            {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["create", "get"]},
        ]
    }
    unused = {u["rule"]: u["unused"] for u in report(usage, role)["unused"]}
    assert unused == {1: ["create pods/log"]}, "only exec, attach and portforward imply create"


def test_a_run_without_operator_requests_is_summed_up_without_unused_grants() -> None:
    usage = Usage()
    usage.add("t", [request("get", user="envtest-admin")], {OPERATOR})
    (line,) = summary(report(usage, ROLE), "artifacts/rbac-usage.json")
    assert line.startswith("envtest: record: no operator request recorded; its grants not compared")
