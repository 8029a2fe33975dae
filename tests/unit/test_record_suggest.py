"""`envtest rbac suggest`: the least roles covering a record, from each kind of record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from record_fakes import OPERATOR, event, request

from envtest import cli
from envtest.errors import ConfigError
from envtest.record import suggest
from envtest.record.usage import Usage, report

RECORDED = [
    request("list", name="", at=1),
    request("watch", name="", stage="ResponseStarted", at=1),
    request("patch", name="a", at=2),
    request("patch", name="b", subresource="status", at=3),
    request("create", resource="secrets", group="", name="creds", code=403, at=4),  # denied: still needed
    request(
        "get",
        resource="customresourcedefinitions",
        group="apiextensions.k8s.io",
        namespace="",
        name="widgets.example.com",
        at=5,
    ),
    request("list", resource="nodes", group="", namespace="", name="", at=6),
    request("get", resource="leases", group="coordination.k8s.io", name="leader", at=7),
    request(
        "create",
        resource="selfsubjectaccessreviews",
        group="authorization.k8s.io",
        namespace="",
        name="",
        at=8,
    ),
]


def _docs(text: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(text) if d}


def _check(docs: dict[str, dict]) -> None:
    inside, outside = docs["op"], docs["op-cluster"]
    assert inside["kind"] == "ClusterRole"
    assert inside["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]},  # no test names
        {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["list", "watch", "patch"]},
        {"apiGroups": ["example.com"], "resources": ["widgets/status"], "verbs": ["patch"]},
    ]
    assert outside["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "resourceNames": ["widgets.example.com"],
            "verbs": ["get"],
        },
    ]


def test_suggestion_from_the_runs_report(tmp_path: Path) -> None:
    usage = Usage()
    usage.add("t", RECORDED, {OPERATOR})
    path = tmp_path / "rbac-usage.json"
    path.write_text(json.dumps(report(usage, {})))
    text = suggest.render(path, "op")
    assert "9 requests recorded" in text and "(1 of them denied then)" in text
    _check(_docs(text))


def test_several_records_suggest_their_union(tmp_path: Path) -> None:
    half = len(RECORDED) // 2
    paths = []
    for i, part in enumerate((RECORDED[:half], RECORDED[half:])):
        usage = Usage()
        usage.add("t", part, {OPERATOR})
        paths.append(tmp_path / f"rbac-usage-{i}.json")
        paths[-1].write_text(json.dumps(report(usage, {})))
    text = suggest.render(paths, "op")
    assert "the 9 requests recorded" in text
    _check(_docs(text))  # what either half alone would not cover


def test_suggestion_from_an_artifacts_folder_and_from_an_audit_log(tmp_path: Path) -> None:
    for test in ("t1", "t2"):
        (tmp_path / "out" / test / "record").mkdir(parents=True)
    half = len(RECORDED) // 2
    for test, part in (("t1", RECORDED[:half]), ("t2", RECORDED[half:])):
        lines = [json.dumps(r.to_json()) + "\n" for r in part]
        (tmp_path / "out" / test / "record" / "requests.jsonl").write_text("".join(lines))
    _check(_docs(suggest.render(tmp_path / "out", "op")))
    audit = tmp_path / "audit.log"
    raw = [json.dumps(event("get", user="someone-else", at=1)) + "\n"]
    raw += [json.dumps(event("list", name="", at=2)) + "\n"]
    audit.write_text("".join(raw))
    docs = _docs(suggest.render(audit, "op"))
    assert docs["op"]["rules"] == [
        {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["list"]}
    ]
    docs = _docs(suggest.render(audit, "op", user="someone-else", role=True))
    assert docs["op"]["kind"] == "Role" and docs["op"]["rules"][0]["verbs"] == ["get"]


def test_bad_records_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"verb": "get"}\nnot json\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl:1: neither an audit Event nor a recorded request"):
        suggest.render(bad, "op")
    with pytest.raises(ConfigError, match="no such file"):
        suggest.render(tmp_path / "missing.json", "op")
    with pytest.raises(ConfigError, match=r"no record/requests\.jsonl"):
        suggest.render(tmp_path, "op")


def test_cli_prints_the_roles_and_says_what_is_wrong_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    usage = Usage()
    usage.add("t", RECORDED, {OPERATOR})
    path = tmp_path / "rbac-usage.json"
    path.write_text(json.dumps(report(usage, {})))
    assert cli.main(["rbac", "suggest", str(path), "--name", "op"]) == 0
    _check(_docs(capsys.readouterr().out))
    assert cli.main(["rbac", "suggest", str(tmp_path / "nope")]) == 1
    assert "envtest: " in capsys.readouterr().err


def test_an_exec_recorded_as_get_is_suggested_with_create(tmp_path: Path) -> None:
    usage = Usage()
    usage.add("t", [request("get", resource="pods", group="", name="db-0", subresource="exec")], {OPERATOR})
    path = tmp_path / "rbac-usage.json"
    path.write_text(json.dumps(report(usage, {})))
    (rule,) = _docs(suggest.render(path, "op"))["op"]["rules"]
    assert rule == {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]}
