"""The audit policy of the record: what kube-apiserver writes, and what it never writes."""

from __future__ import annotations

from pathlib import Path

import yaml

from envtest.record import policy


def _first_match(doc: dict, user_groups: list[str], group: str, resource: str, verb: str) -> str:
    # Enough of the apiserver's policy evaluation for these rules: first match wins.
    for rule in doc["rules"]:
        if "nonResourceURLs" in rule:
            continue
        if "userGroups" in rule and not set(rule["userGroups"]) & set(user_groups):
            continue
        if "verbs" in rule and verb not in rule["verbs"]:
            continue
        if "resources" in rule:
            hit = any(
                g["group"] == group and (not g.get("resources") or resource in g["resources"])
                for g in rule["resources"]
            )
            if not hit:
                continue
        return str(rule["level"])
    return "None"


SA = ["system:serviceaccounts", "system:serviceaccounts:test-ns", "system:authenticated"]
ADMIN = ["system:masters", "system:authenticated"]


def test_operators_are_recorded_and_the_admins_reads_are_not() -> None:
    doc = policy.document()
    assert _first_match(doc, SA, "apps", "statefulsets", "list") == "Metadata"
    assert _first_match(doc, ADMIN, "apps", "statefulsets", "list") == "None"
    assert _first_match(doc, ADMIN, "", "namespaces", "create") == "None"  # bookkeeping
    assert _first_match(doc, ADMIN, "example.com", "widgets", "patch") == "Metadata"  # a spec change


def test_secret_bodies_never_even_when_bodies_are_asked_for() -> None:
    doc = policy.document(bodies=True)
    assert _first_match(doc, SA, "apps", "statefulsets", "create") == "RequestResponse"
    for group, resource in [
        ("", "secrets"),
        ("", "serviceaccounts/token"),
        ("authentication.k8s.io", "tokenreviews"),
    ]:
        for verb in ("get", "list", "create", "update", "patch"):
            assert _first_match(doc, SA, group, resource, verb) == "Metadata", (resource, verb)
            assert _first_match(doc, ADMIN, group, resource, verb) in ("None", "Metadata")


def test_the_clusters_own_service_accounts_are_not_recorded() -> None:
    kube_system = ["system:serviceaccounts", "system:serviceaccounts:kube-system"]
    assert _first_match(policy.document(), kube_system, "apps", "deployments", "update") == "None"


def test_sync_markers_are_recorded_first(tmp_path: Path) -> None:
    path = policy.write(tmp_path / "audit", bodies=False)
    doc = yaml.safe_load(path.read_text())
    assert doc["rules"][0] == {"level": "Metadata", "nonResourceURLs": [f"{policy.SYNC_PATH}/*"]}
    assert doc["omitStages"] == ["RequestReceived"]


def test_flags_name_both_files_and_a_blocking_log() -> None:
    flags = policy.apiserver_flags("/p.yaml", "/a.log")
    assert flags["audit-policy-file"] == "/p.yaml" and flags["audit-log-path"] == "/a.log"
    assert flags["audit-log-mode"] == "blocking"
    assert int(flags["audit-log-maxsize"]) > 0 and int(flags["audit-log-maxbackup"]) > 0
