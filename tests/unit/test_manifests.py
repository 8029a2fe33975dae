"""CRD and ClusterRole generation: structural schema, and committed files in step with the code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, Field

from mysql_operator.api.v1 import MySQLClusterModel
from mysql_operator.manifests import generate, rbac
from mysql_operator.manifests.schema import SchemaError, structural_schema, walk
from mysql_operator.runtime.manager import ManagerOptions

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    (hub,) = [v for v in generate.crd()["spec"]["versions"] if v["storage"]]
    return hub["schema"]["openAPIV3Schema"]


def all_keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        keys = set(node)
        for value in node.values():
            keys |= all_keys(value)
        return keys
    if isinstance(node, list):
        return set().union(*(all_keys(v) for v in node)) if node else set()
    return set()


def test_schema_has_no_json_schema_only_constructs(schema: dict[str, Any]) -> None:
    assert not all_keys(schema) & {
        "$ref",
        "$defs",
        "anyOf",
        "allOf",
        "oneOf",
        "title",
        "additionalProperties",
    }


def test_every_schema_node_has_a_type(schema: dict[str, Any]) -> None:
    for path, node in walk(schema):
        assert "type" in node, path


def test_optional_fields_are_plain_types_not_nullable(schema: dict[str, Any]) -> None:
    assert not any(node.get("nullable") for _, node in walk(schema))
    spec = schema["properties"]["spec"]
    assert spec["properties"]["resources"]["type"] == "object"
    assert spec["required"] == ["replicas", "storage"]
    assert schema["required"] == ["spec"]


def test_conditions_are_a_list_map_keyed_by_type(schema: dict[str, Any]) -> None:
    conditions = schema["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    assert set(item["required"]) == {"type", "status", "lastTransitionTime", "reason", "message"}
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert item["properties"]["lastTransitionTime"]["format"] == "date-time"
    assert "pattern" in item["properties"]["reason"]


def test_storage_is_immutable_by_cel(schema: dict[str, Any]) -> None:
    storage = schema["properties"]["spec"]["properties"]["storage"]
    assert storage["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "storage is immutable"}
    ]
    assert storage["required"] == ["size"] and "pattern" in storage["properties"]["size"]


def test_defaults_bounds_and_enums_survive(schema: dict[str, Any]) -> None:
    spec = schema["properties"]["spec"]["properties"]
    assert (spec["replicas"]["minimum"], spec["replicas"]["maximum"]) == (1, 9)
    assert "default" not in spec["version"], "unset means the engine's default, decided by the operator"
    assert spec["engine"]["default"] == "mysql" and spec["engine"]["enum"] == ["mysql", "mariadb"]
    backup = spec["backup"]["properties"]
    assert backup["enabled"]["default"] is False
    assert backup["schedule"]["properties"]["cron"]["default"] == "0 2 * * *"
    assert (backup["retentionDays"]["default"], backup["retentionDays"]["minimum"]) == (7, 1)
    phase = schema["properties"]["status"]["properties"]["phase"]
    assert phase["enum"] == ["Pending", "Running", "Failed", "Terminating"]
    assert spec["replicas"]["description"]


def test_metadata_restricts_only_the_name(schema: dict[str, Any]) -> None:
    metadata = schema["properties"]["metadata"]
    assert set(metadata) == {"type", "properties"}
    assert set(metadata["properties"]) == {"name"}
    assert metadata["properties"]["name"]["maxLength"] == 45


def test_crd_has_status_subresource_short_name_and_printer_columns() -> None:
    crd = generate.crd()
    assert crd["metadata"]["name"] == "mysqlclusters.db.example.com"
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["shortNames"] == ["mysql"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Phase": ".status.phase",
        "Replicas": ".spec.replicas",
        "Ready": ".status.readyReplicas",
        "Version": ".status.version",
        "Age": ".metadata.creationTimestamp",
    }


def served(crd: dict[str, Any]) -> set[str]:
    return {v["name"] for v in crd["spec"]["versions"] if v["served"]}


def test_the_deployable_crd_serves_only_versions_stored_without_conversion() -> None:
    """Strategy None relabels: a served version of another shape than the stored one loses fields."""
    crd = generate.crd()
    assert crd["spec"]["conversion"] == {"strategy": "None"}
    (hub,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    same_shape = {v["name"] for v in crd["spec"]["versions"] if v["schema"] == hub["schema"]}
    assert served(crd) == same_shape == {"v1beta1", "v1"}
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1", "v1beta1", "v1"]


def test_v1alpha1_is_served_only_where_the_conversion_webhook_is_set() -> None:
    generated = generate.outputs()
    patch = yaml.safe_load(generated[generate.CONVERSION_PATCH_PATH])
    assert patch["spec"]["conversion"]["strategy"] == "Webhook"
    # A merge patch replaces the list whole: it must carry every version, schemas included.
    assert patch["spec"]["versions"] == generate.crd(serve_all=True)["spec"]["versions"]
    assert served(patch) == {"v1alpha1", "v1beta1", "v1"}
    testing = yaml.safe_load(generated[generate.TESTING_CRD_PATH])
    assert testing == generate.crd(serve_all=True)
    assert served(testing) == {"v1alpha1", "v1beta1", "v1"}


def test_unions_other_than_optional_are_refused() -> None:
    class Odd(BaseModel):
        value: int | str

    with pytest.raises(SchemaError, match="value"):
        structural_schema(Odd)


def test_exclusive_bounds_become_openapi_v3_flags() -> None:
    class Bounded(BaseModel):
        value: int = Field(gt=0)

    node = structural_schema(Bounded)["properties"]["value"]
    assert node["minimum"] == 0 and node["exclusiveMinimum"] is True


def test_cluster_role_is_the_permission_table() -> None:
    role = rbac.cluster_role()
    assert role["metadata"]["name"] == "mysql-operator"
    rules = {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in role["rules"]}
    assert rules[("db.example.com", "mysqlclusters/status")] == ["patch"]
    assert rules[("db.example.com", "mysqlclusters/finalizers")] == ["update"]
    assert ("coordination.k8s.io", "leases") not in rules, "lease rights belong to the namespaced Role"
    assert "*" not in str(role["rules"])
    assert rbac.allowed("batch", "jobs", "delete") and not rbac.allowed("", "pods", "create")
    assert rbac.allowed("", "pods", "list"), "the final backup waits for database pods to be gone"
    assert rbac.allowed("", "pods", "delete"), "database pods outstaying their grace are deleted"
    assert rbac.allowed("", "pods", "patch"), "the role label moves the primary Service"
    assert rbac.allowed("", "pods/exec", "create"), "failover reads GTIDs and fences through exec"
    assert not rbac.allowed("", "pods/eviction", "create") and not rbac.allowed("", "pods", "update")


def test_the_operator_holds_no_crd_right_and_the_migration_holds_only_its_own() -> None:
    operator_rules = str(rbac.cluster_role()["rules"])
    assert "customresourcedefinitions" not in operator_rules
    account, role, binding, job = rbac.storage_migration_docs()
    assert (account["kind"], role["kind"], binding["kind"], job["kind"]) == (
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Job",
    )
    crd_rules = [r for r in role["rules"] if r["apiGroups"] == ["apiextensions.k8s.io"]]
    assert {tuple(r["resources"]) for r in crd_rules} == {
        ("customresourcedefinitions",),
        ("customresourcedefinitions/status",),
    }
    assert all(r["resourceNames"] == ["mysqlclusters.db.example.com"] for r in crd_rules)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "mysql-operator-system"}
    ]
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["containers"][0]["args"][0] == "migrate-storage"


def test_the_namespaced_mode_grants_no_namespaced_right_cluster_wide() -> None:
    role, role_binding = rbac.namespaced_role_docs()
    cluster_reads, cluster_binding = rbac.cluster_reads_docs()
    assert (role["kind"], role_binding["kind"]) == ("Role", "RoleBinding")
    assert "namespace" not in role["metadata"] and "namespace" not in role_binding["metadata"]
    namespaced = {r["resources"][0] for r in role["rules"]}
    assert {"secrets", "statefulsets", "jobs", "pods"} <= namespaced
    assert {r["resources"][0] for r in cluster_reads["rules"]} == {"persistentvolumes", "storageclasses"}
    assert all(set(r["verbs"]) <= {"get", "list"} for r in cluster_reads["rules"])
    assert cluster_binding["roleRef"]["name"] == cluster_reads["metadata"]["name"]
    # Together they are exactly the cluster-wide role, split by scope.
    both = sorted(map(str, role["rules"] + cluster_reads["rules"]))
    assert both == sorted(map(str, rbac.cluster_role()["rules"]))


def test_lease_rights_are_a_namespaced_role_limited_to_our_lease() -> None:
    role = rbac.leader_election_role()
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == "mysql-operator-system"
    by_verbs = {tuple(r["verbs"]): r for r in role["rules"]}
    assert by_verbs[("get", "update")]["resourceNames"] == ["mysql-operator-leader"]
    # create cannot be limited by name (the authorizer sees no name at create time)
    assert "resourceNames" not in by_verbs[("create",)]
    assert all(r["resources"] == ["leases"] for r in role["rules"])
    assert ManagerOptions().leader_election_id == rbac.LEASE_NAME


def test_samples_are_valid_clusters() -> None:
    for path in sorted((ROOT / "api" / "samples").glob("*.yaml")):
        MySQLClusterModel.model_validate(yaml.safe_load(path.read_text()))
    minimal = yaml.safe_load((ROOT / "api/samples/mysqlcluster_minimal.yaml").read_text())
    assert minimal["metadata"]["name"] == "sample" and minimal["spec"] == {
        "replicas": 1,
        "storage": {"size": "1Gi"},
    }


def run_check(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "mysql_operator.manifests", "--check", "--root", str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_committed_manifests_match_the_code() -> None:
    result = run_check(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_drift_fails_the_check_with_a_diff(tmp_path: Path) -> None:
    generate.write(tmp_path)
    crd = tmp_path / generate.CRD_PATH
    crd.write_text(crd.read_text().replace("maximum: 9", "maximum: 10"))
    result = run_check(tmp_path)
    assert result.returncode == 1
    assert "-                maximum: 10" in result.stdout and "+                maximum: 9" in result.stdout
    assert "make manifests" in result.stderr
