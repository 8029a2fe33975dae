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
from envtest.clusters import Cluster
from envtest.plane.process import ManagedProcess
from mysql_operator.database.images import Images

sys.path.insert(0, str(Path(__file__).resolve().parent))
from samplewait import Outcome, SampleWait, WaitFailed  # hack/ is no package: found on sys.path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "api" / "samples" / "mysqlcluster_minimal.yaml"
NAMESPACE = "default"
SERVICE_ACCOUNT = "mysql-operator"
PREFIX = "make run"
"""Who is talking, in front of each line (hack/run_kind.py sets its own)."""


def say(message: str) -> None:
    print(f"[{PREFIX}] {message}", flush=True)


def bind_operator(cluster: Cluster) -> Path:
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


def wait_running(
    cluster: Cluster, name: str, operator: ManagedProcess, timeout: float = 180.0, pull_hint: str = ""
) -> Outcome:
    """Until `name` is Running ("Running") or deleted ("deleted"); WaitFailed on a pull failure, an
    exited operator or the timeout (hack/samplewait.py says what each prints)."""
    wait = SampleWait(
        cluster.session,
        cluster.server,
        NAMESPACE,
        name,
        operator,
        say=say,
        pull_hint=pull_hint,
        wanted=wanted,
    )
    return wait(timeout)


def wanted(image: str, configured: Images | None = None) -> bool:
    """An image the operator asks for now: it runs with this process's environment, so its
    MYSQL_OPERATOR_*_IMAGE are these. A pod stuck on another image is a leftover of an earlier run."""
    configured = configured or Images.from_env()
    return image == configured.backup or image.rsplit(":", 1)[0] == configured.mysql_repository


def hints(outcome: Outcome, name: str, kubeconfig: Path, kubectl: str, log: Path) -> str:
    """What to try in another shell once the wait is over; `kubectl` is the project's (see
    envtest.commands.kubectl): the one on PATH, if any, may be versions away from the cluster."""
    lines = [f"export KUBECONFIG={shlex.quote(str(kubeconfig))}"]
    if outcome == "deleted":
        lines.append(f"{kubectl} apply -n {NAMESPACE} -f {shlex.quote(str(SAMPLE))}")
    lines += [
        f"{kubectl} get mysqlclusters,statefulsets,pods,pvc,svc,secrets -n {NAMESPACE}",
        f"{kubectl} patch mysqlcluster {name} -n {NAMESPACE} --type=merge -p "
        + shlex.quote('{"spec":{"replicas":3}}'),
        f"tail -f {shlex.quote(str(log))}",
    ]
    said = "the sample is Running" if outcome == "Running" else f"{name} was deleted"
    return f"{said}. Try, in another shell:\n" + "\n".join(f"    {line}" for line in lines)


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
        name = sample["metadata"]["name"]
        outcome = wait_running(cluster, name, operator)
        # The plane's own kubectl by absolute path: none may be on PATH, or one of another version.
        kubectl = commands.kubectl(plane.version)
        say(hints(outcome, name, plane.kubeconfig, kubectl, operator.log_path))
        say("Ctrl-C stops the operator and the control plane.")
        while operator.running:
            time.sleep(1)
        say(f"the operator exited unexpectedly; its log:\n{operator.log_tail()}")
        return 1
    except WaitFailed as exc:
        say(str(exc))
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
