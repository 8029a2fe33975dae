"""What only a real kubelet can show: containers that run, probes that pass, a backup Job whose
container really archives a real volume, and the operator's conflict retries against kind.

Skipped on the local plane (kwok runs no container); on kind these are part of CI's smoke set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mysqlkit import FINALIZER, MySQLClusters, Timeouts, sample

from envtest import OperatorRunner, assert_matches, eventually
from envtest.faults import FaultProxy, Rule, conflict
from envtest.record.events import from_event, operator_user
from mysql_operator.database import images

FULL = sample("mysqlcluster_full.yaml")
BACKED_UP = {**FULL, "spec": {**FULL["spec"], "replicas": 1}}
MINIMAL = sample("mysqlcluster_minimal.yaml")


@pytest.fixture(autouse=True)
def _real_kubelet(cluster: Any) -> None:
    if cluster.backend != "kind":
        pytest.skip(f"needs containers that really run (kind), not {cluster.backend}")


def container_ready(mysql: MySQLClusters, cluster: str) -> dict[str, Any]:
    (pod,) = mysql.database_pods(cluster)
    # The server and its replication sidecar, both ready.
    statuses = [{"name": "mysql", "ready": True}, {"name": "replication", "ready": True}]
    assert_matches(pod, {"status": {"phase": "Running", "containerStatuses": statuses}}, unordered=True)
    return pod


@pytest.mark.kind_smoke
def test_final_backup_job_really_archives_the_stopped_data_volume(
    mysql: MySQLClusters, operator: OperatorRunner, timeouts: Timeouts
) -> None:
    mysql.create(BACKED_UP)
    cr = mysql.wait_running("sample-full")
    assert FINALIZER in cr["metadata"]["finalizers"]
    eventually(lambda: container_ready(mysql, "sample-full"), timeout=timeouts(30))

    assert mysql.delete("sample-full") == 200

    def job_succeeded() -> dict[str, Any]:
        job = mysql.child("job", "sample-full")
        assert job is not None, "no final-backup Job yet"
        assert (job.get("status") or {}).get("succeeded") == 1, f"Job status: {job.get('status')}"
        return job

    eventually(job_succeeded, timeout=timeouts(90))
    mysql.wait_gone(
        "sample-full", timeout=mysql.timeouts(90)
    )  # the finalizer came off once the archive existed

    # Read the archive back from the backup volume in a pod of our own: the Job's word is not proof.
    pod_name = "read-archive"
    script = 'set -eu; f=$(ls /backup/final-*.tar.gz); echo "archive $f"; tar -tzf "$f"'
    mysql.api.create(
        f"api/v1/namespaces/{mysql.namespace}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "ls",
                        "image": images.current().backup,
                        "command": ["sh", "-c", script],
                        "volumeMounts": [{"name": "backup", "mountPath": "/backup", "readOnly": True}],
                    }
                ],
                "volumes": [{"name": "backup", "persistentVolumeClaim": {"claimName": "sample-full-backup"}}],
            },
        },
    )

    def succeeded() -> None:
        pod = mysql.api.get(f"api/v1/namespaces/{mysql.namespace}/pods/{pod_name}")
        assert pod and pod["status"].get("phase") == "Succeeded", (pod or {}).get("status")

    eventually(succeeded, timeout=timeouts(30))
    log_url = mysql.api.url(f"api/v1/namespaces/{mysql.namespace}/pods/{pod_name}/log")
    resp = mysql.api.session.get(log_url, timeout=timeouts(30))
    resp.raise_for_status()
    assert "archive /backup/final-" in resp.text
    assert "./ibdata1" in resp.text, f"the archive lacks the datadir:\n{resp.text}"


@pytest.mark.kind_smoke
def test_status_conflicts_are_retried_until_the_cluster_runs(
    mysql: MySQLClusters, faults: FaultProxy, operator: OperatorRunner, timeouts: Timeouts
) -> None:
    rule = faults.add(Rule(conflict(), verb="patch", resource="mysqlclusters/status", times=3))
    mysql.create(MINIMAL)
    mysql.wait_running("sample")
    eventually(lambda: container_ready(mysql, "sample"), timeout=timeouts(30))
    assert faults.injections() >= 3, f"conflicts injected: {faults.injections()} ({rule})"
    assert operator.operator.api_requests(verb="patch", resource="mysqlclusters/status", code="409") >= 3


@pytest.mark.kind_smoke
def test_the_record_reads_the_operators_requests_from_kinds_audit_log(
    mysql: MySQLClusters, operator: OperatorRunner, cluster: Any, timeouts: Timeouts
) -> None:
    # A cluster made by `envtest kind up` writes kube-apiserver's audit log into a host folder (the
    # kubeadm patch of envtest.record.kindaudit): the operator's own requests must be in it, by its user.
    assert cluster.audit_log is not None, cluster.audit_note
    user = operator_user(mysql.namespace)
    mysql.create(MINIMAL)

    def statefulset_made() -> None:
        assert mysql.child("statefulset", "sample") is not None, "no StatefulSet yet"

    eventually(statefulset_made, timeout=timeouts(30))

    def operator_created_the_statefulset() -> None:
        requests = [r for r in map(from_event, read_events(cluster.audit_log)) if r and r.user == user]
        made = [r for r in requests if r.verb == "create" and r.resource == "statefulsets"]
        assert made, f"{len(requests)} requests by {user} in {cluster.audit_log}, no StatefulSet create"
        assert made[0].namespace == mysql.namespace and made[0].code == 201, made[0]

    eventually(operator_created_the_statefulset, timeout=timeouts(30))


def read_events(path: Path) -> list[dict[str, Any]]:
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:  # a line the apiserver is still writing
            continue
    return events
