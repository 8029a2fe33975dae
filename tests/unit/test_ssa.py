"""Server-side apply helpers: the applied-config hash and the csaupgrade-style managedFields upgrade."""

from __future__ import annotations

from typing import Any

from operator_fakes import cluster

from mysql_operator.controller.children import resources
from mysql_operator.controller.children.immutable import mutable_part
from mysql_operator.controller.children.ssa import (
    APPLIED_ANNOTATION,
    applied_hash,
    config_hash,
    split_fields,
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


def sts_fields(**spec_fields: Any) -> dict[str, Any]:
    return {"f:spec": {f"f:{k}": v for k, v in spec_fields.items()}}


def live_sts(*entries: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"resourceVersion": "7", "managedFields": list(entries)},
    }


DESIRED = resources.statefulset(owner())


def test_the_old_operators_fields_fold_into_our_apply_entry_and_other_writers_keep_theirs() -> None:
    template = {"f:spec": {"f:containers": {'k:{"name":"mysql"}': {".": {}, "f:image": {}}}}}
    old_create = entry("pykube-ng", "Update", sts_fields(replicas={}, template=template))
    refs = {"f:ownerReferences": {".": {}, 'k:{"uid":"uid-1"}': {}}}
    old_patch = entry("pykube-ng", "Update", {"f:metadata": refs})
    status = entry("kube-controller-manager", "Update", {"f:status": {"f:replicas": {}}}, "status")
    other = entry("kubectl-edit", "Update", sts_fields(minReadySeconds={}))
    upgraded = upgrade_managed_fields(live_sts(old_create, status, old_patch, other), DESIRED)
    assert upgraded is not None
    assert [(e["manager"], e["operation"]) for e in upgraded] == [
        ("kube-controller-manager", "Update"),
        ("kubectl-edit", "Update"),
        ("mysql-operator", "Apply"),
    ], "only our legacy entries move; another writer's fields stay theirs"
    assert upgraded[-1]["fieldsV1"] == {
        "f:spec": {"f:replicas": {}, "f:template": template},
        "f:metadata": refs,
    }
    assert upgraded[-1]["apiVersion"] == "apps/v1"


def test_a_foreign_pykube_ng_entry_is_left_alone() -> None:
    """Another pykube-ng tool: its label, annotation and sidecar are none of our builders' fields."""
    foreign_fields = {
        "f:metadata": {
            "f:labels": {"f:team": {}},
            "f:annotations": {"f:backup.example.com/owner": {}},
        },
        "f:spec": {
            "f:template": {
                "f:spec": {
                    "f:containers": {
                        'k:{"name":"sidecar"}': {".": {}, "f:name": {}, "f:image": {}},
                    }
                }
            }
        },
    }
    foreign = entry("pykube-ng", "Update", foreign_fields)
    applied = entry("mysql-operator", "Apply", sts_fields(replicas={}))
    assert upgrade_managed_fields(live_sts(applied, foreign), DESIRED) is None, "nothing of it is ours"


def test_a_shared_pykube_ng_entry_gives_up_only_what_our_builders_set() -> None:
    mixed = entry(
        "pykube-ng",
        "Update",
        {
            "f:metadata": {"f:labels": {".": {}, "f:app.kubernetes.io/instance": {}, "f:team": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:template": {
                    "f:spec": {
                        "f:containers": {
                            'k:{"name":"mysql"}': {".": {}, "f:image": {}},
                            'k:{"name":"sidecar"}': {".": {}, "f:image": {}},
                        }
                    }
                },
            },
        },
    )
    upgraded = upgrade_managed_fields(live_sts(mixed), DESIRED)
    assert upgraded is not None
    (left,) = [e for e in upgraded if e["manager"] == "pykube-ng"]
    (ours,) = [e for e in upgraded if e["operation"] == "Apply"]
    assert left["fieldsV1"] == {
        "f:metadata": {"f:labels": {"f:team": {}}},
        "f:spec": {
            "f:template": {"f:spec": {"f:containers": {'k:{"name":"sidecar"}': {".": {}, "f:image": {}}}}}
        },
    }
    assert ours["fieldsV1"] == {
        "f:metadata": {"f:labels": {".": {}, "f:app.kubernetes.io/instance": {}}},
        "f:spec": {
            "f:replicas": {},
            "f:template": {"f:spec": {"f:containers": {'k:{"name":"mysql"}': {".": {}, "f:image": {}}}}},
        },
    }


def test_keyed_items_match_without_their_defaulted_key_fields() -> None:
    service = resources.headless_service(owner())
    fields = {
        "f:spec": {
            "f:ports": {
                'k:{"port":3306,"protocol":"TCP"}': {".": {}, "f:port": {}},
                'k:{"port":9104,"protocol":"TCP"}': {".": {}, "f:port": {}},
            }
        }
    }
    mine, theirs = split_fields(fields, service)
    assert list(mine["f:spec"]["f:ports"]) == ['k:{"port":3306,"protocol":"TCP"}']
    assert list(theirs["f:spec"]["f:ports"]) == ['k:{"port":9104,"protocol":"TCP"}']


def test_fields_fixed_at_creation_stay_with_our_update_entry() -> None:
    created = entry(
        "mysql-operator",
        "Update",
        sts_fields(selector={}, serviceName={}, volumeClaimTemplates={}, replicas={}, template={}),
    )
    upgraded = upgrade_managed_fields(live_sts(created), DESIRED)
    assert upgraded is not None
    by_op = {e["operation"]: e["fieldsV1"] for e in upgraded}
    assert by_op == {
        "Update": sts_fields(selector={}, serviceName={}, volumeClaimTemplates={}),
        "Apply": sts_fields(replicas={}, template={}),
    }
    again = {**live_sts(), "metadata": {"managedFields": upgraded}}
    assert upgrade_managed_fields(again, DESIRED) is None, "settled: no write on the next pass"


def test_fixed_fields_an_earlier_apply_owned_move_to_our_update_entry() -> None:
    """Written by the operator before it left them out of applies: without the move, the next apply
    (which omits them) would ask the apiserver to remove the selector."""
    applied = entry("mysql-operator", "Apply", sts_fields(replicas={}, selector={}, podManagementPolicy={}))
    upgraded = upgrade_managed_fields(live_sts(applied), DESIRED)
    assert upgraded is not None
    by_op = {e["operation"]: e["fieldsV1"] for e in upgraded}
    assert by_op == {
        "Update": sts_fields(selector={}, podManagementPolicy={}),
        "Apply": sts_fields(replicas={}),
    }
    assert upgrade_managed_fields({**live_sts(), "metadata": {"managedFields": upgraded}}, DESIRED) is None


def test_the_hash_ignores_fields_fixed_at_creation() -> None:
    bigger = owner()
    bigger["spec"]["storage"] = {"size": "5Gi"}
    assert config_hash(resources.statefulset(bigger)) == config_hash(DESIRED), (
        "a storage change would otherwise mean an apply, refused with 422, on every pass"
    )
    assert "volumeClaimTemplates" not in mutable_part(DESIRED)["spec"]
    assert "volumeClaimTemplates" in DESIRED["spec"], "the input is not mutated"


def test_nothing_to_upgrade_means_no_write() -> None:
    applied = entry("mysql-operator", "Apply", {"f:spec": {}})
    assert upgrade_patch(live_sts(applied), DESIRED) is None


def test_the_upgrade_patch_is_conditional_on_the_resource_version() -> None:
    live = {
        "apiVersion": "v1",
        "metadata": {
            "resourceVersion": "42",
            "managedFields": [entry("pykube-ng", "Update", {"f:spec": {"f:replicas": {}}})],
        },
    }
    test, replace = upgrade_patch(live, DESIRED) or []
    assert test == {"op": "test", "path": "/metadata/resourceVersion", "value": "42"}
    assert replace["op"] == "replace" and replace["path"] == "/metadata/managedFields"
    assert replace["value"][0]["manager"] == "mysql-operator"


def test_atomic_values_our_builders_set_are_taken_whole() -> None:
    """The apiserver records a selector, a command or the claim templates as one leaf each."""
    fields = {
        "f:spec": {
            "f:selector": {},
            "f:volumeClaimTemplates": {},
            "f:template": {"f:spec": {"f:containers": {'k:{"name":"mysql"}': {"f:readinessProbe": {}}}}},
        }
    }
    mine, theirs = split_fields(fields, DESIRED)
    assert (mine, theirs) == (fields, {})
