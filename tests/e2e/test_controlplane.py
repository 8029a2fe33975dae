"""The local control plane behaves like a cluster: clients, GC, namespaces, workloads on kwok."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pykube
import pytest
import requests
from kubernetes import client as k8s_client
from mysqlkit import Timeouts

from envtest import ControlPlane, assert_matches, eventually

CRD_DIR = Path(__file__).resolve().parents[2] / "api" / "crd"
CLAIM_SPEC = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}

# kwok-driven pods, private planes or local binaries: skipped on other backends.
pytestmark = pytest.mark.envtest_local


def test_configmap_round_trip_with_pykube(kube: pykube.HTTPClient, namespace: str) -> None:
    pykube.ConfigMap(
        kube, {"metadata": {"name": "via-pykube", "namespace": namespace}, "data": {"k": "v"}}
    ).create()
    live = pykube.ConfigMap.objects(kube, namespace=namespace).get(name="via-pykube")
    assert_matches(live, {"metadata": {"name": "via-pykube", "uid": str}, "data": {"k": "v"}})


def test_configmap_round_trip_with_kubernetes_client(k8s: Any, namespace: str) -> None:
    core = k8s_client.CoreV1Api(k8s)
    core.create_namespaced_config_map(
        namespace,
        k8s_client.V1ConfigMap(metadata=k8s_client.V1ObjectMeta(name="via-kubernetes"), data={"k": "v"}),
    )
    live = core.read_namespaced_config_map("via-kubernetes", namespace)
    assert_matches(live, {"metadata": {"name": "via-kubernetes"}, "data": {"k": "v"}})


def test_orphan_is_garbage_collected(api: Any, namespace: str) -> None:
    owner = api.create(f"api/v1/namespaces/{namespace}/configmaps", {"metadata": {"name": "owner"}})
    api.create(
        f"api/v1/namespaces/{namespace}/configmaps",
        {
            "metadata": {
                "name": "dependent",
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": "owner",
                        "uid": owner["metadata"]["uid"],
                    }
                ],
            }
        },
    )
    assert api.delete(f"api/v1/namespaces/{namespace}/configmaps/owner") == 200

    def dependent_gone() -> None:
        assert api.get(f"api/v1/namespaces/{namespace}/configmaps/dependent") is None, "dependent still there"

    eventually(dependent_gone, timeout=api.timeouts(30))


def test_namespace_deletion_completes(api: Any) -> None:
    api.create("api/v1/namespaces", {"metadata": {"name": "doomed-ns", "labels": {"test": "deletion"}}})
    api.create("api/v1/namespaces/doomed-ns/configmaps", {"metadata": {"name": "content"}})
    api.delete("api/v1/namespaces/doomed-ns")

    def gone() -> None:
        ns = api.get("api/v1/namespaces/doomed-ns")
        assert ns is None, f"namespace still {ns['status'].get('phase')}"

    eventually(gone, timeout=api.timeouts(60))


def _statefulset(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": CLAIM_SPEC,
                }
            ],
        },
    }


def test_statefulset_with_volume_claims_becomes_ready(api: Any, namespace: str) -> None:
    api.create(f"apis/apps/v1/namespaces/{namespace}/statefulsets", _statefulset("db"))

    def ready() -> None:
        sts = api.get(f"apis/apps/v1/namespaces/{namespace}/statefulsets/db")
        assert_matches(sts, {"status": {"readyReplicas": 2}})

    eventually(ready, timeout=api.timeouts(60))
    claims = api.items(f"api/v1/namespaces/{namespace}/persistentvolumeclaims")
    assert sorted(c["metadata"]["name"] for c in claims) == ["data-db-0", "data-db-1"]
    assert {c["status"]["phase"] for c in claims} == {"Bound"}


def test_a_claim_is_provisioned_by_kwok_bound_by_the_binder_and_its_volume_deleted_after_it(
    api: Any, namespace: str
) -> None:
    """The split of a real cluster: the controller-manager's PV binder hands the claim to the
    StorageClass's provisioner (kwok), which makes a volume pre-bound to it; the binder binds them,
    releases the volume once the claim is deleted, and kwok deletes it."""
    claims = f"api/v1/namespaces/{namespace}/persistentvolumeclaims"
    claim = api.create(claims, {"metadata": {"name": "solo"}, "spec": CLAIM_SPEC})
    uid = claim["metadata"]["uid"]

    def bound() -> None:
        live = api.get(f"{claims}/solo")
        assert_matches(live, {"spec": {"volumeName": f"pvc-{uid}"}, "status": {"phase": "Bound"}})
        annotations = live["metadata"]["annotations"]
        assert annotations["volume.kubernetes.io/storage-provisioner"] == "kwok.x-k8s.io/volume"
        assert annotations["pv.kubernetes.io/bind-completed"] == "yes"
        # The binder's writes, not kwok's: kwok's own stages patch the claim beside the binder.
        writers = {f["manager"] for f in live["metadata"]["managedFields"]}
        assert "kwok" not in writers, writers

    eventually(bound, timeout=api.timeouts(30))
    volume = api.get(f"api/v1/persistentvolumes/pvc-{uid}")
    assert_matches(volume, {"spec": {"claimRef": {"uid": uid, "name": "solo"}}, "status": {"phase": "Bound"}})
    assert volume["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == "kwok.x-k8s.io/volume"
    events = api.items(f"api/v1/namespaces/{namespace}/events")
    reasons = {e["reason"] for e in events if e["involvedObject"].get("uid") == uid}
    assert "ClaimLost" not in reasons, reasons

    api.delete(f"{claims}/solo")

    def volume_gone() -> None:
        assert api.get(f"api/v1/persistentvolumes/pvc-{uid}") is None, "volume still there"

    eventually(volume_gone, timeout=api.timeouts(30))


def test_without_the_controller_manager_kwok_binds_claims_itself() -> None:
    """No PV binder in the plane: kwok's volume stages in full bind the claim."""
    timeouts = Timeouts("local")
    with ControlPlane(["kwok"], progress=lambda _m: None) as plane:
        session = plane.admin_session()
        claims = f"{plane.server}/api/v1/namespaces/default/persistentvolumeclaims"
        created = session.post(
            claims, json={"metadata": {"name": "solo"}, "spec": CLAIM_SPEC}, timeout=timeouts(10)
        )
        assert created.status_code == 201, created.text[:300]
        uid = created.json()["metadata"]["uid"]

        def bound() -> None:
            live = session.get(f"{claims}/solo", timeout=timeouts(10)).json()
            assert_matches(live, {"spec": {"volumeName": f"pvc-{uid}"}, "status": {"phase": "Bound"}})

        eventually(bound, timeout=timeouts(30))


def test_deployment_pods_become_ready(api: Any, namespace: str) -> None:
    labels = {"app": "web"}
    api.create(
        f"apis/apps/v1/namespaces/{namespace}/deployments",
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]},
                },
            },
        },
    )

    def ready() -> None:
        dep = api.get(f"apis/apps/v1/namespaces/{namespace}/deployments/web")
        assert_matches(dep, {"status": {"readyReplicas": 3, "availableReplicas": 3}})

    eventually(ready, timeout=api.timeouts(60))
    pods = api.items(f"api/v1/namespaces/{namespace}/pods", selector="app=web")
    assert len(pods) == 3
    assert all(p["spec"]["nodeName"] == "kwok-node-0" for p in pods)


def test_components_serve_certificates_of_the_plane_ca_and_kube_apiserver_runs_with_gogc_400(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Certificates of the plane's CA spare the controller-manager and scheduler making self-signed
    ones at start; GOGC=400 reaches kube-apiserver (envtest.plane.flags.ENVIRONMENT)."""
    monkeypatch.delenv("GOGC", raising=False)
    timeouts = Timeouts("local")
    with ControlPlane("kube-controller-manager,kube-scheduler", progress=lambda _m: None) as plane:
        ca = plane.workdir / "pki" / "ca.crt"
        for name in ("kube-controller-manager", "kube-scheduler"):
            port = next(
                a.split("=", 1)[1] for a in plane.processes[name].argv if a.startswith("--secure-port=")
            )
            with requests.Session() as session:
                session.trust_env = False
                resp = session.get(f"https://127.0.0.1:{port}/healthz", verify=str(ca), timeout=timeouts(10))
            assert resp.status_code == 200, f"{name}: {resp.status_code} {resp.text[:200]}"
        apiserver_pid = plane.processes["kube-apiserver"].pid
        assert apiserver_pid is not None
        assert psutil.Process(apiserver_pid).environ().get("GOGC") == "400"


@pytest.mark.envtest_private(job_pods="complete")
def test_second_plane_runs_beside_the_shared_one_and_completes_jobs(
    private_cluster: Any, cluster: Any, make_api: Any
) -> None:
    """Two planes at once, independent; on this one kwok completes Job pods by itself."""
    assert private_cluster.server != cluster.server
    own = make_api(private_cluster)
    own.create("api/v1/namespaces", {"metadata": {"name": "jobs"}})
    eventually(
        lambda: _assert_exists(own, "api/v1/namespaces/jobs/serviceaccounts/default"),
        timeout=own.timeouts(30),
    )
    own.create(
        "apis/batch/v1/namespaces/jobs/jobs",
        {
            "metadata": {"name": "once"},
            "spec": {
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]}
                }
            },
        },
    )

    def complete() -> None:
        job = own.get("apis/batch/v1/namespaces/jobs/jobs/once")
        assert_matches(job, {"status": {"succeeded": 1}})

    eventually(complete, timeout=own.timeouts(60))
    # The shared plane never saw any of it.
    assert make_api(cluster).get("api/v1/namespaces/jobs") is None


def _assert_exists(api: Any, path: str) -> None:
    assert api.get(path) is not None, f"{path} missing"


def _pids_of(pattern: str) -> set[int]:
    out = subprocess.run(
        ["pgrep", "-f", pattern], capture_output=True, text=True, timeout=Timeouts("local")(30)
    ).stdout
    return {int(p) for p in out.split()}


def test_cli_up_and_down_leave_no_process(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    # Binaries come from the real cache; only cluster state goes to the temporary XDG dir.
    from envtest import binaries

    env["KUBEBUILDER_ASSETS"] = str(binaries.cache_dir())
    env["ENVTEST_KWOK_STAGES"] = str(binaries.kwok_stages_dir())
    envtest = [sys.executable, "-m", "envtest.cli"]
    local = Timeouts("local")
    state_dir = tmp_path / "cache" / "envtest" / "clusters" / "cli-test"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*envtest, *args], env=env, capture_output=True, text=True, timeout=local(300))

    try:
        up = run("up", "--name", "cli-test", "--components", "minimal")
        assert up.returncode == 0, up.stderr
        assert up.stdout.startswith("export KUBECONFIG=")
        # Printed commands name this interpreter: they work from a shell without the venv on PATH.
        assert f"{sys.executable} -m envtest.cli down --name cli-test" in up.stderr
        assert f"{sys.executable} -m mysql_operator run --kubeconfig" in up.stderr
        kubeconfig = up.stdout.strip().split("=", 1)[1].strip("'")
        assert Path(kubeconfig).is_relative_to(state_dir)
        plane_pids = _pids_of(str(state_dir))
        assert plane_pids, "no process runs from the plane's state dir"

        api = pykube.HTTPClient(pykube.KubeConfig.from_file(kubeconfig))
        assert pykube.Namespace.objects(api).get(name="default").exists()
        env_out = run("env", "--name", "cli-test")
        assert env_out.stdout.strip() == up.stdout.strip()

        other = run("up", "--name", "cli-test", "--components", "all")
        assert other.returncode == 1
        assert "components: running etcd,kube-apiserver" in other.stderr, other.stderr
        # The same settings reuse the plane, and CRDs given now are applied to it.
        again = run("up", "--name", "cli-test", "--components", "minimal", "--crd", str(CRD_DIR))
        assert again.returncode == 0, again.stderr
        assert again.stdout == up.stdout
        crd = api.session.get(
            f"{api.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions", timeout=local(10)
        )
        assert "mysqlclusters.db.example.com" in {c["metadata"]["name"] for c in crd.json()["items"]}
    finally:
        down = run("down", "--name", "cli-test")
    assert down.returncode == 0, down.stderr
    eventually(lambda: _assert_none_left(state_dir), timeout=local(30))
    assert not state_dir.exists()


def _assert_none_left(state_dir: Path) -> None:
    left = _pids_of(str(state_dir))
    assert not left, f"processes still running from {state_dir}: {left}"
