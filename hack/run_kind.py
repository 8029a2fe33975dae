"""`make run-kind`: the reference operator on the host, attached to a kind cluster (`make kind-up`'s,
reused; created if missing), with the minimal sample until Running, then until Ctrl-C. The cluster stays.

The same ServiceAccount binding, sample and wait as `make run` (hack/run.py), on real pods: mysql is
pulled from Docker Hub, or, on a cluster from the offline node image, the test kit's stand-ins that
`make kind-standins` loaded (`make run-kind` sets MYSQL_OPERATOR_*_IMAGE from tests/kit/standins.py env,
as `make e2e-kind` does). An image the node cannot pull ends the wait at once, naming the image, the
kubelet's message and what to run (hack/samplewait.py); a sample deleted meanwhile does not.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run

from envtest import commands, crds, kind, objects
from envtest.clusters import KindCluster
from envtest.plane.process import ManagedProcess
from mysql_operator.database.images import MYSQL_ENV


def pull_hint(name: str, environ: Mapping[str, str] = os.environ) -> str:
    """What to do about an image the kind node cannot pull, given the images the operator was told."""
    standins = f"{commands.python()} tests/kit/standins.py env --name {name}"
    if not environ.get(MYSQL_ENV):
        return (
            f"{MYSQL_ENV} is not set, so the pods ask Docker Hub for mysql. A cluster from envtest's "
            "offline node image has no registry: `make run-kind` loads the test kit's stand-ins into it "
            f"and sets the variables (`{standins}` prints them)."
        )
    return (
        f"{MYSQL_ENV}={environ[MYSQL_ENV]}: an image of that name must be in the node; "
        f"`make kind-standins` loads the stand-ins into cluster {name!r} (`{standins}` prints the variables)."
    )


def project_kubectl(version: str) -> str:
    """The kubectl installed with the plane's binaries: of the cluster's version if cached, else the
    pinned one (the kind node runs the pin or one next to it); a bare `kubectl` only if neither is."""
    exact = commands.kubectl(version)
    return exact if exact != "kubectl" else commands.kubectl()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", default="envtest", help="kind cluster name")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the sample to be Running")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, run._interrupt)
    run.PREFIX = "make run-kind"
    cluster = KindCluster(
        name=args.name, config_file=kind.DEFAULT_CONFIG, delete_on_close=False, progress=run.say
    )
    logs = Path(tempfile.mkdtemp(prefix="run-kind-"))
    operator: ManagedProcess | None = None
    try:
        crds.install(cluster.session, cluster.server, [run.ROOT / "api" / "crd"])
        kubeconfig = run.bind_operator(cluster)
        command = [sys.executable, "-m", "mysql_operator", "run", "--kubeconfig", str(kubeconfig)]
        command += ["--metrics-port", "0", "--health-port", "0"]
        operator = ManagedProcess("mysql-operator", command, log_path=logs / "operator.log")
        operator.start()
        run.say(f"operator on the host, attached to kind cluster {args.name!r}; log {operator.log_path}")
        sample = yaml.safe_load(run.SAMPLE.read_text())
        body = {**sample, "metadata": {**sample["metadata"], "namespace": run.NAMESPACE}}
        objects.apply(cluster.session, cluster.server, body)
        name = sample["metadata"]["name"]
        outcome = run.wait_running(
            cluster, name, operator, timeout=args.timeout, pull_hint=pull_hint(args.name)
        )
        kubectl = project_kubectl(cluster.version)
        run.say(run.hints(outcome, name, cluster.kubeconfig, kubectl, operator.log_path))
        run.say("Ctrl-C stops the operator; the cluster stays (make kind-down deletes it)")
        while operator.running:
            time.sleep(1)
        run.say(f"the operator exited unexpectedly; its log:\n{operator.log_tail()}")
        return 1
    except run.WaitFailed as exc:
        run.say(str(exc))
        return 1
    except KeyboardInterrupt:
        run.say("stopping")
        return 0
    finally:
        if operator is not None:
            operator.stop()
        cluster.close()


if __name__ == "__main__":
    sys.exit(main())
