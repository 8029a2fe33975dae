"""Desired-vs-live comparison: apiserver defaults never cause a write; our own changes always do."""

from __future__ import annotations

import copy
from typing import Any

from mysql_operator import resources
from mysql_operator.projection import matches, owned_patch, project
from operator_fakes import _apiserver_defaults, cluster


def live_cluster(**spec: Any) -> dict[str, Any]:
    obj = cluster(**spec)
    obj["metadata"] |= {"uid": "uid-1"}
    return obj


def as_stored(kind: str, desired: dict[str, Any]) -> dict[str, Any]:
    """What the apiserver would return: defaults added, bookkeeping and status filled in."""
    obj = copy.deepcopy(desired)
    _apiserver_defaults(kind, obj)
    obj["metadata"] |= {"resourceVersion": "9", "generation": 4, "managedFields": [{"manager": "x"}]}
    obj["metadata"]["labels"]["added-by-someone"] = "else"
    obj["spec"]["template"]["metadata"]["annotations"] = {"kubectl.kubernetes.io/restartedAt": "now"}
    return obj


def test_apiserver_defaults_do_not_cause_a_patch() -> None:
    desired = resources.statefulset(live_cluster(resources={"cpu": "0.5", "memory": "1Gi"}))
    stored = as_stored("StatefulSet", desired)
    assert stored["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "500m"
    assert owned_patch("StatefulSet", desired, stored) is None


def test_quantities_compare_by_value() -> None:
    assert matches({"requests": {"cpu": "0.5"}}, {"requests": {"cpu": "500m"}})
    assert matches({"limits": {"memory": "1Gi"}}, {"limits": {"memory": "1024Mi"}})
    assert not matches({"limits": {"memory": "1Gi"}}, {"limits": {"memory": "1G"}})


def test_dropping_one_resource_is_a_change() -> None:
    desired = resources.statefulset(live_cluster(resources={"memory": "1Gi"}))
    stored = as_stored(
        "StatefulSet", resources.statefulset(live_cluster(resources={"cpu": "1", "memory": "1Gi"}))
    )
    patch = owned_patch("StatefulSet", desired, stored)
    assert patch is not None
    assert patch["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"memory": "1Gi"}


def test_dropping_all_resources_is_a_change() -> None:
    desired = resources.statefulset(live_cluster())
    stored = as_stored("StatefulSet", resources.statefulset(live_cluster(resources={"cpu": "1"})))
    assert owned_patch("StatefulSet", desired, stored) is not None


def test_a_changed_list_length_is_a_change() -> None:
    assert not matches({"env": [{"name": "A"}]}, {"env": [{"name": "A"}, {"name": "B"}]})
    assert matches({"ports": [{"port": 1}]}, {"ports": [{"port": 1, "protocol": "TCP"}]})


def test_patch_carries_only_owned_mutable_fields() -> None:
    desired = resources.statefulset(live_cluster(replicas=3))
    stored = as_stored("StatefulSet", resources.statefulset(live_cluster(replicas=1)))
    patch = owned_patch("StatefulSet", desired, stored)
    assert patch is not None
    assert set(patch) == {"metadata", "spec"}
    assert set(patch["metadata"]) == {"labels"}
    # selector, serviceName and volumeClaimTemplates are immutable: never in a patch.
    assert set(patch["spec"]) == {"replicas", "persistentVolumeClaimRetentionPolicy", "template"}


def test_secret_and_create_only_kinds_are_never_patched() -> None:
    secret = resources.credentials_secret(live_cluster())
    assert owned_patch("Secret", secret, {"metadata": {}, "data": {"other": "x"}}) is None
    pvc = resources.backup_pvc(live_cluster())
    assert owned_patch("PersistentVolumeClaim", pvc, {"metadata": {}, "spec": {}}) is None


def test_project_keeps_only_the_given_paths() -> None:
    obj = {"metadata": {"name": "x", "labels": {"a": "b"}}, "spec": {"replicas": 2, "other": 1}}
    assert project(obj, ("metadata.labels", "spec.replicas", "spec.absent")) == {
        "metadata": {"labels": {"a": "b"}},
        "spec": {"replicas": 2},
    }
