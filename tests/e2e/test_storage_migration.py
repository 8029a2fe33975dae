"""The upgrade to v1 storage on a real apiserver: a plane whose CRD stores v1beta1 and holds objects gets
the new CRD (v1 stored, v1beta1 and v1alpha1 served through the operator's conversion webhook), then
`migrate-storage` re-stores every object and trims `status.storedVersions` to `["v1"]` — and never
trims while a write failed.

Under the migration's own ClusterRole (rbac.MIGRATION_PERMISSIONS, bound cluster-wide as
storage_migration.yaml binds it), so a permission the migration lacks fails here. The proof that
objects really are re-encoded is the apiserver's own: once v1beta1 is no longer in the CRD at all, an
object still stored at v1beta1 could not be decoded; every object still reads.

Private planes: the test replaces the CRD and changes its storage version.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pykube
import pytest
from mysqlkit import Timeouts

from envtest import crds, eventually
from envtest.errors import CRDError
from envtest.faults import Rule, internal_error
from envtest.webhooks import install_crds, serving_certs, wait_converting
from mysql_operator.api import v1
from mysql_operator.cli.storage_migration import CRD_NAME, migrate, storage_version_hash
from mysql_operator.manifests import generate, rbac
from mysql_operator.webhooks.server import CONVERT_PATH, server

pytestmark = pytest.mark.envtest_private(components="minimal")

GROUP = "apis/db.example.com"
VERSIONS = ("v1alpha1", "v1beta1", "v1")
MIGRATOR = "storage-migrator"


class Plane:
    def __init__(self, cluster: Any, hooks: Any, namespace: str) -> None:
        self.cluster, self.hooks, self.namespace = cluster, hooks, namespace
        self.s, self.api = cluster.session, cluster.server
        self.timeouts = Timeouts(cluster.backend)

    def url(self, version: str, name: str = "") -> str:
        base = f"{self.api}/{GROUP}/{version}/namespaces/{self.namespace}/mysqlclusters"
        return f"{base}/{name}" if name else base

    def install(self, crd: dict[str, Any]) -> None:
        install_crds(
            self.s,
            self.api,
            [crd],
            f"{self.hooks.url}{CONVERT_PATH}",
            self.hooks.ca_pem,
            timeout=self.timeouts(30),
        )

    def crd(self) -> dict[str, Any]:
        resp = self.s.get(f"{self.api}/{crds.CRD_API}/{CRD_NAME}", timeout=self.timeouts(10))
        assert resp.status_code == 200, resp.text
        return resp.json()  # type: ignore[no-any-return]

    def delete_crd(self) -> None:
        """Delete the CRD and wait until the apiserver's CRD finalizer has removed it."""
        gone = self.s.delete(f"{self.api}/{crds.CRD_API}/{CRD_NAME}", timeout=self.timeouts(30))
        assert gone.status_code in (200, 202), gone.text

        def crd_gone() -> None:
            resp = self.s.get(f"{self.api}/{crds.CRD_API}/{CRD_NAME}", timeout=self.timeouts(10))
            # Still there: its conditions say which step of the finalizer it is waiting in.
            if resp.status_code == 200:
                raise AssertionError((resp.json().get("status") or {}).get("conditions"))
            assert resp.status_code == 404, resp.text[:500]

        eventually(crd_gone, timeout=self.timeouts(60), description=f"CRD {CRD_NAME} gone")

    def stored_versions(self) -> list[str]:
        return list(self.crd()["status"]["storedVersions"])

    def create(self, body: dict[str, Any]) -> None:
        version = body["apiVersion"].rsplit("/", 1)[1]
        resp = self.s.post(self.url(version), json=body, timeout=self.timeouts(30))
        assert resp.status_code == 201, resp.text

    def read(self, version: str, name: str) -> dict[str, Any]:
        """What a client of `version` sees: spec and annotations (the rest is the apiserver's)."""
        obj = wait_converting(self.s, self.url(version, name), timeout=self.timeouts(30))
        assert obj["apiVersion"] == f"db.example.com/{version}"
        return {"spec": obj["spec"], "annotations": obj["metadata"].get("annotations") or {}}

    def resource_version(self, name: str) -> str:
        return str(
            wait_converting(self.s, self.url("v1", name), timeout=self.timeouts(30))["metadata"][
                "resourceVersion"
            ]
        )

    def everything(self, names: list[str], versions: tuple[str, ...] = VERSIONS) -> dict[str, dict[str, Any]]:
        return {f"{name}@{v}": self.read(v, name) for name in names for v in versions}


@pytest.fixture
def plane(private_cluster: Any, envtest_context: Any, tmp_path: Path) -> Iterator[Plane]:
    hooks = server(serving_certs(tmp_path / "certs")).start()
    try:
        yield Plane(private_cluster, hooks, envtest_context.create_namespace(private_cluster))
    finally:
        hooks.stop()


def without(crd: dict[str, Any], dropped: str, storage: str) -> dict[str, Any]:
    """`crd` without version `dropped`, storing `storage`."""
    out = copy.deepcopy(crd)
    out["spec"]["versions"] = [
        {**v, "storage": v["name"] == storage} for v in out["spec"]["versions"] if v["name"] != dropped
    ]
    return out


def the_release_before() -> dict[str, Any]:
    """The CRD as the previous release shipped it: v1alpha1 and v1beta1 served, v1beta1 stored."""
    return without(generate.crd(serve_all=True), "v1", "v1beta1")


def migrator_kubeconfig(plane: Plane, path: Path) -> Path:
    """A ServiceAccount bound cluster-wide to the migration's generated ClusterRole (its Job's binding)."""
    (role,) = [d for d in rbac.storage_migration_docs() if d["kind"] == "ClusterRole"]
    role["metadata"]["name"] = f"{MIGRATOR}-{plane.namespace}"
    base = f"{plane.api}/apis/rbac.authorization.k8s.io/v1"
    made = plane.s.post(f"{base}/clusterroles", json=role, timeout=plane.timeouts(10))
    assert made.status_code == 201, made.text
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": role["metadata"]["name"]},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role["metadata"]["name"],
        },
        "subjects": [{"kind": "ServiceAccount", "name": MIGRATOR, "namespace": plane.namespace}],
    }
    made = plane.s.post(f"{base}/clusterrolebindings", json=binding, timeout=plane.timeouts(10))
    assert made.status_code == 201, made.text
    return plane.cluster.identity_kubeconfig(plane.namespace, MIGRATOR, path)  # type: ignore[no-any-return]


def seed_objects(plane: Plane) -> list[str]:
    """Objects written while v1beta1 was stored, at both versions then served; every field that only
    some versions can hold is set somewhere."""
    beta = "db.example.com/v1beta1"
    plane.create(
        {
            "apiVersion": beta,
            "kind": v1.KIND,
            "metadata": {"name": "maria"},
            "spec": {
                "replicas": 3,
                "engine": "mariadb",  # version unset: the engine's default
                "storage": {"size": "2Gi", "storageClassName": "fast"},
                "backup": {
                    "enabled": True,
                    "schedule": {"cron": "0 3 * * *", "timeZone": "Europe/Berlin"},
                    "retentionDays": 3,
                },
            },
        }
    )
    plane.create(
        {
            "apiVersion": beta,
            "kind": v1.KIND,
            "metadata": {"name": "pinned"},
            "spec": {"replicas": 1, "version": "8.0.36", "storage": {"size": "1Gi"}},
        }
    )
    plane.create(
        {
            "apiVersion": "db.example.com/v1alpha1",
            "kind": v1.KIND,
            "metadata": {"name": "from-alpha"},
            "spec": {"replicas": 2, "storageSize": "3Gi", "backup": {"enabled": True, "schedule": "@daily"}},
        }
    )
    plane.create(
        {
            "apiVersion": beta,
            "kind": v1.KIND,
            "metadata": {"name": "refused"},
            "spec": {"replicas": 1, "engine": "mariadb", "version": "11.4", "storage": {"size": "1Gi"}},
        }
    )
    return ["maria", "pinned", "from-alpha", "refused"]


def test_v1beta1_objects_are_restored_at_v1_before_stored_versions_is_trimmed(
    plane: Plane, faults: Any, tmp_path: Path
) -> None:
    t = plane.timeouts

    # The plane came with the current CRD: start over as a cluster of the release before.
    plane.delete_crd()
    plane.install(the_release_before())
    assert plane.stored_versions() == ["v1beta1"]
    names = seed_objects(plane)
    before = plane.everything(names, ("v1alpha1", "v1beta1"))
    assert before["maria@v1beta1"]["spec"]["engine"] == "mariadb"

    # The upgrade: v1 added and stored; what is in etcd is still v1beta1.
    plane.install(generate.crd(serve_all=True))
    assert plane.stored_versions() == ["v1beta1", "v1"]
    read_before = {n: plane.resource_version(n) for n in names}

    # The apiserver's discovery agrees with our hash formula (migrate waits for exactly this value).
    resources = plane.s.get(f"{plane.api}/{GROUP}/v1", timeout=t(10)).json()["resources"]
    (entry,) = [r for r in resources if r["name"] == v1.PLURAL]
    assert entry["storageVersionHash"] == storage_version_hash(v1.GROUP, "v1", v1.KIND)

    identity = migrator_kubeconfig(plane, tmp_path / "migrator.kubeconfig")

    # 1. One write refused: every other object is re-stored, storedVersions is left alone.
    refuse = faults.add(
        Rule(internal_error("injected"), verb="patch", resource="mysqlclusters", name="refused")
    )
    proxied = faults.kubeconfig_for(identity, tmp_path / "proxied.kubeconfig")
    outcome = migrate(pykube.HTTPClient(pykube.KubeConfig.from_file(str(proxied))), ready_timeout=t(60))
    assert refuse.fired == 1
    assert set(outcome.failed) == {f"{plane.namespace}/refused"}, outcome
    assert sorted(outcome.rewritten) == sorted(f"{plane.namespace}/{n}" for n in names if n != "refused")
    assert plane.stored_versions() == ["v1beta1", "v1"], "trimmed although a write failed"
    assert plane.resource_version("refused") == read_before["refused"]
    # While v1beta1 is listed as stored, the apiserver refuses to drop it from the CRD.
    with pytest.raises(CRDError, match="storedVersions"):
        plane.install(without(generate.crd(serve_all=True), "v1beta1", "v1"))
    faults.remove(refuse)

    # 2. The command, as an upgrade runs it: finishes the job, exit 0, storedVersions trimmed.
    done = subprocess.run(
        [sys.executable, "-m", "mysql_operator", "migrate-storage", "--kubeconfig", str(identity)],
        capture_output=True,
        text=True,
        timeout=t(120),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert plane.stored_versions() == ["v1"]
    moved = {n: plane.resource_version(n) for n in names}
    assert all(moved[n] != read_before[n] for n in names), "every object was written again"

    # 3. Objects already at v1 encode to the bytes etcd holds: a second run writes nothing.
    again = migrate(pykube.HTTPClient(pykube.KubeConfig.from_file(str(identity))), ready_timeout=t(60))
    assert again.rewritten == [] and len(again.current) == len(names) and again.trimmed
    assert {n: plane.resource_version(n) for n in names} == moved

    # 4. v1beta1 gone from the CRD: nothing stored at it could be decoded now; everything reads.
    plane.install(without(generate.crd(serve_all=True), "v1beta1", "v1"))

    def v1beta1_not_served() -> None:
        resp = plane.s.get(plane.url("v1beta1", "maria"), timeout=t(10))
        assert resp.status_code == 404, resp.text

    eventually(v1beta1_not_served, timeout=t(60))
    for name in names:
        assert plane.read("v1alpha1", name) == before[f"{name}@v1alpha1"], name
        assert plane.read("v1", name)["spec"] == before[f"{name}@v1beta1"]["spec"], name

    # 5. Served again (the release that still serves it): all three versions read as before, no loss.
    plane.install(generate.crd(serve_all=True))
    after = plane.everything(names)
    for key, seen in before.items():
        assert after[key] == seen, key
    for name in names:
        assert after[f"{name}@v1"] == after[f"{name}@v1beta1"], name
    maria = after["maria@v1"]["spec"]
    assert maria["engine"] == "mariadb" and "version" not in maria
    assert maria["storage"] == {"size": "2Gi", "storageClassName": "fast"}
    assert maria["backup"]["schedule"] == {"cron": "0 3 * * *", "timeZone": "Europe/Berlin"}
    assert after["from-alpha@v1"]["spec"]["storage"] == {"size": "3Gi"}
    assert after["maria@v1alpha1"]["spec"]["version"] == "10.11"  # the engine's default, shown


def test_trimming_without_the_migration_strands_objects_stored_at_v1beta1(plane: Plane) -> None:
    """The control for step 4 above: what the migration prevents is real. Trim storedVersions by
    hand, drop v1beta1, and an object whose bytes are still v1beta1 no longer reads at any version."""
    t = plane.timeouts
    plane.delete_crd()
    plane.install(the_release_before())
    plane.create(
        {
            "apiVersion": "db.example.com/v1beta1",
            "kind": v1.KIND,
            "metadata": {"name": "stranded"},
            "spec": {"replicas": 1, "storage": {"size": "1Gi"}},
        }
    )
    plane.install(generate.crd(serve_all=True))
    crd = plane.crd()
    trimmed = plane.s.patch(
        f"{plane.api}/{crds.CRD_API}/{CRD_NAME}/status",
        json={"status": {"storedVersions": ["v1"]}},
        headers={"Content-Type": "application/merge-patch+json"},
        timeout=t(10),
    )
    assert trimmed.status_code == 200, trimmed.text
    assert crd["status"]["storedVersions"] == ["v1beta1", "v1"]
    plane.install(without(generate.crd(serve_all=True), "v1beta1", "v1"))

    def unreadable() -> None:
        resp = plane.s.get(plane.url("v1", "stranded"), timeout=t(10))
        assert resp.status_code >= 500, resp.text  # the apiserver cannot decode what it stored

    eventually(unreadable, timeout=t(60))
