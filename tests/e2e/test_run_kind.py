"""The operator attached to kind the way a developer attaches it (`make run-kind`, hack/run_kind.py):
a process on the host, `python -m mysql_operator run --kubeconfig <file>`, as a ServiceAccount bound
only to its RBAC, with the images its environment names (`make kind-smoke` sets the test kit's
stand-ins on a cluster from the offline node image, chosen as `make run-kind` and `make e2e-kind`
choose them), and a real kubelet running its pods.

Unlike `make run-kind` it watches only the test's namespace (`--namespace`): the cluster is shared
with other tests' operators. Skipped off kind (kwok runs no container); part of the kind smoke set.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mysqlkit import FINALIZER, MySQLClusters, Timeouts, sample

from envtest import assert_matches, eventually
from mysql_operator.api.v1 import parse_spec
from mysql_operator.database import images

MINIMAL = sample("mysqlcluster_minimal.yaml")


class HostOperator:
    """`python -m mysql_operator run --kubeconfig …` in a process of its own, its output in `log`."""

    def __init__(self, kubeconfig: Path, namespace: str, log: Path, timeouts: Timeouts) -> None:
        self.log, self.timeouts = log, timeouts
        command = [sys.executable, "-m", "mysql_operator", "run", "--kubeconfig", str(kubeconfig)]
        command += ["--namespace", namespace, "--metrics-port", "0", "--health-port", "0"]
        with log.open("w") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    def tail(self) -> str:
        return "\n".join(self.log.read_text().splitlines()[-30:])

    def assert_running(self) -> None:
        assert self.proc.poll() is None, f"the operator exited with {self.proc.returncode}:\n{self.tail()}"

    def stop(self) -> int:
        """SIGTERM, as Ctrl-C in `make run-kind` ends it; its exit code (killed after the wait: -9)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=self.timeouts(30))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def host_operator(
    cluster: Any, envtest_context: Any, namespace: str, timeouts: Timeouts
) -> Iterator[HostOperator]:
    if cluster.backend != "kind":
        pytest.skip(f"needs containers that really run (kind), not {cluster.backend}")
    # The in-process operator's identity (envtest-operator, the operator's RBAC only), as a file.
    kubeconfig = envtest_context.operator_kubeconfig(cluster, namespace)
    log = envtest_context.log_dir() / "host-operator.log"
    envtest_context.operator_logs.append(log)  # in the test's artifacts if it fails
    operator = HostOperator(kubeconfig, namespace, log, timeouts)
    try:
        yield operator
    finally:
        operator.stop()


@pytest.mark.kind_smoke
def test_operator_attached_from_the_host_by_kubeconfig_runs_the_sample_until_deleted(
    host_operator: HostOperator, mysql: MySQLClusters, timeouts: Timeouts
) -> None:
    mysql.create(MINIMAL)
    cr = mysql.wait_running("sample")
    host_operator.assert_running()
    assert FINALIZER in cr["metadata"]["finalizers"], "the host's operator did not add its finalizer"

    # The pod runs the image the operator's environment named (the stand-in on an offline cluster).
    spec = parse_spec(cr)
    wanted = images.current().database(spec.engine, spec.image_tag)

    def ready() -> dict[str, Any]:
        (pod,) = mysql.database_pods("sample")
        assert_matches(
            pod,
            {
                "spec": {"containers": [{"name": "mysql", "image": wanted}, {"name": "replication"}]},
                "status": {
                    "phase": "Running",
                    "containerStatuses": [
                        {"name": "mysql", "ready": True},
                        {"name": "replication", "ready": True},
                    ],
                },
            },
            unordered=["status.containerStatuses"],
        )
        return pod

    eventually(ready, timeout=timeouts(30), description=f"the sample's pod Running {wanted}")

    # Its finalizer comes off by the host's operator's hand (no backup: no Job to wait for).
    assert mysql.delete("sample") == 200
    mysql.wait_gone("sample")
    host_operator.assert_running()
    assert host_operator.stop() == 0, f"no clean stop on SIGTERM:\n{host_operator.tail()}"
