"""The CRD's schema and CEL rules, enforced by the real apiserver: bad input is refused with a 422
whose message names the field, before any operator sees it. No operator runs here."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from mysqlkit import MySQLClusters, sample

from envtest import assert_matches

MINIMAL = sample("mysqlcluster_minimal.yaml")


def _with(path: str, value: Any) -> dict[str, Any]:
    """The minimal sample with `path` (dotted) set to `value`, or removed when value is ...."""
    doc = copy.deepcopy(MINIMAL)
    *parents, leaf = path.split(".")
    target = doc
    for part in parents:
        target = target.setdefault(part, {})
    if value is ...:
        del target[leaf]
    else:
        target[leaf] = value
    return doc


# (manifest, the field the 422 must name, a phrase of the rule that was broken)
REJECTED = {
    "replicas-0": (_with("spec.replicas", 0), "spec.replicas", "greater than or equal to 1"),
    "replicas-10": (_with("spec.replicas", 10), "spec.replicas", "less than or equal to 9"),
    "storage-missing": (_with("spec.storage", ...), "spec.storage", "Required value"),
    "storage-size-bad-quantity": (
        _with("spec.storage.size", "ten gigs"),
        "spec.storage.size",
        "should match",
    ),
    "version-not-an-image-tag": (_with("spec.version", "latest!"), "spec.version", "should match"),
    # Versions without the replication syntax the operator uses, refused before anything is created.
    "mysql-5.7": (_with("spec.version", "5.7"), "spec.version", "mysql needs 8.0.23 or newer"),
    "mysql-8.0.22": (_with("spec.version", "8.0.22"), "spec.version", "mysql needs 8.0.23 or newer"),
    "mariadb-10.5": (
        _with("spec", {"engine": "mariadb", "version": "10.5", "replicas": 1, "storage": {"size": "1Gi"}}),
        "spec.version",
        "mariadb needs 10.6 or newer",
    ),
    "mariadb-at-a-mysql-version": (
        _with("spec", {"engine": "mariadb", "version": "8.4", "replicas": 1, "storage": {"size": "1Gi"}}),
        "spec.version",
        "mariadb needs 10.6 or newer",
    ),
    "engine-unknown": (_with("spec.engine", "postgres"), "spec.engine", "Unsupported value"),
    "retention-days-0": (
        _with("spec.backup", {"enabled": True, "retentionDays": 0}),
        "spec.backup.retentionDays",
        "greater than or equal to 1",
    ),
    "name-not-dns-1035": (_with("metadata.name", "1st-cluster"), "metadata.name", "should match"),
    "name-too-long": (_with("metadata.name", "a" * 46), "metadata.name", "may not be more than 45"),
}


def _post(mysql: MySQLClusters, body: dict[str, Any]) -> Any:
    return mysql.api.session.post(mysql.api.url(mysql.path()), json=body, timeout=mysql.timeouts(10))


@pytest.mark.parametrize(("manifest", "field", "rule"), REJECTED.values(), ids=REJECTED.keys())
def test_invalid_spec_is_rejected_naming_the_field(
    mysql: MySQLClusters, manifest: dict[str, Any], field: str, rule: str
) -> None:
    resp = _post(mysql, manifest)

    assert resp.status_code == 422, f"expected 422, got {resp.status_code}: {resp.text[:300]}"
    status = resp.json()
    assert_matches(status, {"reason": "Invalid", "details": {"causes": [{"field": field}]}}, unordered=True)
    assert field in status["message"] and rule in status["message"], status["message"]
    assert mysql.get(manifest["metadata"]["name"]) is None, "a rejected cluster was stored"


def test_valid_spec_is_accepted_with_defaults_filled_in(mysql: MySQLClusters) -> None:
    # The control case for the table above: the same request with a valid spec is stored.
    resp = _post(mysql, _with("spec.backup", {"enabled": True}))

    assert resp.status_code == 201, resp.text[:300]
    assert_matches(
        resp.json(),
        {
            "spec": {
                "replicas": 1,
                "storage": {"size": "1Gi"},
                "engine": "mysql",
                "backup": {"enabled": True, "retentionDays": 7},
            }
        },
    )
    # No stored version: the operator picks the engine's current default (a later operator may move it).
    assert "version" not in resp.json()["spec"]


def test_storage_change_is_rejected_as_immutable(mysql: MySQLClusters) -> None:
    mysql.create(MINIMAL)

    resp = mysql.api.session.patch(
        mysql.api.url(mysql.path("sample")),
        json={"spec": {"storage": {"size": "2Gi"}}},
        headers={"Content-Type": "application/merge-patch+json"},
        timeout=mysql.timeouts(10),
    )

    assert resp.status_code == 422, f"expected 422, got {resp.status_code}: {resp.text[:300]}"
    message = resp.json()["message"]
    assert "spec.storage" in message and "storage is immutable" in message, message
    assert mysql.must_get("sample")["spec"]["storage"] == {"size": "1Gi"}
    # The rule is about change only: writing the same value again is fine.
    same = {"spec": {"storage": {"size": "1Gi"}, "replicas": 2}}
    assert mysql.patch("sample", same)["spec"]["replicas"] == 2


@pytest.mark.parametrize(
    ("start", "patch"),
    [
        ({"fromCluster": "old"}, {"fromCluster": "other"}),  # changed
        ({"fromCluster": "old"}, None),  # removed
        (None, {"fromCluster": "old"}),  # added later
    ],
    ids=["changed", "removed", "added"],
)
def test_restore_is_set_at_creation_or_never(
    mysql: MySQLClusters, start: dict[str, Any] | None, patch: dict[str, Any] | None
) -> None:
    body = _with("spec.restore", start) if start else copy.deepcopy(MINIMAL)
    assert _post(mysql, body).status_code == 201

    resp = mysql.api.session.patch(
        mysql.api.url(mysql.path("sample")),
        json={"spec": {"restore": patch}},
        headers={"Content-Type": "application/merge-patch+json"},
        timeout=mysql.timeouts(10),
    )

    assert resp.status_code == 422, f"expected 422, got {resp.status_code}: {resp.text[:300]}"
    message = resp.json()["message"]
    assert "spec.restore" in message and "restore is immutable" in message, message
    assert mysql.must_get("sample")["spec"].get("restore") == start


def test_the_engine_is_fixed_at_creation(mysql: MySQLClusters) -> None:
    mysql.create(MINIMAL)  # no engine: mysql, the default

    resp = mysql.api.session.patch(
        mysql.api.url(mysql.path("sample")),
        json={"spec": {"engine": "mariadb", "version": "10.11"}},
        headers={"Content-Type": "application/merge-patch+json"},
        timeout=mysql.timeouts(10),
    )

    assert resp.status_code == 422, f"expected 422, got {resp.status_code}: {resp.text[:300]}"
    message = resp.json()["message"]
    assert "spec.engine" in message and "engine is immutable" in message, message
    # Naming the default it already has is no change.
    assert mysql.patch("sample", {"spec": {"engine": "mysql", "replicas": 2}})["spec"]["replicas"] == 2
