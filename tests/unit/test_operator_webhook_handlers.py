"""The operator's admission handlers without a cluster: what each one allows, denies and patches."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from mysql_operator.webhooks.admission import default, validate


class Classes:
    def __init__(self, names: set[str], default: str | None = None, broken: bool = False) -> None:
        self.names, self._default, self.broken = names, default, broken

    def exists(self, name: str) -> bool | None:
        return None if self.broken else name in self.names

    def default(self) -> str | None:
        return self._default


def request(operation: str = "CREATE", **spec: Any) -> dict[str, Any]:
    body = {"replicas": 1, "storage": {"size": "1Gi"}, **spec}
    return {"operation": operation, "object": {"spec": body}}


def test_cron_the_cronjob_controller_would_refuse_is_denied_naming_the_field() -> None:
    verdict = validate(request(backup={"schedule": {"cron": "0 0 2 * * *"}}), None)
    assert verdict["allowed"] is False and verdict["status"]["code"] == 422
    assert verdict["status"]["details"]["causes"][0]["field"] == "spec.backup.schedule.cron"


def test_unknown_time_zone_is_denied() -> None:
    verdict = validate(request(backup={"schedule": {"timeZone": "Mars/Olympus"}}), None)
    assert "spec.backup.schedule.timeZone" in verdict["status"]["message"]


def test_storage_class_is_checked_at_create_only() -> None:
    spec = {"storage": {"size": "1Gi", "storageClassName": "gone"}}
    assert validate(request(**spec), Classes(set()))["allowed"] is False
    # Deleted after the cluster was made: other edits must still pass (storage is immutable anyway).
    assert validate(request("UPDATE", **spec), Classes(set()))["allowed"] is True
    assert validate(request(**spec), Classes({"gone"}))["allowed"] is True


def test_a_failed_look_up_denies_rather_than_guesses() -> None:
    spec = {"storage": {"size": "1Gi", "storageClassName": "x"}}
    assert validate(request(**spec), Classes(set(), broken=True))["allowed"] is False


def patch_of(verdict: dict[str, Any]) -> list[dict[str, Any]]:
    return json.loads(base64.b64decode(verdict["patch"])) if "patch" in verdict else []


def test_defaulting_pins_the_default_class_at_create_only() -> None:
    pinned = {"version": "8.4"}
    verdict = default(request(**pinned), Classes(set(), default="standard"))
    assert patch_of(verdict) == [{"op": "add", "path": "/spec/storage/storageClassName", "value": "standard"}]
    assert patch_of(default(request("UPDATE"), Classes(set(), default="standard"))) == []
    assert patch_of(default(request(**pinned), Classes(set(), default=None))) == []
    explicit = request(storage={"size": "1Gi", "storageClassName": "fast"}, **pinned)
    assert patch_of(default(explicit, Classes(set(), default="standard"))) == []


@pytest.mark.parametrize(("engine", "version"), [(None, "8.4"), ("mysql", "8.4"), ("mariadb", "10.11")])
def test_defaulting_pins_the_engines_default_version_at_create(engine: str | None, version: str) -> None:
    """Unset, a later operator's default would apply when the cluster is re-created over its data."""
    spec = {"engine": engine} if engine else {}
    verdict = default(request(storage={"size": "1Gi", "storageClassName": "x"}, **spec), None)
    assert patch_of(verdict) == [{"op": "add", "path": "/spec/version", "value": version}]
    asked = request(storage={"size": "1Gi", "storageClassName": "x"}, version="8.0", **spec)
    assert patch_of(default(asked, None)) == []
    assert patch_of(default(request("UPDATE", storage={"size": "1Gi"}), None)) == []


def test_the_previous_releases_admission_paths_are_still_answered(tmp_path: Any) -> None:
    # An upgrade runs the new server before the old configurations (v1beta1 paths) are replaced.
    import requests

    from envtest.webhooks import serving_certs
    from mysql_operator.webhooks.server import V1BETA1_MUTATE_PATH, V1BETA1_VALIDATE_PATH, server

    certs = serving_certs(tmp_path)
    hooks = server(certs).start()
    try:
        ca = tmp_path / "ca.pem"
        ca.write_bytes(hooks.ca_pem)
        bad = {
            "apiVersion": "db.example.com/v1beta1",
            **request(backup={"schedule": {"cron": "0 0 2 * * *"}}),
        }
        for path, allowed in ((V1BETA1_VALIDATE_PATH, False), (V1BETA1_MUTATE_PATH, True)):
            review = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"uid": "u1", **bad},
            }
            resp = requests.post(f"{hooks.url}{path}", json=review, verify=str(ca), timeout=10)
            assert resp.status_code == 200, (path, resp.text)
            assert resp.json()["response"]["allowed"] is allowed, path
        # The paths the previous release's webhook.yaml names, verbatim.
        assert V1BETA1_VALIDATE_PATH == "/validate-db-example-com-v1beta1-mysqlcluster"
        assert V1BETA1_MUTATE_PATH == "/mutate-db-example-com-v1beta1-mysqlcluster"
    finally:
        hooks.stop()
