"""Desired-vs-live comparison: apiserver defaults never cause a write; our own changes always do."""

from __future__ import annotations

import copy
from typing import Any

from operator_fakes import _apiserver_defaults, cluster

from mysql_operator.controller.children import backups, resources
from mysql_operator.controller.children.projection import applies, drifted, matches, project


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


def test_apiserver_defaults_are_not_drift() -> None:
    desired = resources.statefulset(live_cluster(resources={"cpu": "0.5", "memory": "1Gi"}))
    stored = as_stored("StatefulSet", desired)
    assert stored["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "500m"
    assert not drifted("StatefulSet", desired, stored)


def test_quantities_compare_by_value() -> None:
    assert matches({"requests": {"cpu": "0.5"}}, {"requests": {"cpu": "500m"}})
    assert matches({"limits": {"memory": "1Gi"}}, {"limits": {"memory": "1024Mi"}})
    assert not matches({"limits": {"memory": "1Gi"}}, {"limits": {"memory": "1G"}})


def test_dropping_one_resource_is_drift() -> None:
    desired = resources.statefulset(live_cluster(resources={"memory": "1Gi"}))
    stored = as_stored(
        "StatefulSet", resources.statefulset(live_cluster(resources={"cpu": "1", "memory": "1Gi"}))
    )
    assert drifted("StatefulSet", desired, stored)


def test_dropping_all_resources_is_drift() -> None:
    desired = resources.statefulset(live_cluster())
    stored = as_stored("StatefulSet", resources.statefulset(live_cluster(resources={"cpu": "1"})))
    assert drifted("StatefulSet", desired, stored)


def test_someone_elses_sidecar_is_not_drift_but_a_change_to_ours_is() -> None:
    desired = resources.statefulset(live_cluster())
    stored = as_stored("StatefulSet", desired)
    pod = stored["spec"]["template"]["spec"]
    pod["containers"].append({"name": "sidecar", "image": "envoy:1"})
    pod["volumes"].append({"name": "sidecar-certs", "emptyDir": {}})
    assert not drifted("StatefulSet", desired, stored)
    pod["containers"][0]["image"] = "mysql:5.7"
    assert drifted("StatefulSet", desired, stored)


def test_lists_of_named_items_match_by_name_and_others_by_position() -> None:
    assert matches({"env": [{"name": "A"}]}, {"env": [{"name": "B"}, {"name": "A"}]})
    assert not matches({"env": [{"name": "A", "value": "1"}]}, {"env": [{"name": "A", "value": "2"}]})
    assert not matches({"command": ["sh", "-c"]}, {"command": ["sh", "-c", "extra"]})
    assert matches({"ports": [{"port": 1}]}, {"ports": [{"port": 1, "protocol": "TCP"}]})


def test_secret_and_create_only_kinds_are_never_applied() -> None:
    secret = resources.credentials_secret(live_cluster())
    assert not drifted("Secret", secret, {"metadata": {}, "data": {"other": "x"}})
    pvc = backups.backup_pvc(live_cluster())
    assert not drifted("PersistentVolumeClaim", pvc, {"metadata": {}, "spec": {}})
    assert [k for k in ("Secret", "PersistentVolumeClaim", "Job") if applies(k)] == []
    assert all(applies(k) for k in ("StatefulSet", "Service", "CronJob"))


def test_project_keeps_only_the_given_paths() -> None:
    obj = {"metadata": {"name": "x", "labels": {"a": "b"}}, "spec": {"replicas": 2, "other": 1}}
    assert project(obj, ("metadata.labels", "spec.replicas", "spec.absent")) == {
        "metadata": {"labels": {"a": "b"}},
        "spec": {"replicas": 2},
    }
