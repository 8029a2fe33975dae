"""`make run`: a local control plane, the CRD, the reference operator and the minimal sample,
in the foreground until the sample is Running and then until Ctrl-C, which stops everything.

The operator runs as its own process (`sys.executable -m mysql_operator run`), as a ServiceAccount bound
only to the generated ClusterRole, exactly as it would in a cluster.
"""

from __future__ import annotations

import shlex
import signal
import sys
import time
from pathlib import Path

import yaml

from envtest import ControlPlane, LocalCluster, commands, objects
from envtest.plane.process import ManagedProcess

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "api" / "samples" / "mysqlcluster_minimal.yaml"
NAMESPACE = "default"
SERVICE_ACCOUNT = "mysql-operator"


def say(message: str) -> None:
    print(f"[make run] {message}", flush=True)


def bind_operator(cluster: LocalCluster) -> Path:
    for source, doc in objects.load_manifests([ROOT / "operator" / "config" / "rbac.yaml"]):
        objects.apply(cluster.session, cluster.server, doc, source=source)
    objects.apply(
        cluster.session,
        cluster.server,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "mysql-operator"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "mysql-operator",
            },
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}],
        },
    )
    return cluster.identity_kubeconfig(
        NAMESPACE,
        SERVICE_ACCOUNT,
        cluster.kubeconfig.parent / "operator.kubeconfig",
        expiration_seconds=24 * 3600,
    )


def wait_running(cluster: LocalCluster, name: str, operator: ManagedProcess, timeout: float = 180.0) -> None:
    url = f"{cluster.server}/apis/db.example.com/v1beta1/namespaces/{NAMESPACE}/mysqlclusters/{name}"
    last, deadline = None, time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not operator.running:
            raise SystemExit(f"the operator exited; its log:\n{operator.log_tail()}")
        status = cluster.session.get(url, timeout=10).json().get("status") or {}
        seen = (status.get("phase"), status.get("readyReplicas"))
        if seen != last:
            say(f"{name}: phase={seen[0] or '-'} readyReplicas={seen[1] or 0}")
            last = seen
        if status.get("phase") == "Running":
            return
        time.sleep(0.5)
    raise SystemExit(f"{name} not Running after {timeout:.0f}s; operator log:\n{operator.log_tail()}")


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    # SIGTERM (e.g. from a CI runner) takes the same clean path as Ctrl-C.
    signal.signal(signal.SIGTERM, _interrupt)
    plane = ControlPlane(crds=[ROOT / "api" / "crd"], progress=say)
    operator: ManagedProcess | None = None
    try:
        plane.start()
        cluster = LocalCluster.from_plane(plane, name="make-run")
        kubeconfig = bind_operator(cluster)
        operator = ManagedProcess(
            "mysql-operator",
            [
                sys.executable,
                "-m",
                "mysql_operator",
                "run",
                "--kubeconfig",
                str(kubeconfig),
                "--metrics-port",
                "0",
                "--health-port",
                "0",
            ],
            log_path=plane.workdir / "logs" / "operator.log",
        )
        operator.start()
        say(
            f"operator running as system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}; "
            f"log {operator.log_path}"
        )
        sample = yaml.safe_load(SAMPLE.read_text())
        objects.apply(
            cluster.session,
            cluster.server,
            {**sample, "metadata": {**sample["metadata"], "namespace": NAMESPACE}},
        )
        say(f"applied {SAMPLE.relative_to(ROOT)}")
        wait_running(cluster, sample["metadata"]["name"], operator)
        kc = shlex.quote(str(plane.kubeconfig))
        # The plane's own kubectl by absolute path: none may be on PATH, or one of another version.
        kubectl = commands.kubectl(plane.version)
        say("the sample is Running. Try, in another shell:")
        print(
            f"    export KUBECONFIG={kc}\n"
            f"    {kubectl} get mysqlclusters,statefulsets,pods,pvc,svc,secrets -n {NAMESPACE}\n"
            f"    {kubectl} patch mysqlcluster {sample['metadata']['name']} --type=merge -p "
            '\'{"spec":{"replicas":3}}\'\n'
            f"    tail -f {shlex.quote(str(operator.log_path))}",
            flush=True,
        )
        say("Ctrl-C stops the operator and the control plane.")
        while operator.running:
            time.sleep(1)
        say(f"the operator exited unexpectedly; its log:\n{operator.log_tail()}")
        return 1
    except KeyboardInterrupt:
        say("stopping")
        return 0
    finally:
        if operator is not None:
            operator.stop()
        plane.stop()
        say("everything stopped")


if __name__ == "__main__":
    sys.exit(main())
