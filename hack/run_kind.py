"""`make run-kind`: the reference operator on the host, attached to a kind cluster (`make kind-up`'s,
reused; created if missing), with the minimal sample until Running, then until Ctrl-C. The cluster stays.

The same ServiceAccount binding, sample and wait as `make run` (hack/run.py), on real pods: mysql is
pulled from Docker Hub, or, on a cluster from the offline node image, the test kit's stand-ins that
`make kind-standins` loaded (`make run-kind` sets MYSQL_OPERATOR_*_IMAGE from tests/kit/standins.py env).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run

from envtest import crds, kind, objects
from envtest.clusters import KindCluster
from envtest.plane.process import ManagedProcess


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", default="envtest", help="kind cluster name")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the sample to be Running")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, run._interrupt)
    cluster = KindCluster(
        name=args.name, config_file=kind.DEFAULT_CONFIG, delete_on_close=False, progress=run.say
    )
    logs = Path(tempfile.mkdtemp(prefix="run-kind-"))
    operator: ManagedProcess | None = None
    try:
        crds.install(cluster.session, cluster.server, [run.ROOT / "api" / "crd"])
        kubeconfig = run.bind_operator(cluster)  # type: ignore[arg-type]
        command = [sys.executable, "-m", "mysql_operator", "run", "--kubeconfig", str(kubeconfig)]
        command += ["--metrics-port", "0", "--health-port", "0"]
        operator = ManagedProcess("mysql-operator", command, log_path=logs / "operator.log")
        operator.start()
        run.say(f"operator on the host, attached to kind cluster {args.name!r}; log {operator.log_path}")
        sample = yaml.safe_load(run.SAMPLE.read_text())
        body = {**sample, "metadata": {**sample["metadata"], "namespace": run.NAMESPACE}}
        objects.apply(cluster.session, cluster.server, body)
        run.wait_running(cluster, sample["metadata"]["name"], operator, timeout=args.timeout)  # type: ignore[arg-type]
        run.say("the sample is Running. Try, in another shell:")
        print(f"    export KUBECONFIG={shlex.quote(str(cluster.kubeconfig))}", flush=True)
        print(f"    kubectl get mysqlclusters,statefulsets,pods,pvc -n {run.NAMESPACE}", flush=True)
        run.say("Ctrl-C stops the operator; the cluster stays (make kind-down deletes it)")
        while operator.running:
            time.sleep(1)
        run.say(f"the operator exited unexpectedly; its log:\n{operator.log_tail()}")
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        if operator is not None:
            operator.stop()
        cluster.close()


if __name__ == "__main__":
    sys.exit(main())
