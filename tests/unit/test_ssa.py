"""Server-side apply helpers: the applied-config hash and the csaupgrade-style managedFields upgrade."""

from __future__ import annotations

from typing import Any

from operator_fakes import cluster

from mysql_operator import resources
from mysql_operator.ssa import (
    APPLIED_ANNOTATION,
    applied_hash,
    config_hash,
    upgrade_managed_fields,
    upgrade_patch,
    with_config_hash,
)


def owner(**spec: Any) -> dict[str, Any]:
    obj = cluster(**spec)
    obj["metadata"]["uid"] = "uid-1"
    return obj


def entry(
    manager: str, operation: str, fields: dict[str, Any], subresource: str | None = None
) -> dict[str, Any]:
    e = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "apps/v1",
        "time": "2026-01-01T00:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if subresource:
        e["subresource"] = subresource
    return e


def test_the_hash_changes_with_our_config_and_ignores_its_own_annotation() -> None:
    one = resources.statefulset(owner(resources={"cpu": "1"}))
    other = resources.statefulset(owner())
    assert config_hash(one) != config_hash(other)
    stamped = with_config_hash(one)
    assert applied_hash(stamped) == config_hash(one) == config_hash(stamped)
    assert APPLIED_ANNOTATION not in (one["metadata"].get("annotations") or {}), "the input is not mutated"


def test_legacy_update_managers_fold_into_our_apply_entry() -> None:
    old_create = entry("pykube-ng", "Update", {"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {}}}})
    old_patch = entry("pykube-ng", "Update", {"f:metadata": {"f:ownerReferences": {}}})
    status = entry("kube-controller-manager", "Update", {"f:status": {"f:replicas": {}}}, "status")
    other = entry("kubectl-edit", "Update", {"f:spec": {"f:minReadySeconds": {}}})
    live = {
        "apiVersion": "apps/v1",
        "metadata": {"resourceVersion": "7", "managedFields": [old_create, status, old_patch, other]},
    }
    upgraded = upgrade_managed_fields(live)
    assert upgraded is not None
    assert [(e["manager"], e["operation"]) for e in upgraded] == [
        ("kube-controller-manager", "Update"),
        ("kubectl-edit", "Update"),
        ("mysql-operator", "Apply"),
    ], "only our legacy entries move; another writer's fields stay theirs"
    assert upgraded[-1]["fieldsV1"] == {
        "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {}}},
        "f:metadata": {"f:ownerReferences": {}},
    }
    assert upgraded[-1]["apiVersion"] == "apps/v1"


def test_our_own_create_and_an_existing_apply_entry_merge() -> None:
    created = entry("mysql-operator", "Update", {"f:spec": {"f:selector": {}}})
    applied = entry("mysql-operator", "Apply", {"f:spec": {"f:replicas": {}}})
    live = {
        "apiVersion": "apps/v1",
        "metadata": {"resourceVersion": "7", "managedFields": [applied, created]},
    }
    (only,) = upgrade_managed_fields(live) or []
    assert only["operation"] == "Apply"
    assert only["fieldsV1"] == {"f:spec": {"f:replicas": {}, "f:selector": {}}}


def test_nothing_to_upgrade_means_no_write() -> None:
    applied = entry("mysql-operator", "Apply", {"f:spec": {}})
    live = {"apiVersion": "apps/v1", "metadata": {"resourceVersion": "7", "managedFields": [applied]}}
    assert upgrade_patch(live) is None


def test_the_upgrade_patch_is_conditional_on_the_resource_version() -> None:
    live = {
        "apiVersion": "v1",
        "metadata": {
            "resourceVersion": "42",
            "managedFields": [entry("pykube-ng", "Update", {"f:spec": {}})],
        },
    }
    test, replace = upgrade_patch(live) or []
    assert test == {"op": "test", "path": "/metadata/resourceVersion", "value": "42"}
    assert replace["op"] == "replace" and replace["path"] == "/metadata/managedFields"
    assert replace["value"][0]["manager"] == "mysql-operator"
